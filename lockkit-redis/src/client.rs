//! What every handle and guard of one Redis client shares: the connections, the scripts, the
//! subscriptions, the watchdog, and the operations that several primitives run.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::{moot_after, Armed, Reaper, Request, StateCell, Undo};
use lockkit_core::{Backoff, Budget, Error, Result};
use redis::{FromRedisValue, ScriptInvocation};

use crate::beats::Beats;
use crate::config::Settings;
use crate::conn::Conn;
use crate::error;
use crate::keys::LockKeys;
use crate::pubsub::Subscriptions;
use crate::replicas::Replicas;
use crate::script_set::Scripts;
use crate::watchdog::{Renewal, Watchdog};

/// Release retries after a lost reply (the unlock latch makes them safe).
const RELEASE_RETRIES: u32 = 3;

/// What every handle and guard of one client shares.
pub(crate) struct Inner {
    pub(crate) conn: Conn,
    pub(crate) settings: Settings,
    client_id: String,
    next_owner: AtomicU64,
    pub(crate) scripts: Arc<Scripts>,
    pub(crate) subs: Arc<Subscriptions>,
    pub(crate) watchdog: Arc<Watchdog>,
    /// Cleanup retried until done (leaves, releases the server did not take at once).
    pub(crate) reaper: Reaper,
    /// The replica waits after acquires, renewals and releases (`wait_replicas`).
    pub(crate) replicas: Arc<Replicas>,
    /// Turns `true` when the handle is closed (election observers end then).
    pub(crate) closed: tokio::sync::watch::Sender<bool>,
    /// The queued waiters' heartbeats, one round trip per lock.
    pub(crate) beats: Beats,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClient")
            .field("client_id", &self.client_id)
            .field("settings", &self.settings)
            .finish()
    }
}

impl Inner {
    /// The shared state of a client with a fresh client id.
    pub(crate) fn new(
        conn: Conn,
        settings: Settings,
        scripts: Arc<Scripts>,
        subs: Arc<Subscriptions>,
        watchdog: Arc<Watchdog>,
        replicas: Arc<Replicas>,
    ) -> Inner {
        let beats = Beats::new(conn.clone(), scripts.clone(), &settings);
        Inner {
            conn,
            settings,
            client_id: uuid::Uuid::new_v4().to_string(),
            next_owner: AtomicU64::new(1),
            scripts,
            subs,
            watchdog,
            reaper: Reaper::default(),
            replicas,
            closed: tokio::sync::watch::Sender::new(false),
            beats,
        }
    }

    /// This client's id: the `<client-uuid>` part of its owner fields.
    pub(crate) fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The start of every client's holder channel (see [`crate::keys::holder_channels`]), as the
    /// force-unlock scripts take it.
    pub(crate) fn holder_channels(&self) -> String {
        crate::keys::holder_channels(&self.settings.prefix)
    }

    /// This client's holder channel: where it hears that a force-unlock took an ownership of
    /// its.
    pub(crate) fn holder_channel(&self) -> String {
        format!("{}{}", self.holder_channels(), self.client_id)
    }

    /// A fresh owner field `<client-uuid>:<n>` for one acquisition.
    pub(crate) fn new_owner(&self) -> String {
        let n = self.next_owner.fetch_add(1, Ordering::Relaxed);
        format!("{}:{n}", self.client_id)
    }

    /// Whether the mutex `keys` name is on Redisson's layout (`redisson_compat`; elections
    /// never are).
    pub(crate) fn redisson_layout(&self, keys: &LockKeys) -> bool {
        self.settings.redisson_compat && keys.leader.is_none()
    }

    /// The keys of mutex `name` in this client's layout, or of election `name` (`election`:
    /// always the native layout), as its handles and held locks build them.
    pub(crate) fn mutex_keys(&self, name: &str, election: bool) -> Result<LockKeys> {
        match election {
            true => Ok(LockKeys::election(&self.settings.prefix, name)),
            false => self.keys(name),
        }
    }

    pub(crate) fn keys(&self, name: &str) -> Result<LockKeys> {
        if self.settings.redisson_compat {
            LockKeys::redisson_mutex(name)
        } else {
            Ok(LockKeys::mutex(&self.settings.prefix, name))
        }
    }

    /// Runs a script with the command timeout as an outer bound (reconnects included).
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
        what: &str,
    ) -> Result<T> {
        self.conn
            .invoke(inv, self.settings.command_timeout, what)
            .await
    }

    /// Runs a command with the command timeout as an outer bound.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd, what: &str) -> Result<T> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.settings.command_timeout, cmd.query_async(&mut conn)).await
        {
            Ok(r) => r.map_err(|e| error::map(e, what)),
            Err(_) => Err(error::timeout(what)),
        }
    }

    /// The channel on which this client's waiters of a native mutex hear that the lock was
    /// handed to them.
    pub(crate) fn grant_channel(&self, keys: &LockKeys) -> String {
        format!("{}:{}", keys.lock, self.client_id)
    }

    /// Owner-checked, idempotent release of a mutex: `true` when released, `false` when not
    /// ours. A native release hands the lock to the first live waiter; a `redisson_compat` one
    /// wakes the first fair waiter on its own channel and (unless `fair`) sends Redisson's
    /// unlock message `0` on the lock's. A reply lost
    /// to a broken connection or a timeout is retried; the ownership's unlock latch makes the
    /// retry answer like the first attempt did.
    pub(crate) async fn release_mutex(
        &self,
        keys: &LockKeys,
        owner: &str,
        fair: bool,
    ) -> Result<bool> {
        let latch = keys.unlock_latch(owner);
        let latch_ttl = self.latch_ttl_ms();
        let mut inv;
        if self.redisson_layout(keys) {
            inv = self.scripts.rs_release.prepare_invoke();
            inv.key(&keys.lock)
                .key(&latch)
                .key(&keys.queue)
                .key(&keys.waiters)
                .arg(owner)
                .arg(&keys.channel)
                .arg(latch_ttl)
                .arg(if fair { "1" } else { "0" })
                .arg(wall_ms());
        } else {
            inv = self.scripts.release.prepare_invoke();
            inv.key(&keys.lock)
                .key(&latch)
                .key(&keys.fence)
                .key(&keys.queue)
                .key(&keys.waiters);
            election_keys(&mut inv, keys);
            inv.arg(owner)
                .arg(latch_ttl)
                .arg(self.settings.fence_ttl.as_millis() as u64);
        }
        Ok(self.invoke_retrying(&inv, "release").await? == 1)
    }

    /// How long an unlock latch answers retries of its release: every retry of
    /// [`invoke_retrying`](Self::invoke_retrying), and then some (at least 10 s).
    pub(crate) fn latch_ttl_ms(&self) -> u64 {
        (self.settings.command_timeout * (RELEASE_RETRIES + 1) * 2)
            .max(Duration::from_secs(10))
            .as_millis() as u64
    }

    /// Runs an idempotent script, retrying up to [`RELEASE_RETRIES`] times after a lost reply.
    pub(crate) async fn invoke_retrying(
        &self,
        inv: &ScriptInvocation<'_>,
        what: &str,
    ) -> Result<i64> {
        Backoff::REQUEST
            .retry(
                Budget::Retries(RELEASE_RETRIES),
                Error::is_retryable,
                || self.invoke::<i64>(inv, what),
            )
            .await
    }

    /// Owner-checked extension of watched ownership `id` (`script`: renew or renew_set).
    pub(crate) async fn extend(
        &self,
        renewal: &Renewal,
        lease: Duration,
        id: u64,
        name: &str,
    ) -> Result<()> {
        let (key, owner) = (&renewal.key, &renewal.owner);
        let mut inv = renewal.kind.script(&self.scripts).prepare_invoke();
        inv.key(key);
        if let Some(leader) = &renewal.leader {
            inv.key(leader);
        }
        inv.arg(owner).arg(lease.as_millis().max(1) as u64);
        let sent_at = tokio::time::Instant::now();
        let epoch = self.replicas.ticket(key);
        let r: Vec<i64> = self.invoke(&inv, "extend").await?;
        if r.first() == Some(&1) {
            // The new deadline counts once the replicas have it: a failover to one that missed
            // it would end the lease at the old one.
            self.replicas.kept("extend", epoch).await?;
            self.watchdog.extended(id, sent_at, lease);
            Ok(())
        } else {
            self.watchdog.lost(id);
            Err(Error::lost(name))
        }
    }

    /// Owner-checked reentry of watched ownership `id`, whose reentries so far are `reentries`:
    /// its hold count on the server becomes 1 + those + this one, and `reentries` counts this
    /// one only once the server has said so. A reentry whose answer is never seen (it failed, or
    /// its future was dropped, perhaps after the server ran it) is undone in the background,
    /// so the server's count stays the guard's; the next reentry waits for that undo, for at
    /// most a command timeout.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the count as it was (see above).
    pub(crate) async fn reenter(
        self: &Arc<Self>,
        reentries: &Reentries,
        key: &str,
        owner: &str,
        id: u64,
        name: &str,
    ) -> Result<()> {
        let turn = tokio::time::timeout(
            self.settings.command_timeout,
            reentries.confirmed.clone().lock_owned(),
        )
        .await
        .map_err(|_| error::timeout("reenter (the undo of an earlier one is still pending)"))?;
        let holds = *turn + 1;
        let pending = Armed::new(UnseenReentry {
            inner: self,
            key,
            owner,
            holds,
            state: &reentries.state,
            turn,
        });
        let mut inv = self.scripts.reenter.prepare_invoke();
        inv.key(key).arg(owner).arg(holds + 1).arg("+");
        let answer = self.invoke::<i64>(&inv, "reenter").await?;
        // The server answered, so there is nothing to undo.
        *pending.disarm().turn += u64::from(answer > 0);
        if answer > 0 {
            Ok(())
        } else {
            self.watchdog.lost(id);
            Err(Error::lost(name))
        }
    }

    /// Sets the hold count of `owner` back to `holds` if it is higher: the undo of a reentry
    /// whose answer was never seen. Done too when the ownership is gone.
    async fn unreenter(&self, key: &str, owner: &str, holds: u64) -> Result<()> {
        let mut inv = self.scripts.reenter.prepare_invoke();
        inv.key(key).arg(owner).arg(holds).arg("-");
        self.invoke::<i64>(&inv, "undo a reentry").await.map(drop)
    }

    /// A waiter leaves a mutex's queue; natively this also passes on a lock handed to it (or
    /// taken by an attempt whose reply was lost), and hands a free lock to the next waiter;
    /// with `redisson_compat`, it wakes the next fair waiter if the lock is free.
    /// `wait`: with `redisson_compat`, the wait the waiter queued with (the waiters behind it
    /// move up by as much, as in Redisson).
    pub(crate) async fn leave_queue(
        &self,
        keys: &LockKeys,
        owner: &str,
        wait: Duration,
    ) -> Result<()> {
        let mut inv;
        if self.redisson_layout(keys) {
            inv = self.scripts.rs_fair_leave.prepare_invoke();
            inv.key(&keys.lock)
                .key(&keys.queue)
                .key(&keys.waiters)
                .arg(owner)
                .arg(&keys.channel)
                .arg(wait.as_millis() as u64)
                .arg(wall_ms());
        } else {
            inv = self.scripts.leave.prepare_invoke();
            inv.key(&keys.lock)
                .key(&keys.fence)
                .key(&keys.queue)
                .key(&keys.waiters);
            election_keys(&mut inv, keys);
            inv.arg(owner)
                .arg(self.settings.fence_ttl.as_millis() as u64);
        }
        self.invoke_retrying(&inv, "leave queue").await.map(drop)
    }

    /// Hands cleanup the server did not take (or that a context that cannot wait, such as
    /// `Drop`, starts) to the reaper: `job` is tried until it succeeds, or until `moot_after`
    /// (the core's [`moot_after`](lockkit_core::spi::moot_after)) has passed, by when what it
    /// cleans up has expired on the server anyway.
    pub(crate) fn reap<F, Fut>(self: &Arc<Self>, what: &'static str, moot_after: Duration, job: F)
    where
        F: Fn(Arc<Inner>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        let until = tokio::time::Instant::now() + moot_after;
        let inner = self.clone();
        self.reaper
            .retry_until(what, until, move || job(inner.clone()));
    }
}

/// The reentries of one held ownership whose hold count the server keeps (a mutex, a write
/// lock): see [`Inner::reenter`].
#[derive(Debug)]
pub(crate) struct Reentries {
    /// How many the server has confirmed: its hold count is one more. Locked by each reentry
    /// while it runs, and by the undo of one whose answer was never seen until it is done.
    confirmed: Arc<tokio::sync::Mutex<u64>>,
    /// The ownership's state, whose deadline bounds how long an undo is worth trying.
    state: StateCell,
}

impl Reentries {
    /// None yet, for the ownership in `state`.
    pub(crate) fn new(state: StateCell) -> Self {
        Reentries {
            confirmed: Arc::default(),
            state,
        }
    }
}

/// A reentry in flight: if it ends without an answer (an error, or its future is dropped), the
/// server may or may not have counted it, so the reaper sets the count back to `holds`,
/// keeping the ownership's turn until it has.
struct UnseenReentry<'a> {
    inner: &'a Arc<Inner>,
    key: &'a str,
    owner: &'a str,
    /// The hold count before this reentry.
    holds: u64,
    state: &'a StateCell,
    turn: tokio::sync::OwnedMutexGuard<u64>,
}

impl Undo for UnseenReentry<'_> {
    fn undo(self) {
        let (key, owner, holds) = (self.key.to_string(), self.owner.to_string(), self.holds);
        // Past the ownership's deadline, its hash and count are gone with it.
        let moot = expiry_bound(self.state);
        let turn = self.turn;
        self.inner.reap("undo a reentry", moot, move |inner| {
            // Held until the undo is done (or moot): the next reentry comes after it.
            let _turn = &turn;
            let (key, owner) = (key.clone(), owner.clone());
            async move { inner.unreenter(&key, &owner, holds).await }
        });
    }
}

/// The wall clock in ms since the Unix epoch: the time base of Redisson's fair-lock deadlines,
/// which its clients compute (not the server).
pub(crate) fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// When a holder's lease ends, from the PTTL an acquire script read for it (ms), as a bound on
/// how long a waiter listens for a wake-up before it tries again: `None` when the lease has no
/// expiry (-1) or there is no holder's lease to wait for (-2: other waiters keep us out).
/// Redis answers 0 in the very millisecond the key expires: the lease ends within the next one,
/// so the waiter tries again then, not a heartbeat later.
pub(crate) fn lease_ends_in(pttl: i64) -> Option<Duration> {
    (pttl >= 0).then(|| Duration::from_millis(pttl.max(1) as u64))
}

/// When a waiter that listens for a release wakes on its own to try again: after `most`, when
/// the holder's lease (`pttl` ms as last answered) ends, or at `req`'s deadline, whichever
/// comes first.
pub(crate) fn wake_at(most: Duration, pttl: i64, req: &Request) -> tokio::time::Instant {
    let after = lease_ends_in(pttl).map_or(most, |end| end.min(most));
    req.bound(tokio::time::Instant::now() + after)
}

/// How long a cleanup after a release whose reply never came is worth trying: a renewal or
/// extend whose answer was lost (the guard's deadline did not move) may have set a whole lease
/// just before the release ([`LeaseClock::server_bound`]).
///
/// [`LeaseClock::server_bound`]: lockkit_core::spi::LeaseClock::server_bound
pub(crate) fn expiry_bound(state: &StateCell) -> Duration {
    moot_after(&[state.clock().server_bound()])
}

/// Adds an election's leader hash and channel to a native mutex script's keys (see
/// `scripts/elect.lua`); nothing for a lock.
pub(crate) fn election_keys(inv: &mut ScriptInvocation<'_>, keys: &LockKeys) {
    if let Some(leader) = &keys.leader {
        inv.key(leader).key(&keys.channel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 25, item 7: Redis answers PTTL 0 in the millisecond a key expires; the waiter
    /// tries again in the next one, not a heartbeat later.
    #[test]
    fn a_lease_read_at_pttl_0_ends_within_a_millisecond() {
        let ms = Duration::from_millis;
        assert_eq!(lease_ends_in(0), Some(ms(1)));
        assert_eq!(lease_ends_in(1), Some(ms(1)));
        assert_eq!(lease_ends_in(1500), Some(ms(1500)));
        // No expiry, or no holder's lease to wait for: the heartbeat bounds the wait.
        assert_eq!(lease_ends_in(-1), None);
        assert_eq!(lease_ends_in(-2), None);
    }
}
