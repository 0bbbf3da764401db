//! One ZooKeeper session (per lease length a `Locks` handle uses), shared by its locks; the task
//! that turns session events into guard states; and the heartbeat that keeps the session's lease
//! clock.
//!
//! The guards of a session share its [`LeaseClock`]: the instant before the last heartbeat the
//! server answered was sent, plus three quarters of the negotiated session timeout, less the
//! core's margin. The leader cannot expire the session before then (see [`heartbeat`]), so a
//! guard reads Lost in time even when the process was paused or the connection went silent,
//! whatever this task saw. A heartbeat request every eighth of the timeout moves the clock on.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lockkit_core::spi::{Attempt, Guards, LeaseClock, Pooled, Reaper, Request, StateCell};
use lockkit_core::{Backoff, Error, ErrorKind, LostReason, Result};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::config::ZkConfig;
use crate::late::LateCreates;
use crate::owned::{drive, LossWatch, Nodes};

/// A live guard: what session events and `close` need to reach it.
pub(crate) type Tracked = Arc<Nodes>;

/// The client of the current ZooKeeper session and that session's lease clock.
#[derive(Debug, Clone)]
pub(crate) struct Current {
    pub client: zk::Client,
    pub clock: Arc<LeaseClock>,
}

/// One session and what it serves.
#[derive(Debug)]
pub(crate) struct Session {
    pub cfg: ZkConfig,
    pub acls: Vec<zk::Acl>,
    /// The handle's reaper (shared by its sessions): deletes retried until done.
    pub reaper: Reaper,
    current: Mutex<Option<Current>>,
    /// Told when `current` changes: a new session replaced an ended one, or the handle closed.
    replaced: Notify,
    live: Guards<Tracked>,
    /// Watch events delivered to waiters (predecessor or lease-set watches), for the herd test.
    wakes: AtomicU64,
    /// Creates interrupted by a connection loss, looked up by their protected prefix.
    lookups: AtomicU64,
    /// Creates whose reply was lost or never awaited, which the heartbeat looks for in case
    /// one is applied late.
    pub late: Arc<LateCreates>,
    /// To the task that keeps the deletion watches of held nodes.
    watches: mpsc::UnboundedSender<LossWatch>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// A ZooKeeper session reconnects, and opens a new session after an expiry, by itself.
impl Pooled for Session {}

impl Drop for Session {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Session {
    /// Opens a session with the timeout `cfg` asks for; a server that negotiates another one
    /// is a `Config` error (the lease would not be the one asked for).
    pub(crate) async fn open(cfg: ZkConfig, reaper: Reaper) -> Result<Arc<Session>> {
        let current = connect(&cfg).await?;
        let acls = cfg.acl.acls();
        let (watches, to_watch) = mpsc::unbounded_channel();
        let session = Arc::new(Session {
            cfg,
            acls,
            reaper,
            current: Mutex::new(Some(current.clone())),
            replaced: Notify::new(),
            live: Guards::default(),
            wakes: AtomicU64::new(0),
            lookups: AtomicU64::new(0),
            late: Arc::default(),
            watches,
            tasks: Mutex::new(Vec::new()),
        });
        let watcher = tokio::spawn(watch_session(Arc::downgrade(&session), current.client));
        let beat = tokio::spawn(heartbeat(Arc::downgrade(&session), session.late.clone()));
        let weak = Arc::downgrade(&session);
        let losses = tokio::spawn(drive(to_watch, move |id| weak.upgrade()?.client_of(id)));
        lock(&session.tasks).extend([watcher, beat, losses]);
        Ok(session)
    }

    /// The client of session `id` while it is the current one: `None` once that session ended
    /// (its ephemeral nodes went with it) or the handle closed.
    pub(crate) fn client_of(&self, id: zk::SessionId) -> Option<zk::Client> {
        let current = lock(&self.current);
        let client = &current.as_ref()?.client;
        (client.session_id() == id).then(|| client.clone())
    }

    /// Watches node `node` of `nodes` for deletion by someone else, which `state` hears of as
    /// a loss (after a short delay: most holds end sooner).
    pub(crate) fn watch_loss(&self, nodes: Arc<Nodes>, node: usize, state: StateCell) {
        // Fails once `close` stopped the task (and `close` reports every loss itself), or if the
        // task ended some other way, which leaves every later lock of the session unwatched.
        if self.watches.send(LossWatch { nodes, node, state }).is_err()
            && lock(&self.current).is_some()
        {
            tracing::warn!(
                backend = "zk",
                "lockkit: the deletion-watch task is gone; a lock deleted by someone else will \
                 not be reported until its session ends"
            );
        }
    }

    /// The current client (a new one after a session expiry).
    pub(crate) fn client(&self) -> Result<zk::Client> {
        Ok(self.current()?.client)
    }

    /// The current client unless its session expired, for a new claim. After an expiry that is
    /// the client the session task opens in its place, waited for within `req`'s budget and
    /// one command timeout (the server may be out of reach); then a retryable `Connection`
    /// error.
    pub(crate) async fn live_client(&self, req: &Request) -> Result<zk::Client> {
        let until = req.bound(Instant::now() + self.cfg.command_timeout);
        loop {
            // Registered before the look, so a replacement between the two is not missed.
            let replaced = self.replaced.notified();
            let client = self.client()?;
            // A client that failed authentication is no session to wait for: its requests say so.
            if client.state() != zk::SessionState::Expired {
                return Ok(client);
            }
            if tokio::time::timeout_at(until, replaced).await.is_err() {
                return Err(Error::new(
                    ErrorKind::Connection,
                    "zookeeper: the session ended and no new one is open yet",
                )
                .with_retryable(true));
            }
        }
    }

    /// The current client and its session's lease clock.
    pub(crate) fn current(&self) -> Result<Current> {
        lock(&self.current)
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::Closed, "the ZooKeeper handle was closed"))
    }

    /// Runs `job` in the handle's reaper with the client of session `id`, which made the nodes it
    /// deletes, again after each failure, until it succeeds or the nodes' session is certainly
    /// over for us: expired (a new client took its place), or the handle closed or dropped
    /// (`client_of` says which clients still count). The reaper keeps
    /// no client between tries, since a ZooKeeper session lives as long as one of its clients
    /// does: a delete the server keeps refusing (`NoAuth` after an ACL change) must not keep
    /// the session, and so its ephemeral nodes, alive after the handle is gone.
    pub(crate) fn reap<F, Fut>(self: &Arc<Self>, what: &'static str, id: zk::SessionId, job: F)
    where
        F: Fn(zk::Client) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        let (session, job) = (Arc::downgrade(self), Arc::new(job));
        self.reaper.retry(what, move || {
            let (session, job) = (session.clone(), job.clone());
            async move {
                let Some(client) = session.upgrade().and_then(|s| s.client_of(id)) else {
                    return Attempt::Moot;
                };
                if client.state().is_terminated() {
                    return Attempt::Moot;
                }
                let work = job(client.clone()).await;
                Attempt::of(work, async { client.state().is_terminated() }).await
            }
        });
    }

    /// Tracks a guard so session events reach it. Returns the id to untrack it with.
    pub(crate) fn track(&self, state: &StateCell, tracked: Tracked) -> u64 {
        self.live.track(state, tracked)
    }

    pub(crate) fn untrack(&self, id: u64) {
        self.live.untrack(id);
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

    /// Stops the session's tasks, turns every guard still tracked Lost and deletes its nodes,
    /// then ends the session.
    pub(crate) async fn close(&self) -> Result<()> {
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
        // The guards are told Closed before the client goes (a deletion watch that finds no
        // client would say the session ended); one tracked after this finds the handle closed.
        let live = self.live.take_all();
        for (state, t) in &live {
            t.released.store(true, Ordering::Release);
            state.mark_lost(LostReason::Closed);
        }
        let current = lock(&self.current).take();
        self.replaced.notify_waiters();
        let mut first_error = None;
        for (_, t) in live {
            // The nodes of an earlier session went with it.
            let Some(client) = current
                .as_ref()
                .map(|c| &c.client)
                .filter(|c| c.session_id() == t.session)
            else {
                continue;
            };
            for path in t.paths.iter() {
                if let Err(e) =
                    crate::ops::delete_node(client, path, self.cfg.command_timeout).await
                {
                    first_error.get_or_insert(e);
                }
            }
        }
        // The session ends when its last client is dropped.
        drop(current);
        first_error.map_or(Ok(()), Err)
    }

    /// Creates the directories of `path` (containers, like Curator's
    /// `creatingParentContainersIfNeeded`), each with our ACL.
    pub(crate) async fn ensure_dir(&self, client: &zk::Client, path: &str) -> Result<()> {
        let (parent, _) = path.rsplit_once('/').unwrap_or(("", path));
        // Every directory we create carries our ACL: with `acl=creator`, a world-writable
        // parent would let another identity pre-create a lock directory and shut us out.
        let ours = &zk::CreateMode::Container.with_acls(zk::Acls::new(&self.acls));
        let make = || async move {
            if !parent.is_empty() {
                client.mkdir(parent, ours).await?;
            }
            match client.create(path, &[], ours).await {
                Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                Err(e) => Err(e),
            }
        };
        crate::ops::retry(
            self.cfg.command_timeout,
            &format!("cannot create {path}"),
            make,
        )
        .await
    }
}

/// Connects a session with the timeout `cfg` asks for, starting its lease clock.
async fn connect(cfg: &ZkConfig) -> Result<Current> {
    let sent = Instant::now();
    let client = cfg.connect().await?;
    let granted = client.session_timeout();
    if granted != cfg.session_timeout {
        drop(client);
        return Err(Error::config(format!(
            "ZooKeeper granted a session timeout of {granted:?} for the {:?} asked (servers allow \
             2 to 20 ticks unless minSessionTimeout/maxSessionTimeout say otherwise); use a \
             lease of {granted:?}",
            cfg.session_timeout
        )));
    }
    let clock = LeaseClock::new(LostReason::SessionExpired);
    clock.renewed(sent, granted);
    Ok(Current { client, clock })
}

/// Keeps the current session's lease clock: a `sync` every eighth of the session timeout.
/// A sync is answered only once the server has reached the leader: a plain read is answered by
/// a follower cut off from the leader too, for as long as it takes to notice (`syncLimit`
/// ticks), while the leader counts the session down and hands its locks on. Still, the leader
/// learns that a follower's client is alive only from the follower's answer to its next ping
/// (every half tick), which a cut just after our answer forestalls. A tick is at most half the
/// session timeout (ZooKeeper's own floor, unless `minSessionTimeout` is set lower), so a ping
/// came within the quarter of the timeout before an answered beat, while the link was up, and
/// carried the beats before it: each answer moves the deadline to the request's send time plus
/// the timeout less that quarter. A failed request is tried again soon, with backoff, until the
/// deadline passes. After an answer it deletes the nodes that creates whose reply it never saw
/// made late (`late`).
async fn heartbeat(session: Weak<Session>, late: Arc<LateCreates>) {
    let mut retry = Backoff::WATCH.start();
    loop {
        let Some(s) = session.upgrade() else { return };
        let Ok(Current { client, clock }) = s.current() else {
            return;
        };
        let timeout = client.session_timeout();
        let period = (timeout / 8).max(Duration::from_millis(50));
        let limit = s.cfg.command_timeout.min(period * 2);
        drop(s);
        let sent = Instant::now();
        match tokio::time::timeout(limit, client.sync("/")).await {
            Ok(Ok(_)) => {
                lockkit_core::telemetry::renewal("zk", true, sent.elapsed());
                clock.renewed(sent, timeout - timeout / 4);
                retry.reset();
                // Done by the next beat, which must not be late; what is left is looked for then.
                let swept = tokio::time::timeout_at(sent + period, late.sweep(&client, limit));
                let swept = swept.await;
                if let Ok(Err(e)) = swept {
                    tracing::debug!(backend = "zk", error = %e, "lockkit: cannot look for late creates yet");
                }
                tokio::time::sleep_until(sent + period).await;
            }
            _ => {
                lockkit_core::telemetry::renewal("zk", false, sent.elapsed());
                tokio::time::sleep(retry.next_pause()).await
            }
        }
    }
}

/// Follows the session: connection loss makes guards Suspect, reconnection Held again, expiry
/// Lost (the lease clock turns them Lost sooner when the connection stays away). After an expiry
/// it opens a new session for new acquires.
async fn watch_session(session: Weak<Session>, mut client: zk::Client) {
    loop {
        let sid = client.session_id().0;
        let mut states = client.state_watcher();
        drop(client);
        loop {
            let event = states.changed().await;
            let Some(s) = session.upgrade() else { return };
            match event {
                zk::SessionState::Disconnected => {
                    tracing::debug!(
                        backend = "zk",
                        session = sid,
                        "lockkit: disconnected; locks suspect"
                    );
                    s.live.suspect(|t| t.session.0 == sid);
                }
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    lockkit_core::telemetry::reconnected("zk");
                    s.live.held(|t| t.session.0 == sid);
                }
                zk::SessionState::Expired
                | zk::SessionState::AuthFailed
                | zk::SessionState::Closed => {
                    tracing::warn!(backend = "zk", session = sid, state = ?event, "lockkit: session ended; locks lost");
                    s.live
                        .lost(LostReason::SessionExpired, |t| t.session.0 == sid);
                    break;
                }
            }
        }
        // Open a new session for new acquires; the old guards stay Lost.
        let mut retry = Backoff::SESSION.start();
        let current = loop {
            let Some(s) = session.upgrade() else { return };
            let cfg = s.cfg.clone();
            drop(s);
            match connect(&cfg).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(backend = "zk", error = %e, "lockkit: cannot open a new session yet");
                    retry.wait().await;
                }
            }
        };
        let Some(s) = session.upgrade() else { return };
        let mut slot = lock(&s.current);
        if slot.is_none() {
            return; // closed meanwhile
        }
        client = current.client.clone();
        *slot = Some(current);
        drop(slot);
        s.replaced.notify_waiters();
        lockkit_core::telemetry::reconnected("zk");
    }
}
