//! The semaphore trait.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::Result;
use crate::guard::Permit;
use crate::options::AcquireOptions;

/// Checks a permit count for [`Semaphore::acquire`]: `InvalidArgument` for zero or for more
/// than the semaphore's `total`. Every backend calls it, so they all answer alike.
pub fn check_permits(n: u32, total: u32) -> Result<()> {
    if n == 0 || n > total {
        return Err(crate::Error::new(
            crate::ErrorKind::InvalidArgument,
            format!("cannot acquire {n} of {total} permits"),
        ));
    }
    Ok(())
}

/// A named distributed counting semaphore with leased permits: a dead holder's permits come back
/// when its lease runs out.
#[async_trait]
pub trait Semaphore: Send + Sync + fmt::Debug + 'static {
    /// The semaphore's name.
    fn name(&self) -> &str;

    /// The total number of permits this handle was created with.
    fn permits(&self) -> u32;

    /// Acquires `n` permits at once; `Ok(None)` when the wait budget ran out. `n` of zero or above
    /// [`permits`](Semaphore::permits) gives `InvalidArgument`.
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing behind.
    async fn acquire(&self, n: u32, opts: &AcquireOptions) -> Result<Option<Permit>>;

    /// Permits free right now.
    async fn available(&self) -> Result<u32>;
}

/// Conveniences over [`Semaphore`].
pub trait SemaphoreExt: Semaphore {
    /// Waits for one permit.
    fn acquire_one(&self) -> impl Future<Output = Result<Permit>> + Send + '_ {
        async move {
            Ok(self
                .acquire(1, &AcquireOptions::new())
                .await?
                .expect("waits forever"))
        }
    }

    /// One attempt at `n` permits.
    fn try_acquire(&self, n: u32) -> impl Future<Output = Result<Option<Permit>>> + Send + '_ {
        async move { self.acquire(n, &AcquireOptions::new().no_wait()).await }
    }
}

impl<T: Semaphore + ?Sized> SemaphoreExt for T {}

macro_rules! forward_semaphore {
    ($($ptr:ident),*) => {$(
        #[async_trait]
        impl<T: Semaphore + ?Sized> Semaphore for $ptr<T> {
            fn name(&self) -> &str {
                (**self).name()
            }
            fn permits(&self) -> u32 {
                (**self).permits()
            }
            async fn acquire(&self, n: u32, opts: &AcquireOptions) -> Result<Option<Permit>> {
                (**self).acquire(n, opts).await
            }
            async fn available(&self) -> Result<u32> {
                (**self).available().await
            }
        }
    )*};
}
forward_semaphore!(Arc, Box);
