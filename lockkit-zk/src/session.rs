//! One ZooKeeper session per `Locks` handle, shared by all its locks, and the task that turns
//! session events into guard states.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lockkit_core::{Error, ErrorKind, Result, StateCell};
use tokio::task::JoinHandle;
use zookeeper_client as zk;

use crate::config::ZkConfig;

/// A live guard: what session events and `close` need to reach it.
#[derive(Debug)]
pub(crate) struct Tracked {
    pub session_id: i64,
    pub state: StateCell,
    pub client: zk::Client,
    pub paths: Vec<String>,
    pub released: Arc<std::sync::atomic::AtomicBool>,
}

/// The shared state of one `Locks` handle.
#[derive(Debug)]
pub(crate) struct Session {
    pub cfg: ZkConfig,
    pub acls: Vec<zk::Acl>,
    client: Mutex<Option<zk::Client>>,
    live: Mutex<HashMap<u64, Tracked>>,
    next_id: AtomicU64,
    /// Watch events delivered to waiters (predecessor or lease-set watches), for the herd test.
    wakes: AtomicU64,
    /// Creates interrupted by a connection loss, looked up by their protected prefix.
    lookups: AtomicU64,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(task) = self
            .task
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Session {
    pub(crate) async fn open(cfg: ZkConfig) -> Result<Arc<Session>> {
        let client = cfg.connect().await?;
        let acls = cfg.acl.acls();
        let session = Arc::new(Session {
            cfg,
            acls,
            client: Mutex::new(Some(client.clone())),
            live: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            wakes: AtomicU64::new(0),
            lookups: AtomicU64::new(0),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(watch_session(Arc::downgrade(&session), client));
        *lock(&session.task) = Some(task);
        Ok(session)
    }

    /// The current client (a new one after a session expiry).
    pub(crate) fn client(&self) -> Result<zk::Client> {
        lock(&self.client)
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::Closed, "the ZooKeeper handle was closed"))
    }

    /// Tracks a guard so session events reach it. Returns the id to untrack it with.
    pub(crate) fn track(&self, tracked: Tracked) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.live).insert(id, tracked);
        id
    }

    pub(crate) fn untrack(&self, id: u64) {
        lock(&self.live).remove(&id);
    }

    fn each_state(&self, session_id: i64, f: impl Fn(&StateCell) -> bool) {
        let live = lock(&self.live);
        for t in live.values() {
            if t.session_id == session_id {
                f(&t.state);
            }
        }
    }

    pub(crate) fn count_wake(&self) {
        self.wakes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_lookup(&self) {
        self.lookups.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    pub(crate) fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }

    /// Stops the session task, turns every live guard Lost and deletes its nodes, so other
    /// clients get the locks now rather than when the guards are dropped.
    pub(crate) async fn close(&self) -> Result<()> {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
        lock(&self.client).take();
        let live = std::mem::take(&mut *lock(&self.live));
        let mut first_error = None;
        for t in live.into_values() {
            t.released.store(true, Ordering::Release);
            t.state.mark_lost();
            for path in &t.paths {
                if let Err(e) =
                    crate::queue::delete_node(&t.client, path, self.cfg.command_timeout).await
                {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Creates the directories of `path` (containers, like Curator's
    /// `creatingParentContainersIfNeeded`), with our ACL on the last one.
    pub(crate) async fn ensure_dir(&self, client: &zk::Client, path: &str) -> Result<()> {
        let (parent, _) = path.rsplit_once('/').unwrap_or(("", path));
        let open = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
        let ours = zk::CreateMode::Container.with_acls(zk::Acls::new(&self.acls));
        let mut attempt = 0;
        loop {
            let mut result = Ok(());
            if !parent.is_empty() {
                result = client.mkdir(parent, &open).await;
            }
            if result.is_ok() {
                result = match client.create(path, &[], &ours).await {
                    Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                    Err(e) => Err(e),
                };
            }
            match result {
                Ok(()) => return Ok(()),
                Err(e) if crate::error::is_transient(&e) && attempt < 50 => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(crate::error::map(e, &format!("cannot create {path}"))),
            }
        }
    }
}

/// zookeeper-client 0.11's tick: connection timeout / 8, or session timeout / 20 when the
/// connection timeout is zero or over 3/5 of the session timeout. A connection that stays silent
/// (or a connect that gets no answer) for 8 ticks is given up.
fn client_tick(session_timeout: Duration, connection_timeout: Duration) -> Duration {
    if connection_timeout.is_zero() || connection_timeout > session_timeout * 3 / 5 {
        session_timeout / 20
    } else {
        connection_timeout / 8
    }
}

/// How long after the server's last reply the client may report a silent connection as
/// Disconnected: it checks every tick and gives up after 8 ticks without a reply, so it notices
/// at most 9 ticks after the last reply.
fn silence_noticed_within(session_timeout: Duration, connection_timeout: Duration) -> Duration {
    client_tick(session_timeout, connection_timeout) * 9
}

/// How long a guard stays Suspect after the client reports a disconnection before it turns Lost:
/// two thirds of what is left of the session timeout once the client noticed the silence. The
/// server expires the session a session timeout after the last request it got, which it got at
/// most half a round trip before our last reply; so the guard turns Lost before the server can
/// have expired the session, with a third of the rest as slack for that and for scheduling.
fn lost_after_disconnect(session_timeout: Duration, connection_timeout: Duration) -> Duration {
    session_timeout.saturating_sub(silence_noticed_within(session_timeout, connection_timeout)) * 2
        / 3
}

/// Follows the session: connection loss makes guards Suspect, reconnection Held again, expiry
/// (or a disconnection long enough that the server may expire the session, see
/// [`lost_after_disconnect`]) Lost. After an expiry it opens a new session for new acquires.
async fn watch_session(session: Weak<Session>, mut client: zk::Client) {
    loop {
        let sid = client.session_id().0;
        let mut states = client.state_watcher();
        // Turning Lost before the server can expire the session means a guard is never Suspect
        // while another client may already hold the lock. (Curator waits the whole timeout from
        // the disconnection, which can be too late.)
        let Some(connection_timeout) = session.upgrade().map(|s| s.cfg.connection_timeout()) else {
            return;
        };
        let lost_after = lost_after_disconnect(client.session_timeout(), connection_timeout);
        drop(client);
        let mut disconnected_at: Option<tokio::time::Instant> = None;
        loop {
            let event = match disconnected_at {
                Some(at) => {
                    match tokio::time::timeout_at(at + lost_after, states.changed()).await {
                        Ok(s) => s,
                        Err(_) => {
                            // The server may expire the session now: stop trusting the locks.
                            let Some(s) = session.upgrade() else { return };
                            tracing::warn!(
                                session = sid,
                                "zookeeper: disconnected too long to trust the session; locks lost"
                            );
                            s.each_state(sid, StateCell::mark_lost);
                            disconnected_at = None;
                            continue;
                        }
                    }
                }
                None => states.changed().await,
            };
            let Some(s) = session.upgrade() else { return };
            match event {
                zk::SessionState::Disconnected => {
                    tracing::debug!(session = sid, "zookeeper: disconnected; locks suspect");
                    disconnected_at.get_or_insert_with(tokio::time::Instant::now);
                    s.each_state(sid, StateCell::mark_suspect);
                }
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    disconnected_at = None;
                    s.each_state(sid, StateCell::mark_held);
                }
                zk::SessionState::Expired
                | zk::SessionState::AuthFailed
                | zk::SessionState::Closed => {
                    tracing::warn!(session = sid, state = ?event, "zookeeper: session ended; locks lost");
                    s.each_state(sid, StateCell::mark_lost);
                    break;
                }
            }
        }
        // Open a new session for new acquires; the old guards stay Lost.
        let mut backoff = Duration::from_millis(100);
        client = loop {
            let Some(s) = session.upgrade() else { return };
            let cfg = s.cfg.clone();
            drop(s);
            match cfg.connect().await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(error = %e, "zookeeper: cannot open a new session yet");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        };
        let Some(s) = session.upgrade() else { return };
        let mut slot = lock(&s.client);
        if slot.is_none() {
            return; // closed meanwhile
        }
        *slot = Some(client.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_disconnection_turns_lost_before_the_server_can_expire_the_session() {
        let ms = Duration::from_millis;
        assert_eq!(silence_noticed_within(ms(10_000), ms(5_000)), ms(5_625));
        assert_eq!(silence_noticed_within(ms(2_000), ms(5_000)), ms(900));
        assert_eq!(
            silence_noticed_within(ms(10_000), Duration::ZERO),
            ms(4_500)
        );
        for (session, connect) in [
            (ms(10_000), ms(5_000)),
            (ms(2_000), ms(5_000)),
            (ms(1_000), ms(5_000)),
            (ms(60_000), ms(5_000)),
            (ms(10_000), Duration::ZERO),
            (ms(10_000), ms(1_000)),
            (ms(6_000), ms(3_600)),
        ] {
            let after = lost_after_disconnect(session, connect);
            let lost = silence_noticed_within(session, connect) + after;
            assert!(after > Duration::ZERO, "{session:?}/{connect:?}");
            assert!(
                lost < session * 9 / 10,
                "{session:?}/{connect:?}: Lost {lost:?} after the last reply"
            );
        }
    }

    /// After a server hangs, the client notices, may try the hung server again first (it
    /// reshuffles the hosts), waits one connection timeout there, then reaches another server
    /// after a short delay (up to 100 ms for the second host). That must fit before the lost
    /// deadline, or a hung follower would cost the session's locks.
    #[test]
    fn a_hung_server_retried_first_still_leaves_time_to_resume_elsewhere() {
        let ms = Duration::from_millis;
        for session in [ms(1_000), ms(2_000), ms(4_000), ms(10_000), ms(30_000)] {
            let cfg = ZkConfig::from_lock_config(&lockkit_core::LockConfig::new(format!(
                "zk://h1,h2,h3/x?session_timeout={}ms",
                session.as_millis()
            )))
            .unwrap();
            let conn = cfg.connection_timeout();
            let noticed = silence_noticed_within(session, conn);
            let resumed = noticed + client_tick(session, conn) * 8 + ms(100);
            let lost = noticed + lost_after_disconnect(session, conn);
            assert!(
                resumed + session / 10 < lost,
                "{session:?}: resumed after {resumed:?}, Lost after {lost:?}"
            );
        }
    }
}
