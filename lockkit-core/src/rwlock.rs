//! `RwLock`: a named distributed read-write lock handle.

use std::fmt;
use std::sync::Arc;

use crate::error::Result;
use crate::guard::{ReadGuard, WriteGuard};
use crate::inspect::Primitive;
use crate::kernel::Kernel;
use crate::mutex::forever;
use crate::options::AcquireOptions;
use crate::ownership::{GuardCore, Ownership};
use crate::spi::RawRwLock;

/// A named distributed read-write lock, made by [`Locks::rwlock`](crate::Locks::rwlock):
/// readers share, a writer is exclusive, and a waiting writer blocks new readers so writers
/// are not starved. Cheap to clone.
#[derive(Clone)]
pub struct RwLock {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    raw: Box<dyn RawRwLock>,
    kernel: Arc<Kernel>,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.inner.name)
            .field("backend", &self.inner.kernel.kind)
            .finish()
    }
}

impl RwLock {
    pub(crate) fn new(kernel: Arc<Kernel>, name: &str, raw: Box<dyn RawRwLock>) -> Self {
        RwLock {
            inner: Arc::new(Inner {
                name: name.into(),
                raw,
                kernel,
            }),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Acquires a read (shared) lock; `Ok(None)` when the wait budget ran out.
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing behind.
    pub async fn read(&self, opts: &AcquireOptions) -> Result<Option<ReadGuard>> {
        let i = &self.inner;
        let own = i
            .kernel
            .acquire(Primitive::RwLock, &i.name, opts, 1, |req| async move {
                i.raw.read(&req).await
            })
            .await?;
        Ok(own.map(read_guard))
    }

    /// Acquires the write (exclusive) lock; `Ok(None)` when the wait budget ran out.
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing behind, and readers it was holding back are let in.
    pub async fn write(&self, opts: &AcquireOptions) -> Result<Option<WriteGuard>> {
        let i = &self.inner;
        let own = i
            .kernel
            .acquire(Primitive::RwLock, &i.name, opts, 1, |req| async move {
                i.raw.write(&req).await
            })
            .await?;
        Ok(own.map(write_guard))
    }

    /// Waits until a read lock is acquired.
    pub async fn read_lock(&self) -> Result<ReadGuard> {
        forever(self.read(&AcquireOptions::new()).await?)
    }

    /// Waits until the write lock is acquired.
    pub async fn write_lock(&self) -> Result<WriteGuard> {
        forever(self.write(&AcquireOptions::new()).await?)
    }

    /// One attempt at a read lock.
    pub async fn try_read(&self) -> Result<Option<ReadGuard>> {
        self.read(&AcquireOptions::new().no_wait()).await
    }

    /// One attempt at the write lock.
    pub async fn try_write(&self) -> Result<Option<WriteGuard>> {
        self.write(&AcquireOptions::new().no_wait()).await
    }

    /// Whether anyone holds the lock, in either mode.
    pub async fn is_locked(&self) -> Result<bool> {
        self.inner.kernel.check_open()?;
        self.inner.raw.is_locked().await
    }

    /// Admin: releases every read and write hold. Returns whether anything was held.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.inner.kernel.check_open()?;
        let done = self.inner.raw.force_unlock().await?;
        let id = crate::telemetry::Identity::new(
            self.inner.kernel.kind,
            crate::Primitive::RwLock,
            self.inner.name.clone(),
        );
        crate::telemetry::force_unlocked(&id, done);
        Ok(done)
    }
}

/// The read guard of `own`, a read ownership.
pub(crate) fn read_guard(own: Arc<Ownership>) -> ReadGuard {
    ReadGuard {
        core: GuardCore::new(own),
    }
}

/// The write guard of `own`, a write ownership.
pub(crate) fn write_guard(own: Arc<Ownership>) -> WriteGuard {
    WriteGuard {
        core: GuardCore::new(own),
    }
}
