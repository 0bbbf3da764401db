//! Queued waiters' heartbeats: one task per client per native mutex that has local waiters
//! refreshes all of their places in one round trip every `waiter_heartbeat` (`scripts/beat.lua`),
//! so idle waiters cost the server one script per client process per beat, not one per waiter.
//!
//! The beat also tells a waiter when to look again, which is what its own heartbeat used to do:
//! when the lock was handed to it and the message was lost, when its place was dropped (it was
//! stopped for longer than the heartbeat timeout), when the lock is free (its holder's lease ran
//! out), and when the beat failed (each waiter then meets the error itself, and the core's
//! failover tolerance applies). A beat comes at the holder's lease end too (as the last beat or
//! a waiter's attempt read it), if that is sooner.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::Settings;
use crate::conn::Conn;
use crate::keys::LockKeys;
use crate::script_set::Scripts;

/// The local waiters of one lock, by owner, and when they asked for a beat sooner.
#[derive(Default)]
struct Group {
    waiters: HashMap<String, Arc<Notify>>,
    /// The earliest holder's lease end a waiter reported since the last beat.
    sooner: Option<Instant>,
    /// Wakes the beat when `sooner` is set.
    wake: Arc<Notify>,
    /// The beat's task (a new one starts if it ended: its runtime was shut down).
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Every lock's local waiters, and what a beat needs to run.
struct Shared {
    groups: Mutex<HashMap<String, Group>>,
    conn: Conn,
    scripts: Arc<Scripts>,
    heartbeat: Duration,
    waiter_timeout: Duration,
    command_timeout: Duration,
}

impl Shared {
    fn groups(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One client's beats (its beat tasks end when it is dropped).
pub(crate) struct Beats(Arc<Shared>);

impl std::fmt::Debug for Beats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Beats")
            .field("locks", &self.0.groups().len())
            .finish()
    }
}

/// One waiter's place in its lock's beat; leaving it (dropping) takes the waiter out.
#[derive(Debug)]
pub(crate) struct Beating {
    shared: Weak<Shared>,
    lock: String,
    owner: String,
    look: Arc<Notify>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Beats")
    }
}

impl Beating {
    /// Resolves when the beat says this waiter should look again.
    pub(crate) async fn look(&self) {
        self.look.notified().await
    }

    /// The holder's lease ends at `at`, as this waiter's last attempt read: the beat comes
    /// then at the latest (the holder may have died).
    pub(crate) fn holder_ends(&self, at: Instant) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let mut g = shared.groups();
        if let Some(group) = g.get_mut(&self.lock) {
            if group.sooner.is_none_or(|s| at < s) {
                group.sooner = Some(at);
                group.wake.notify_one();
            }
        }
    }
}

impl Drop for Beating {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            if let Some(group) = shared.groups().get_mut(&self.lock) {
                group.waiters.remove(&self.owner);
            }
        }
    }
}

impl Beats {
    /// The beats of a client on `conn`.
    pub(crate) fn new(conn: Conn, scripts: Arc<Scripts>, settings: &Settings) -> Beats {
        Beats(Arc::new(Shared {
            groups: Mutex::default(),
            conn,
            scripts,
            heartbeat: settings.waiter_heartbeat,
            waiter_timeout: settings.waiter_timeout(),
            command_timeout: settings.command_timeout,
        }))
    }

    /// Adds queued waiter `owner` of the native mutex `keys` to its lock's beat, starting the
    /// beat if it is the lock's first local waiter.
    pub(crate) fn join(&self, keys: &LockKeys, owner: &str) -> Beating {
        let look = Arc::new(Notify::new());
        let mut g = self.0.groups();
        let group = g.entry(keys.lock.clone()).or_default();
        group.waiters.insert(owner.to_string(), look.clone());
        if group.task.as_ref().is_none_or(|t| t.is_finished()) {
            group.task = Some(tokio::spawn(run(Arc::downgrade(&self.0), keys.clone())));
        }
        drop(g);
        Beating {
            shared: Arc::downgrade(&self.0),
            lock: keys.lock.clone(),
            owner: owner.to_string(),
            look,
        }
    }
}

/// The beat of one lock: ends (and forgets the lock) when it has no local waiter left, or the
/// client is gone.
async fn run(shared: Weak<Shared>, keys: LockKeys) {
    let Some(heartbeat) = shared.upgrade().map(|s| s.heartbeat) else {
        return;
    };
    let mut next = Instant::now() + heartbeat;
    loop {
        let wake = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let mut g = shared.groups();
            let Some(group) = g.get_mut(&keys.lock) else {
                return;
            };
            if let Some(sooner) = group.sooner.take() {
                next = next.min(sooner);
            }
            group.wake.clone()
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = wake.notified() => continue,
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let waiters: Vec<(String, Arc<Notify>)> = {
            let mut g = shared.groups();
            match g.get(&keys.lock) {
                Some(group) if !group.waiters.is_empty() => group
                    .waiters
                    .iter()
                    .map(|(o, n)| (o.clone(), n.clone()))
                    .collect(),
                _ => {
                    g.remove(&keys.lock);
                    return;
                }
            }
        };
        let sent = Instant::now();
        next = sent + heartbeat;
        let mut inv = shared.scripts.beat.prepare_invoke();
        inv.key(&keys.lock)
            .key(&keys.queue)
            .key(&keys.waiters)
            .arg(shared.waiter_timeout.as_millis() as u64);
        for (owner, _) in &waiters {
            inv.arg(owner);
        }
        let reply = shared
            .conn
            .invoke::<Vec<i64>>(&inv, shared.command_timeout, "waiter heartbeat")
            .await;
        match reply {
            Ok(reply) if reply.len() == waiters.len() + 1 => {
                let pttl = reply[0];
                for ((_, look), status) in waiters.iter().zip(&reply[1..]) {
                    if pttl == FREE || *status != REFRESHED {
                        look.notify_one();
                    }
                }
                if pttl >= 0 {
                    // The holder may die: its lease end is the next look.
                    next = next.min(sent + Duration::from_millis(pttl as u64 + 1));
                }
            }
            // An error (or a reply of another shape): every waiter looks itself, and meets it.
            _ => waiters.iter().for_each(|(_, look)| look.notify_one()),
        }
    }
}

/// `beat.lua`'s pttl for a free lock.
const FREE: i64 = -2;
/// `beat.lua`'s status of a waiter whose place was refreshed.
const REFRESHED: i64 = 0;
