//! `Semaphore`: a named distributed counting semaphore handle.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::guard::Permit;
use crate::inspect::Primitive;
use crate::kernel::Kernel;
use crate::mutex::forever;
use crate::options::AcquireOptions;
use crate::ownership::GuardCore;
use crate::spi::RawSemaphore;

/// A named distributed counting semaphore with leased permits, made by
/// [`Locks::semaphore`](crate::Locks::semaphore): a dead holder's permits come back when its
/// lease runs out. Cheap to clone.
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    permits: u32,
    raw: Box<dyn RawSemaphore>,
    kernel: Arc<Kernel>,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.inner.name)
            .field("permits", &self.inner.permits)
            .field("backend", &self.inner.kernel.kind)
            .finish()
    }
}

impl Semaphore {
    pub(crate) fn new(
        kernel: Arc<Kernel>,
        name: &str,
        permits: u32,
        raw: Box<dyn RawSemaphore>,
    ) -> Self {
        Semaphore {
            inner: Arc::new(Inner {
                name: name.into(),
                permits,
                raw,
                kernel,
            }),
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The total number of permits this handle was created with.
    pub fn permits(&self) -> u32 {
        self.inner.permits
    }

    /// Acquires `n` permits at once; `Ok(None)` when the wait budget ran out. `n` of zero or
    /// above [`permits`](Self::permits) gives `InvalidArgument`.
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing behind.
    pub async fn acquire(&self, n: u32, opts: &AcquireOptions) -> Result<Option<Permit>> {
        let i = &self.inner;
        if n == 0 || n > i.permits {
            return Err(Error::invalid(format!(
                "cannot acquire {n} of {} permits",
                i.permits
            )));
        }
        let own = i
            .kernel
            .acquire(Primitive::Semaphore, &i.name, opts, n, |req| async move {
                i.raw.acquire(n, &req).await
            })
            .await?;
        Ok(own.map(|own| Permit {
            core: GuardCore::new(own),
        }))
    }

    /// Waits for one permit.
    pub async fn acquire_one(&self) -> Result<Permit> {
        forever(self.acquire(1, &AcquireOptions::new()).await?)
    }

    /// One attempt at `n` permits.
    pub async fn try_acquire(&self, n: u32) -> Result<Option<Permit>> {
        self.acquire(n, &AcquireOptions::new().no_wait()).await
    }

    /// Permits free right now.
    pub async fn available(&self) -> Result<u32> {
        self.inner.kernel.check_open()?;
        self.inner.raw.available().await
    }
}
