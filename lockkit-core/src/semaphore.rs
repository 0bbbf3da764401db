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
/// [`Locks::semaphore`](crate::Locks::semaphore) (of a size) or
/// [`Locks::open_semaphore`](crate::Locks::open_semaphore) (of the size stored with it): a dead
/// holder's permits come back when its lease runs out. Cheap to clone.
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    permits: Option<u32>,
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
        permits: Option<u32>,
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

    /// The size this handle asks for: `Some` when made by
    /// [`Locks::semaphore`](crate::Locks::semaphore), `None` when made by
    /// [`Locks::open_semaphore`](crate::Locks::open_semaphore) (see [`size`](Self::size)).
    pub fn permits(&self) -> Option<u32> {
        self.inner.permits
    }

    /// Acquires `n` permits at once; `Ok(None)` when the wait budget ran out. `n` of zero or
    /// above the size gives `InvalidArgument`, and so does a size stored on the server other
    /// than the one this handle asks for (the error names it).
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing behind.
    pub async fn acquire(&self, n: u32, opts: &AcquireOptions) -> Result<Option<Permit>> {
        let i = &self.inner;
        if n == 0 {
            return Err(Error::invalid("cannot acquire 0 permits"));
        }
        if let Some(p) = i.permits.filter(|&p| n > p) {
            return Err(crate::spi::too_many(&i.name, n, p));
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

    /// The size stored with the semaphore on the server, `None` before anyone stored one.
    /// `Unsupported` where the backend keeps no size
    /// ([`Capabilities::semaphore_size`](crate::Capabilities::semaphore_size)).
    pub async fn size(&self) -> Result<Option<u32>> {
        let k = &self.inner.kernel;
        k.check_open()?;
        k.semaphore_size()?;
        self.inner.raw.size().await
    }

    /// Admin: makes `permits` the size for every handle, returning the size stored before.
    /// Growing admits the waiters that now fit at once; shrinking lets holders keep their
    /// permits and admits no one until the permits in use plus a request fit the new size, and
    /// a waiter asking for more than the new size is refused. A handle's size is checked when
    /// its acquire starts: acquires already waiting count against the new size, while new
    /// acquires of a handle made with another size are refused (`InvalidArgument`), so
    /// processes that should follow an operator's change open the semaphore with
    /// [`Locks::open_semaphore`](crate::Locks::open_semaphore). `Unsupported` where the
    /// backend keeps no size.
    pub async fn set_permits(&self, permits: u32) -> Result<Option<u32>> {
        let k = &self.inner.kernel;
        k.check_open()?;
        k.semaphore_size()?;
        if permits == 0 {
            return Err(Error::invalid("a semaphore needs at least one permit"));
        }
        self.inner.raw.set_size(permits).await
    }
}
