//! The mutex: Redisson RLock semantics (a hash per lock, hold counts, a watchdog lease) with
//! ownership per acquisition. How a waiter gets the lock depends on the layout: natively a
//! queue with a direct hand-off ([`queue`]), with `redisson_compat` Redisson's own wake-ups
//! ([`redisson`]).

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::{GuardParts, Held, LeaseClock, RawMutex, Request, StateCell};
use lockkit_core::{async_trait, Error, FencingToken, Lease, Result};
use redis::{Script, ScriptInvocation};
use tokio::time::Instant;

use crate::client::{expiry_bound, Inner, Reentries};
use crate::keys::LockKeys;
use crate::replicas::Ticket;
use crate::watchdog::Watched;

mod queue;
mod redisson;

/// Takes a waiter out of the mutex's queue if its acquire ends without the lock (its wait ran
/// out, it failed, or the future was dropped); natively this also passes on a lock handed to it
/// meanwhile.
struct LeaveOnDrop<'a> {
    mutex: &'a RedisMutex,
    owner: &'a str,
    /// How long the waiter's place lasts once it stops renewing it (natively its heartbeat
    /// timeout; in Redisson's fair queue, its wait).
    wait: Duration,
    armed: bool,
}

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            let (keys, owner, wait) = (self.mutex.keys.clone(), self.owner.to_string(), self.wait);
            let inner = &self.mutex.inner;
            // A waiter that never left is skipped once its place lapses, and natively a lock
            // handed to it lapses after as long.
            inner.reap("leave a lock queue", wait * 2, move |inner| {
                let (keys, owner) = (keys.clone(), owner.clone());
                async move { inner.leave_queue(&keys, &owner, wait).await }
            });
        }
    }
}

/// A mutex handle.
#[derive(Debug)]
pub(crate) struct RedisMutex {
    inner: Arc<Inner>,
    name: Arc<str>,
    keys: Arc<LockKeys>,
}

impl RedisMutex {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> Result<Self> {
        let keys = Arc::new(inner.keys(name)?);
        Ok(RedisMutex {
            inner,
            name: name.into(),
            keys,
        })
    }

    /// An invocation of the acquire script `script` for `owner` with `lease`: the keys and
    /// arguments every acquire script starts with (lock hash and fencing counter; owner, lease
    /// ms, counter TTL ms). A script that needs more adds them after.
    fn acquire_invocation<'a>(
        &self,
        script: &'a Script,
        owner: &str,
        lease: Duration,
    ) -> ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(&self.keys.lock)
            .key(&self.keys.fence)
            .arg(owner)
            .arg(lease.as_millis() as u64)
            .arg(self.inner.settings.fence_ttl.as_millis() as u64);
        inv
    }

    /// Waits until the replicas have our acquire (`wait_replicas`); when they do not, releases
    /// it again and fails with `ReplicaSync`.
    /// (`epoch`: the Sentinel epoch the acquire was sent in.) The callers keep their cleanup
    /// armed while this runs, so a rollback that fails is retried by the reaper.
    async fn confirm_replicas(&self, owner: &str, fair: bool, epoch: Ticket) -> Result<()> {
        let synced = self.inner.replicas.acquired(epoch).await;
        if let Err(e) = synced {
            self.inner.release_mutex(&self.keys, owner, fair).await?;
            return Err(rolled_back(&self.name, e));
        }
        Ok(())
    }

    /// The guard parts of a new ownership whose server expiry, `expiry`, was set no earlier
    /// than `sent_at`.
    fn guard(
        &self,
        owner: String,
        token: u64,
        lease: Lease,
        sent_at: Instant,
        expiry: Duration,
        fair: bool,
    ) -> GuardParts {
        let state = StateCell::new(LeaseClock::starting(sent_at, expiry));
        let id = self.inner.watchdog.register(Watched {
            kind: crate::watchdog::RenewKind::Hash,
            name: self.name.clone(),
            key: self.keys.lock.clone(),
            owner: owner.clone(),
            lease: lease.duration(),
            renew: lease.is_watchdog(),
            sent_at,
            expiry,
            state: state.clone(),
        });
        let held = RedisHeld {
            inner: self.inner.clone(),
            name: self.name.clone(),
            keys: self.keys.clone(),
            owner,
            id,
            fair,
            reentries: Reentries::new(state.clone()),
            state: state.clone(),
        };
        GuardParts::new(FencingToken(token), lease, state, Box::new(held))
    }
}

#[async_trait]
impl RawMutex for RedisMutex {
    /// # Cancel safety
    /// Dropping the future leaves no lock behind: an acquire whose reply was not seen is undone
    /// in the background by its (unique) owner field, and a waiter leaves the queue the same way
    /// (passing on a lock handed to it meanwhile). Its share of the channel subscription is
    /// dropped with it.
    async fn acquire(&self, req: &Request) -> Result<Option<GuardParts>> {
        match (self.inner.settings.redisson_compat, req.fair()) {
            (false, _) => queue::acquire(self, req).await,
            (true, false) => redisson::acquire(self, req).await,
            (true, true) => redisson::acquire_fair(self, req).await,
        }
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(probe(&self.inner, &self.keys).await?.locked)
    }

    async fn force_unlock(&self) -> Result<bool> {
        let (scripts, settings) = (&self.inner.scripts, &self.inner.settings);
        let mut inv;
        if settings.redisson_compat {
            inv = scripts.rs_force_unlock.prepare_invoke();
            inv.key(&self.keys.lock)
                .key(&self.keys.queue)
                .key(&self.keys.waiters)
                .arg(&self.keys.channel)
                .arg(crate::client::wall_ms());
        } else {
            inv = scripts.force_unlock.prepare_invoke();
            inv.key(&self.keys.lock)
                .key(&self.keys.fence)
                .key(&self.keys.queue)
                .key(&self.keys.waiters)
                .arg(settings.fence_ttl.as_millis() as u64);
        }
        let r: i64 = self.inner.invoke(&inv, "force_unlock").await?;
        Ok(r == 1)
    }

    async fn remaining_lease(&self) -> Result<Option<Duration>> {
        let p = probe(&self.inner, &self.keys).await?;
        Ok(if p.locked {
            Some(p.pttl.unwrap_or(Duration::MAX))
        } else {
            None
        })
    }
}

/// What the probe script saw.
pub(crate) struct Probe {
    pub(crate) locked: bool,
    /// The remaining lease; `None` when free or when the key has no expiry.
    pub(crate) pttl: Option<Duration>,
}

pub(crate) async fn probe(inner: &Inner, keys: &LockKeys) -> Result<Probe> {
    let mut inv = inner.scripts.probe.prepare_invoke();
    inv.key(&keys.lock);
    let pttl: i64 = inner.invoke(&inv, "probe").await?;
    Ok(Probe {
        locked: pttl != -2,
        pttl: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
    })
}

/// The error of an acquire the replicas did not acknowledge, which was rolled back.
pub(crate) fn rolled_back(name: &str, e: Error) -> Error {
    Error::new(
        e.kind(),
        format!("lock {name:?}: the acquire was rolled back: {e}"),
    )
    .with_retryable(true)
    .with_source(e)
}

/// Waits until the replicas have a release (sent in `epoch`), as Redisson does; the lock is
/// released on the primary either way, so a release they miss is only logged (after a failover
/// it comes back until its lease ends).
pub(crate) async fn released_on_replicas(inner: &Inner, name: &str, epoch: Ticket) {
    if let Err(e) = inner.replicas.kept("release", epoch).await {
        tracing::warn!(
            backend = "redis",
            lock = name,
            error = %e,
            "lockkit: a release did not reach the replicas"
        );
    }
}

/// One held ownership of a mutex.
#[derive(Debug)]
struct RedisHeld {
    inner: Arc<Inner>,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    owner: String,
    id: u64,
    /// Acquired in fair mode with `redisson_compat`: the release wakes the first queued waiter
    /// by name. (A native release always hands the lock to the first queued waiter.)
    fair: bool,
    /// The reentries the server counts (see `Inner::reenter`).
    reentries: Reentries,
    state: StateCell,
}

#[async_trait]
impl Held for RedisHeld {
    async fn release(&self) -> Result<()> {
        self.inner.watchdog.unregister(self.id);
        let epoch = self.inner.replicas.ticket(&self.keys.lock);
        match self
            .inner
            .release_mutex(&self.keys, &self.owner, self.fair)
            .await
        {
            Ok(true) => {
                released_on_replicas(&self.inner, &self.name, epoch).await;
                Ok(())
            }
            Ok(false) => Err(Error::lost(&self.name)),
            Err(e) => {
                // Retried until it succeeds (the unlock latch makes a retry answer like the
                // first try) or the lock has certainly expired; it then hands the lock on.
                let (keys, owner, fair) = (self.keys.clone(), self.owner.clone(), self.fair);
                let moot = expiry_bound(&self.state);
                self.inner.reap("release a lock", moot, move |inner| {
                    let (keys, owner) = (keys.clone(), owner.clone());
                    async move { inner.release_mutex(&keys, &owner, fair).await.map(drop) }
                });
                Err(e)
            }
        }
    }

    async fn extend(&self, lease: Duration) -> Result<()> {
        let renew = &self.inner.scripts.renew;
        self.inner
            .extend(
                renew,
                &self.keys.lock,
                &self.owner,
                lease,
                self.id,
                &self.name,
            )
            .await
    }

    async fn reenter(&self) -> Result<()> {
        let (keys, owner) = (&self.keys, &self.owner);
        self.inner
            .reenter(&self.reentries, &keys.lock, owner, self.id, &self.name)
            .await
    }
}
