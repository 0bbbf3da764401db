//! `redis+sentinel://`: find the primary through Redis Sentinel and follow it across failovers.
//!
//! redis-rs's `sentinel` feature resolves a primary once and hands back a client; following a
//! failover (swapping the connections, resubscribing the wake-up channels) would still be ours
//! to write, so this module does the whole job with plain commands instead:
//!
//! * resolve: ask the Sentinels in order `SENTINEL GET-MASTER-ADDR-BY-NAME <master>` (the first
//!   that answers wins) and check with `ROLE` that the node really is a primary, so a Sentinel
//!   with a stale view cannot send us to a replica;
//! * follow: one task per client resolves again every [`POLL`], and at once when a command
//!   fails in a way that hints at a failover (connection errors, timeouts, `READONLY` from a
//!   demoted primary); when the address changes it opens connections to the new primary, swaps
//!   them in, resubscribes the wake-up channels there and wakes every local waiter of them (a
//!   release or a hand-off may have been published there before we listened, and a waiter's
//!   next attempt takes up a lock handed to it); a channel the new primary did not take is
//!   asked for again until it does (on the follower's rounds, further apart while it is
//!   refused), and the waiters are woken again then;
//! * a command that certainly did not reach the server (connection refused, broken pipe,
//!   `READONLY`) waits for the follower's next answer (at most [`RESOLVE_WAIT`]) and, if the
//!   primary moved, is sent once more to the new one; so an idle client's first command after a
//!   failover succeeds. A command that may have reached the old primary (timeout, reset) is
//!   never sent twice: it fails with a retryable error.
//!
//! Between the old primary's failure and the swap, commands fail with retryable errors and held
//! guards turn Suspect (the watchdog's renewals fail); after the swap, the next renewal finds
//! each lock on the new primary (Held again) or not (Lost: it was not replicated in time).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use lockkit_core::{Backoff, Budget, Error, ErrorKind, Result};
use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::config::{manager_config, Settings};
use crate::error;
use crate::push::PushSink;

/// How often the follower asks the Sentinels where the primary is, failing nothing.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// Least time between two resolutions triggered by errors (a burst of failing commands asks
/// once).
const MIN_GAP: Duration = Duration::from_millis(50);

/// How long a command that could not reach the primary waits for the follower's answer.
const RESOLVE_WAIT: Duration = Duration::from_secs(1);

/// What the follower did so far, for commands waiting on it.
#[derive(Clone, Copy, Default)]
struct Rounds {
    /// Resolutions finished.
    resolved: u64,
    /// Connections swapped in.
    switched: u64,
}

/// A managed connection to the current primary, replaced when the primary changes.
pub(crate) struct Switchable {
    current: RwLock<ConnectionManager>,
    /// How to reach the primary `current` talks to (for connections of one's own to it).
    info: RwLock<ConnectionInfo>,
    rounds: watch::Sender<Rounds>,
    /// Pub/sub only: the channels to subscribe again on a new primary.
    channels: Mutex<HashSet<String>>,
    /// Pub/sub only: those of `channels` whose subscribe on the current primary failed at the
    /// switch; the follower tries them again until the primary has them.
    missing: Mutex<HashSet<String>>,
    /// Wakes the follower to resolve now.
    follow: Arc<Notify>,
}

impl Switchable {
    fn new(conn: ConnectionManager, info: ConnectionInfo, follow: Arc<Notify>) -> Arc<Switchable> {
        Arc::new(Switchable {
            current: RwLock::new(conn),
            info: RwLock::new(info),
            rounds: watch::Sender::new(Rounds::default()),
            channels: Mutex::new(HashSet::new()),
            missing: Mutex::new(HashSet::new()),
            follow,
        })
    }

    /// The connection to the primary as last resolved.
    pub(crate) fn current(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How to reach the current primary, and how many switches it has seen.
    pub(crate) fn primary(&self) -> (u64, ConnectionInfo) {
        let seen = self.rounds.borrow().switched;
        let info = self.info.read().unwrap_or_else(|e| e.into_inner()).clone();
        (seen, info)
    }

    /// [`current`](Self::current) and how many switches it has seen (for
    /// [`switched_after`](Self::switched_after)).
    pub(crate) fn current_seen(&self) -> (u64, ConnectionManager) {
        let seen = self.rounds.borrow().switched;
        (seen, self.current())
    }

    /// Asks the follower to look for a new primary when `r` failed the way a failover makes
    /// commands fail.
    pub(crate) fn check<T>(&self, r: &RedisResult<T>) {
        if let Err(e) = r {
            if hints_failover(e) {
                self.follow.notify_one();
            }
        }
    }

    /// After `e` on a connection taken when `seen` switches had happened: if the command
    /// certainly did not reach the server (refused, broken pipe, `READONLY` from a demoted
    /// primary), returns the connection to a newer primary, asking the follower first when none
    /// is known yet. A command that may have reached the old primary is never sent again.
    pub(crate) async fn switched_after(
        &self,
        e: &redis::RedisError,
        seen: u64,
    ) -> Option<ConnectionManager> {
        let undelivered = e.code() == Some("READONLY")
            || matches!(
                error::io_kind(e),
                Some(std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::BrokenPipe)
            );
        if !undelivered {
            return None;
        }
        let mut rx = self.rounds.subscribe();
        let start = *rx.borrow_and_update();
        if start.switched > seen {
            return Some(self.current());
        }
        self.follow.notify_one();
        let answered = rx.wait_for(|r| r.resolved > start.resolved || r.switched > start.switched);
        let _ = tokio::time::timeout(RESOLVE_WAIT, answered).await;
        let switched = self.rounds.borrow().switched > start.switched;
        switched.then(|| self.current())
    }

    /// The follower finished a resolution.
    fn resolved(&self) {
        self.rounds.send_modify(|r| r.resolved += 1);
    }

    fn channels(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn missing(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.missing.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) async fn subscribe(&self, channel: &str) -> RedisResult<()> {
        // Recorded first: a switch that happens meanwhile subscribes it on the new primary.
        self.channels().insert(channel.to_string());
        let (seen, mut c) = self.current_seen();
        let mut used = seen;
        let mut r = c.subscribe(channel).await;
        self.check(&r);
        if let Err(e) = &r {
            if self.switched_after(e, seen).await.is_some() {
                // The count first, then the connection (the order `replace` writes them in
                // reverse): a later switch between the two only makes `used` look old.
                let (now, mut c) = self.current_seen();
                used = now;
                r = c.subscribe(channel).await;
            }
        }
        // Taken by the current primary, not by one a switch has left meanwhile (a demoted
        // primary may still answer): no longer missing there.
        if r.is_ok() && self.rounds.borrow().switched == used {
            self.missing().remove(channel);
        }
        r
    }

    pub(crate) async fn unsubscribe(&self, channel: &str) -> RedisResult<()> {
        self.channels().remove(channel);
        self.missing().remove(channel);
        self.current().unsubscribe(channel).await
    }

    /// Subscribes, on the current primary, the channels a switch could not (see
    /// [`replace`](Self::replace)). Returns whether it subscribed any (messages published there
    /// before were missed: the caller wakes every local waiter) and whether any is still
    /// missing.
    async fn subscribe_missing(&self) -> (bool, bool) {
        let wanted: Vec<String> = {
            let channels = self.channels();
            let mut missing = self.missing();
            missing.retain(|ch| channels.contains(ch));
            missing.iter().cloned().collect()
        };
        if wanted.is_empty() {
            return (false, false);
        }
        let conn = self.current();
        let mut any = false;
        for ch in &wanted {
            match conn.clone().subscribe(ch).await {
                Ok(()) => {
                    any = true;
                    self.missing().remove(ch);
                    // Its last waiter may have left meanwhile: no stray subscription.
                    if !self.channels().contains(ch) {
                        let _ = conn.clone().unsubscribe(ch).await;
                    }
                }
                Err(e) => {
                    tracing::debug!(backend = "redis", channel = %ch, error = %e, "lockkit: channel not subscribed on the new primary yet");
                }
            }
        }
        (any, !self.missing().is_empty())
    }

    /// Swaps in a connection to the new primary (and resubscribes there; a channel whose
    /// subscribe fails is kept for [`subscribe_missing`](Self::subscribe_missing)).
    async fn replace(&self, conn: ConnectionManager, info: ConnectionInfo) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = conn.clone();
        *self.info.write().unwrap_or_else(|e| e.into_inner()) = info;
        self.rounds.send_modify(|r| r.switched += 1);
        self.missing().clear();
        let channels: Vec<String> = self.channels().iter().cloned().collect();
        for ch in channels {
            let mut c = conn.clone();
            if let Err(e) = c.subscribe(&ch).await {
                tracing::debug!(backend = "redis", channel = %ch, error = %e, "lockkit: resubscribe on the new primary failed; tried again on the follower's next round");
                self.missing().insert(ch);
            }
        }
        let missing = self.missing().len();
        if missing > 0 {
            tracing::warn!(backend = "redis", channels = missing, "lockkit: the new primary did not take every subscription; asked again until it does");
        }
    }
}

/// Errors a failover causes: the primary is unreachable, or it was demoted to a replica.
fn hints_failover(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(e.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"))
}

/// Asks the Sentinels where the primary is; remembers the last one that answered.
struct Resolver {
    sentinels: Vec<(String, u16)>,
    auth: Option<(Option<String>, lockkit_core::Secret)>,
    master: String,
    timeout: Duration,
    /// The sentinel (index) last used, and its connection.
    last: Option<(usize, MultiplexedConnection)>,
}

impl Resolver {
    /// The primary's address, from the first Sentinel that answers.
    async fn primary(&mut self) -> Result<(String, u16)> {
        let start = self.last.as_ref().map_or(0, |(i, _)| *i);
        let mut first_error = None;
        for k in 0..self.sentinels.len() {
            let i = (start + k) % self.sentinels.len();
            match self.ask(i).await {
                Ok(Some(addr)) => return Ok(addr),
                Ok(None) => {
                    first_error.get_or_insert_with(|| {
                        Error::config(format!(
                            "the Sentinel at {}:{} does not know a master named {:?}",
                            self.sentinels[i].0, self.sentinels[i].1, self.master
                        ))
                    });
                }
                Err(e) => {
                    self.last = None;
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.unwrap_or_else(|| Error::config("no Sentinel given")))
    }

    async fn ask(&mut self, i: usize) -> Result<Option<(String, u16)>> {
        let mut conn = match self.last.take() {
            Some((j, c)) if j == i => c,
            _ => {
                let (host, port) = &self.sentinels[i];
                let mut info = ConnectionAddr::Tcp(host.clone(), *port)
                    .into_connection_info()
                    .map_err(|e| error::map(e, "Sentinel address"))?;
                if let Some((user, pass)) = &self.auth {
                    let mut rs = info.redis_settings().clone().set_password(pass.expose());
                    if let Some(u) = user {
                        rs = rs.set_username(u);
                    }
                    info = info.set_redis_settings(rs);
                }
                let client = redis::Client::open(info)
                    .map_err(|e| error::map(e, "Sentinel client setup"))?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout));
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(|e| error::map(e, "Sentinel connect"))?
            }
        };
        let reply: Option<(String, String)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master)
            .query_async(&mut conn)
            .await
            .map_err(|e| error::map(e, "SENTINEL GET-MASTER-ADDR-BY-NAME"))?;
        self.last = Some((i, conn));
        let Some((host, port)) = reply else {
            return Ok(None);
        };
        let port = port.parse().map_err(|_| {
            Error::new(
                ErrorKind::Backend,
                format!("Sentinel gave a bad port {port:?} for {:?}", self.master),
            )
        })?;
        Ok(Some((host, port)))
    }
}

/// Connections to the primary at `addr`, if it says it is one: (commands, pub/sub), each with
/// the connection info it was opened with.
async fn open<P: PushSink>(
    settings: &Settings,
    addr: &(String, u16),
    pushes: &P,
) -> Result<(Opened, Opened)> {
    let info = |template: &ConnectionInfo| -> Result<ConnectionInfo> {
        Ok(ConnectionAddr::Tcp(addr.0.clone(), addr.1)
            .into_connection_info()
            .map_err(|e| error::map(e, "primary address"))?
            .set_redis_settings(template.redis_settings().clone())
            .set_tcp_settings(template.tcp_settings().clone()))
    };
    let conn_info = info(&settings.info)?;
    let client = crate::tls::client(conn_info.clone(), settings.tls.as_ref())?;
    let mut conn = client
        .get_connection_manager_with_config(manager_config(settings))
        .await
        .map_err(|e| error::map(e, "connect to the primary"))?;
    let role: Vec<redis::Value> = redis::cmd("ROLE")
        .query_async(&mut conn)
        .await
        .map_err(|e| error::map(e, "ROLE"))?;
    let is_primary = matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master");
    if !is_primary {
        return Err(Error::new(
            ErrorKind::Connection,
            format!(
                "Redis at {}:{} is not a primary (yet): the Sentinels' view is changing",
                addr.0, addr.1
            ),
        )
        .with_retryable(true));
    }
    let pubsub_info = info(&settings.pubsub_info)?;
    let pubsub_client = crate::tls::client(pubsub_info.clone(), settings.tls.as_ref())?;
    let pubsub = pubsub_client
        .get_connection_manager_with_config(
            manager_config(settings)
                .set_push_sender(pushes.clone())
                .set_automatic_resubscription(),
        )
        .await
        .map_err(|e| error::map(e, "pub/sub connect to the primary"))?;
    Ok(((conn, conn_info), (pubsub, pubsub_info)))
}

/// A connection to the primary and the info it was opened with.
type Opened = (ConnectionManager, ConnectionInfo);

/// Resolves the primary, connects to it and starts the follower task. Tries until the connect
/// timeout passes (a failover may be under way); an unknown master name fails at once.
pub(crate) async fn connect<P: PushSink>(
    settings: &Settings,
    sentinels: &[(String, u16)],
    master: &str,
    pushes: P,
) -> Result<(Arc<Switchable>, Arc<Switchable>, JoinHandle<()>)> {
    let resolver = Resolver {
        sentinels: sentinels.to_vec(),
        auth: settings.sentinel_auth.clone(),
        master: master.to_string(),
        timeout: settings.connect_timeout,
        last: None,
    };
    let deadline = tokio::time::Instant::now() + settings.connect_timeout;
    // Each try borrows the resolver in turn (it remembers which Sentinel answered). A try is
    // not cut at the deadline: it asks one Sentinel after another, each within the connect
    // timeout, so that a Sentinel that never answers leaves the others their turn.
    let asking = tokio::sync::Mutex::new(resolver);
    let (addr, conn, pubsub) = Backoff::REQUEST
        .retry(Budget::Until(deadline), Error::is_retryable, || async {
            let addr = asking.lock().await.primary().await?;
            let (conn, pubsub) = open(settings, &addr, &pushes).await?;
            Ok::<_, Error>((addr, conn, pubsub))
        })
        .await?;
    let resolver = asking.into_inner();
    let follow = Arc::new(Notify::new());
    let conn = Switchable::new(conn.0, conn.1, follow.clone());
    let pubsub = Switchable::new(pubsub.0, pubsub.1, follow.clone());
    let task = tokio::spawn(run(
        resolver,
        addr,
        settings.clone(),
        Arc::downgrade(&conn),
        Arc::downgrade(&pubsub),
        pushes,
        follow,
    ));
    Ok((conn, pubsub, task))
}

/// The follower: re-resolves every [`POLL`] or when woken, and switches when the primary moved.
async fn run<P: PushSink>(
    mut resolver: Resolver,
    mut addr: (String, u16),
    settings: Settings,
    conn: Weak<Switchable>,
    pubsub: Weak<Switchable>,
    pushes: P,
    follow: Arc<Notify>,
) {
    // Failed resolutions and unusable new primaries are retried on a jittered backoff, so the
    // clients of one failover do not ask the Sentinels in lockstep.
    let mut retry = Backoff::REQUEST.start();
    // Channels the primary did not take are asked for again on the rounds this allows, further
    // apart while they are refused (a channel an ACL refuses for good costs a SUBSCRIBE every
    // few seconds, not every round).
    let mut missing_pace = Backoff::SESSION.start();
    let mut missing_due = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = follow.notified() => {}
        }
        let (Some(conn), Some(pubsub)) = (conn.upgrade(), pubsub.upgrade()) else {
            return;
        };
        let found = match resolver.primary().await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(backend = "redis", error = %e, "lockkit: Sentinels did not answer");
                conn.resolved();
                pubsub.resolved();
                retry.wait().await;
                continue;
            }
        };
        let mut settled = true;
        if found != addr {
            match open(&settings, &found, &pushes).await {
                Ok((c, p)) => {
                    tracing::info!(
                        backend = "redis",
                        from = %format_args!("{}:{}", addr.0, addr.1),
                        to = %format_args!("{}:{}", found.0, found.1),
                        "lockkit: primary changed"
                    );
                    lockkit_core::telemetry::reconnected("redis");
                    conn.replace(c.0, c.1).await;
                    pubsub.replace(p.0, p.1).await;
                    missing_pace.reset();
                    missing_due = tokio::time::Instant::now();
                    // A release (or a hand-off) may have been published on the new primary
                    // before we subscribed there: every local waiter tries again.
                    pushes.wake_everyone();
                    addr = found;
                }
                Err(e) => {
                    tracing::debug!(backend = "redis", error = %e, "lockkit: new primary not usable yet");
                    // Look again soon: the promotion may still be under way.
                    follow.notify_one();
                    settled = false;
                }
            }
        }
        conn.resolved();
        pubsub.resolved();
        if settled && tokio::time::Instant::now() >= missing_due {
            let (subscribed, left) = pubsub.subscribe_missing().await;
            if subscribed {
                pushes.wake_everyone();
            }
            if left {
                missing_due = tokio::time::Instant::now() + missing_pace.next_pause();
            } else {
                missing_pace.reset();
            }
        }
        if settled {
            retry.reset();
            tokio::time::sleep(MIN_GAP).await;
        } else {
            retry.wait().await;
        }
    }
}
