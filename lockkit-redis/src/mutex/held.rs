//! One held ownership of a mutex: release, extend and reentry.

use std::sync::{Arc, Weak};
use std::time::Duration;

use lockkit_core::spi::{Held, StateCell};
use lockkit_core::{async_trait, Error, Result};

use crate::client::{expiry_bound, Inner, Reentries};
use crate::keys::LockKeys;
use crate::watchdog::Renewal;

/// One held ownership of a mutex.
#[derive(Debug)]
pub(super) struct RedisHeld {
    pub(super) inner: Arc<Inner>,
    pub(super) name: Arc<str>,
    /// The handle's keys, while the handle lives. Once it is gone they are built again when
    /// needed: kept alive, their strings would cost a held lock about 340 bytes more (the
    /// `Weak` still keeps the struct's block, about 240), and built for every release while the
    /// handle lives, they cost the contended 8-client rate about 0.85x in five bench pairs.
    pub(super) keys: Weak<LockKeys>,
    /// An election's leadership (its keys are [`LockKeys::election`]'s).
    pub(super) election: bool,
    pub(super) owner: String,
    pub(super) id: u64,
    /// Acquired in fair mode with `redisson_compat`: the release wakes the first queued waiter
    /// by name. (A native release always hands the lock to the first queued waiter.)
    pub(super) fair: bool,
    /// The reentries the server counts (see `Inner::reenter`).
    pub(super) reentries: Reentries,
    pub(super) state: StateCell,
}

impl RedisHeld {
    /// The lock's keys: the handle's, or built again as the handle built them. (An election's
    /// leader keeps them alive through its demotion listener while it leads.)
    fn keys(&self) -> Result<Arc<LockKeys>> {
        if let Some(keys) = self.keys.upgrade() {
            return Ok(keys);
        }
        Ok(Arc::new(self.inner.mutex_keys(&self.name, self.election)?))
    }
}

#[async_trait]
impl Held for RedisHeld {
    async fn release(&self) -> Result<()> {
        let keys = self.keys()?;
        self.inner.watchdog.unregister(self.id);
        let epoch = self.inner.replicas.ticket(&keys.lock);
        match self
            .inner
            .release_mutex(&keys, &self.owner, self.fair)
            .await
        {
            Ok(true) => {
                self.inner.replicas.released(&self.name, epoch).await;
                Ok(())
            }
            Ok(false) => Err(Error::lost(&self.name)),
            Err(e) => {
                // Retried until it succeeds (the unlock latch makes a retry answer like the
                // first try) or the lock has certainly expired; it then hands the lock on.
                let (keys, owner, fair) = (keys.clone(), self.owner.clone(), self.fair);
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
        let renewal = Renewal::of_mutex(&*self.keys()?, &self.owner);
        self.inner
            .extend(&renewal, lease, self.id, &self.name)
            .await
    }

    /// Elections only (see `scripts/proclaim.lua`).
    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        let keys = self.keys()?;
        let Some(leader) = &keys.leader else {
            return Err(Error::unsupported("a lock has no value to proclaim"));
        };
        let mut inv = self.inner.scripts.proclaim.prepare_invoke();
        inv.key(&keys.lock)
            .key(leader)
            .key(&keys.channel)
            .arg(&self.owner)
            .arg(value);
        let epoch = self.inner.replicas.ticket(&keys.lock);
        match self.inner.invoke::<i64>(&inv, "proclaim").await? {
            // The new value counts once the replicas have it, as a renewal does.
            1 => self.inner.replicas.kept("proclaim", epoch).await,
            _ => {
                self.inner.watchdog.lost(self.id);
                Err(Error::lost(&self.name))
            }
        }
    }

    async fn reenter(&self) -> Result<()> {
        let keys = self.keys()?;
        self.inner
            .reenter(
                &self.reentries,
                &keys.lock,
                &self.owner,
                self.id,
                &self.name,
            )
            .await
    }
}
