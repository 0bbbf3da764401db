//! The mutex handle: what every acquire of one mutex shares, whatever the layout, from the
//! first script call to the guard's parts, and the cleanup of a waiter that leaves.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::{moot_after, GuardParts, Watched};
use lockkit_core::{Lease, Result};
use redis::{Script, ScriptInvocation};
use tokio::time::Instant;

use super::held::RedisHeld;
use crate::client::{Inner, Reentries};
use crate::keys::LockKeys;
use crate::replicas::Ticket;
use crate::watchdog::Renewal;

/// A mutex handle.
#[derive(Debug)]
pub(crate) struct RedisMutex {
    pub(crate) inner: Arc<Inner>,
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
}

impl RedisMutex {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> Result<Self> {
        Self::of(inner, name, false)
    }

    /// The native mutex on election `name`'s keys ([`LockKeys::election`]), whose owner leads.
    pub(crate) fn election(inner: Arc<Inner>, name: &str) -> Result<Self> {
        Self::of(inner, name, true)
    }

    /// Keys from `Inner::mutex_keys`, which a held lock whose handle is gone calls again.
    fn of(inner: Arc<Inner>, name: &str, election: bool) -> Result<Self> {
        let keys = inner.mutex_keys(name, election)?;
        Ok(RedisMutex {
            inner,
            name: name.into(),
            keys: Arc::new(keys),
        })
    }

    /// Hands the reaper taking `owner` out of the mutex's queue, for an acquire that ends
    /// without the lock (its wait ran out, it failed, or its future was dropped): natively this
    /// also passes on a lock handed to it meanwhile. `wait`: how long the waiter's place lasts
    /// once it stops renewing it (natively its heartbeat timeout; in Redisson's fair queue, its
    /// wait). `lease`: the lease an attempt whose answer was not seen may have taken the lock
    /// with (zero when none could have). Called when an acquire's claim is left or abandoned.
    pub(crate) fn leave_later(&self, owner: &str, wait: Duration, lease: Duration) {
        // A waiter that never left is skipped once its place lapses, and natively a lock
        // handed to it lapses after as long; one its own attempt took lasts that lease.
        self.leave_within(owner, wait, moot_after(&[lease, wait * 2]));
    }

    /// [`leave_later`](Self::leave_later), tried for `moot_after` (for a lock `owner` may have
    /// taken itself: its lease).
    pub(crate) fn leave_within(&self, owner: &str, wait: Duration, moot_after: Duration) {
        let (keys, owner) = (self.keys.clone(), owner.to_string());
        self.inner
            .reap("leave a lock queue", moot_after, move |inner| {
                let (keys, owner) = (keys.clone(), owner.clone());
                async move { inner.leave_queue(&keys, &owner, wait).await }
            });
    }

    /// An invocation of the acquire script `script` for `owner` with `lease`: the keys and
    /// arguments every acquire script starts with (lock hash and fencing counter; owner, lease
    /// ms, counter TTL ms). A script that needs more adds them after.
    pub(super) fn acquire_invocation<'a>(
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
    pub(super) async fn confirm_replicas(
        &self,
        owner: &str,
        fair: bool,
        epoch: Ticket,
    ) -> Result<()> {
        let synced = self.inner.replicas.acquired(epoch).await;
        if let Err(e) = synced {
            self.inner.release_mutex(&self.keys, owner, fair).await?;
            return Err(crate::error::rolled_back(&self.name, e));
        }
        Ok(())
    }

    /// The guard parts of a new ownership whose server expiry, `expiry`, was set no earlier
    /// than `sent_at`, and its id in the watchdog.
    pub(crate) fn guard(
        &self,
        owner: String,
        token: u64,
        lease: Lease,
        sent_at: Instant,
        expiry: Duration,
        fair: bool,
    ) -> (GuardParts, u64) {
        let watched = Watched {
            name: self.name.clone(),
            sent_at,
            expiry,
            entry: Renewal::of_mutex(&self.keys, &owner),
        };
        // Set by the closure, which `hold` always calls.
        let mut watch_id = 0;
        let parts = self
            .inner
            .watchdog
            .hold(watched, token, lease, |id, state| {
                watch_id = id;
                Box::new(RedisHeld {
                    inner: self.inner.clone(),
                    name: self.name.clone(),
                    keys: Arc::downgrade(&self.keys),
                    election: self.keys.leader.is_some(),
                    owner,
                    id,
                    fair,
                    reentries: Reentries::new(state.clone()),
                    state,
                })
            });
        (parts, watch_id)
    }
}
