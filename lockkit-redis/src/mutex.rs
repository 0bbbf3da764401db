//! The mutex: Redisson RLock semantics (a hash per lock, hold counts, a watchdog lease) with
//! ownership per acquisition. How a waiter gets the lock depends on the layout: natively a
//! queue with a direct hand-off ([`queue`]), with `redisson_compat` Redisson's own wake-ups
//! ([`redisson`]).

use std::time::Duration;

use lockkit_core::spi::{GuardParts, RawMutex, Request};
use lockkit_core::{async_trait, Result};

use crate::client::Inner;
use crate::keys::LockKeys;

mod handle;
mod held;
mod queue;
mod redisson;

pub(crate) use handle::RedisMutex;
pub(crate) use queue::campaign;

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
        // An election is always on the native layout.
        if settings.redisson_compat && self.keys.leader.is_none() {
            inv = scripts.rs_force_unlock.prepare_invoke();
            inv.key(&self.keys.lock)
                .key(&self.keys.queue)
                .key(&self.keys.waiters)
                .arg(&self.keys.channel)
                .arg(crate::client::wall_ms())
                .arg(self.inner.holder_channels());
        } else {
            inv = scripts.force_unlock.prepare_invoke();
            inv.key(&self.keys.lock)
                .key(&self.keys.fence)
                .key(&self.keys.queue)
                .key(&self.keys.waiters)
                .arg(settings.fence_ttl.as_millis() as u64)
                .arg(self.inner.holder_channels());
            if let Some(leader) = &self.keys.leader {
                inv.key(leader).key(&self.keys.channel);
            }
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
