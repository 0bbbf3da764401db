//! `Mutex`: a named distributed mutex handle.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::guard::LockGuard;
use crate::inspect::Primitive;
use crate::kernel::Kernel;
use crate::options::AcquireOptions;
use crate::ownership::{GuardCore, HoldRegistry, Ownership};
use crate::spi::RawMutex;

/// A named distributed mutex, made by [`Locks::mutex`](crate::Locks::mutex). Cheap to clone;
/// clones are the same handle.
///
/// Ownership belongs to the acquisition (the guard), never to a thread, task or handle: every
/// acquire contends, even through the same handle in the same task. Use
/// [`LockGuard::reenter`] for reentrancy.
#[derive(Clone)]
pub struct Mutex {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    raw: Box<dyn RawMutex>,
    kernel: Arc<Kernel>,
    holds: HoldRegistry,
}

impl fmt::Debug for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("name", &self.inner.name)
            .field("backend", &self.inner.kernel.kind)
            .finish()
    }
}

impl Mutex {
    pub(crate) fn new(kernel: Arc<Kernel>, name: &str, raw: Box<dyn RawMutex>) -> Self {
        Mutex {
            inner: Arc::new(Inner {
                name: name.into(),
                raw,
                kernel,
                holds: HoldRegistry::default(),
            }),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Acquires the lock. `Ok(None)` means the wait budget ran out (contention is not an error).
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing behind: no key, node, queue entry or lease, and the
    /// next acquirer is not delayed.
    pub async fn acquire(&self, opts: &AcquireOptions) -> Result<Option<LockGuard>> {
        let i = &self.inner;
        let own = i
            .kernel
            .acquire(Primitive::Mutex, &i.name, opts, 1, |req| async move {
                i.raw.acquire(&req).await
            })
            .await?;
        Ok(own.map(|own| self.guard(own)))
    }

    /// The guard of `own`, an ownership of this lock, counted in its holds.
    pub(crate) fn guard(&self, own: Arc<Ownership>) -> LockGuard {
        self.inner.holds.track(&own);
        LockGuard {
            core: GuardCore::new(own),
        }
    }

    /// Waits until acquired, with the handle's default lease.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn lock(&self) -> Result<LockGuard> {
        forever(self.acquire(&AcquireOptions::new()).await?)
    }

    /// One attempt, no waiting: `Ok(None)` when the lock is busy.
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(&AcquireOptions::new().no_wait()).await
    }

    /// Waits at most `wait`: `Ok(None)` when the budget ran out.
    pub async fn lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(&AcquireOptions::new().wait(wait)).await
    }

    /// Runs `f` while holding the lock (waiting forever for it), passing the fencing token, then
    /// releases and reports the release error if `f` succeeded.
    pub async fn with_lock<F, Fut, T>(&self, f: F) -> Result<T>
    where
        F: FnOnce(FencingToken) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock().await?;
        let out = f(guard.token()).await;
        guard.release().await?;
        Ok(out)
    }

    /// Whether anyone holds the lock.
    pub async fn is_locked(&self) -> Result<bool> {
        self.inner.kernel.check_open()?;
        self.inner.raw.is_locked().await
    }

    /// The holds that acquisitions made through this handle (and its clones) currently have on
    /// the lock: Redisson's `getHoldCount`, with the handle in place of a thread.
    pub fn hold_count(&self) -> u32 {
        self.inner.holds.hold_count()
    }

    /// Admin: releases the lock whoever holds it. Returns whether it was held. The holder's
    /// guard turns Lost when its backend notices.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.inner.kernel.check_open()?;
        let done = self.inner.raw.force_unlock().await?;
        let id = crate::telemetry::Identity::new(
            self.inner.kernel.kind,
            crate::Primitive::Mutex,
            self.inner.name.clone(),
        );
        crate::telemetry::force_unlocked(&id, done);
        Ok(done)
    }

    /// The holder's remaining lease, or `None` when the lock is free. `Unsupported` where the
    /// backend cannot tell (see [`Capabilities`](crate::Capabilities)).
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        let k = &self.inner.kernel;
        k.check_open()?;
        if !k.caps.mutex.remaining_lease {
            return Err(Error::unsupported(format!(
                "the {} backend cannot tell a holder's remaining lease",
                k.kind
            )));
        }
        self.inner.raw.remaining_lease().await
    }
}

/// The guard of an acquire that waits forever: a backend returning `None` broke its contract.
pub(crate) fn forever<T>(guard: Option<T>) -> Result<T> {
    guard.ok_or_else(|| Error::contract("an acquire that waits forever returned no guard"))
}
