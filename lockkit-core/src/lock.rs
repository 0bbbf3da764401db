//! The mutex trait and its conveniences.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::fencing::FencingToken;
use crate::guard::LockGuard;
use crate::options::AcquireOptions;

/// A named distributed mutex. Backends implement this; callers mostly use [`DistLockExt`].
///
/// Ownership belongs to the acquisition (the guard), never to a thread, task or handle: every
/// acquire contends, even through the same handle in the same task. Use
/// [`LockGuard::reenter`] for reentrancy.
#[async_trait]
pub trait DistLock: Send + Sync + fmt::Debug + 'static {
    /// The lock's name.
    fn name(&self) -> &str;

    /// Acquires the lock. `Ok(None)` means the wait budget ran out (contention is not an error).
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing behind: no key, node, queue entry or lease, and the
    /// next acquirer is not delayed.
    async fn acquire(&self, opts: &AcquireOptions) -> Result<Option<LockGuard>>;

    /// Whether anyone holds the lock.
    async fn is_locked(&self) -> Result<bool>;

    /// The holds that acquisitions made through this handle currently have on the lock (0 when
    /// this handle holds none): Redisson's `getHoldCount`, with the handle in place of a thread.
    async fn hold_count(&self) -> Result<u32>;

    /// Admin: releases the lock whoever holds it. Returns whether it was held. The holder's
    /// guard turns Lost when its backend notices.
    async fn force_unlock(&self) -> Result<bool>;

    /// The holder's remaining lease, or `None` when the lock is free. Backends that cannot tell
    /// return `Unsupported`.
    async fn remaining_lease(&self) -> Result<Option<Duration>> {
        Err(crate::Error::unsupported(
            "remaining_lease is not offered by this backend",
        ))
    }
}

/// Conveniences over [`DistLock`], for every implementor.
pub trait DistLockExt: DistLock {
    /// Waits until acquired (30 s watchdog lease).
    fn lock(&self) -> impl Future<Output = Result<LockGuard>> + Send + '_ {
        async move {
            let guard = self.acquire(&AcquireOptions::new()).await?;
            Ok(guard.expect("an acquire that waits forever returns a guard"))
        }
    }

    /// One attempt, no waiting: `Ok(None)` when the lock is busy.
    fn try_lock(&self) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
        async move { self.acquire(&AcquireOptions::new().no_wait()).await }
    }

    /// Waits at most `wait`: `Ok(None)` when the budget ran out.
    fn lock_for(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
        async move { self.acquire(&AcquireOptions::new().wait(wait)).await }
    }

    /// Runs `f` while holding the lock (waiting forever for it), passing the fencing token, then
    /// releases and reports the release error if `f` succeeded.
    fn with_lock<F, Fut, T>(&self, f: F) -> impl Future<Output = Result<T>> + Send + '_
    where
        F: FnOnce(FencingToken) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        async move {
            let guard = self.lock().await?;
            let out = f(guard.token()).await;
            guard.release().await?;
            Ok(out)
        }
    }
}

impl<T: DistLock + ?Sized> DistLockExt for T {}

macro_rules! forward_dist_lock {
    ($($ptr:ident),*) => {$(
        #[async_trait]
        impl<T: DistLock + ?Sized> DistLock for $ptr<T> {
            fn name(&self) -> &str {
                (**self).name()
            }
            async fn acquire(&self, opts: &AcquireOptions) -> Result<Option<LockGuard>> {
                (**self).acquire(opts).await
            }
            async fn is_locked(&self) -> Result<bool> {
                (**self).is_locked().await
            }
            async fn hold_count(&self) -> Result<u32> {
                (**self).hold_count().await
            }
            async fn force_unlock(&self) -> Result<bool> {
                (**self).force_unlock().await
            }
            async fn remaining_lease(&self) -> Result<Option<Duration>> {
                (**self).remaining_lease().await
            }
        }
    )*};
}
forward_dist_lock!(Arc, Box);
