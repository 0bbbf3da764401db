//! The read-write lock trait.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::Result;
use crate::guard::{ReadGuard, WriteGuard};
use crate::options::AcquireOptions;

/// A named distributed read-write lock: readers share, a writer is exclusive, and a waiting
/// writer blocks new readers so writers are not starved.
#[async_trait]
pub trait ReadWriteLock: Send + Sync + fmt::Debug + 'static {
    /// The lock's name.
    fn name(&self) -> &str;

    /// Acquires a read (shared) lock; `Ok(None)` when the wait budget ran out.
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing behind.
    async fn read(&self, opts: &AcquireOptions) -> Result<Option<ReadGuard>>;

    /// Acquires the write (exclusive) lock; `Ok(None)` when the wait budget ran out.
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing behind, and readers it was holding back are let in.
    async fn write(&self, opts: &AcquireOptions) -> Result<Option<WriteGuard>>;

    /// Whether anyone holds the lock, in either mode.
    async fn is_locked(&self) -> Result<bool>;

    /// Admin: releases every read and write hold. Returns whether anything was held.
    async fn force_unlock(&self) -> Result<bool>;
}

/// Conveniences over [`ReadWriteLock`].
pub trait ReadWriteLockExt: ReadWriteLock {
    /// Waits until a read lock is acquired.
    fn read_lock(&self) -> impl Future<Output = Result<ReadGuard>> + Send + '_ {
        async move {
            Ok(self
                .read(&AcquireOptions::new())
                .await?
                .expect("waits forever"))
        }
    }

    /// Waits until the write lock is acquired.
    fn write_lock(&self) -> impl Future<Output = Result<WriteGuard>> + Send + '_ {
        async move {
            Ok(self
                .write(&AcquireOptions::new())
                .await?
                .expect("waits forever"))
        }
    }

    /// One attempt at a read lock.
    fn try_read(&self) -> impl Future<Output = Result<Option<ReadGuard>>> + Send + '_ {
        async move { self.read(&AcquireOptions::new().no_wait()).await }
    }

    /// One attempt at the write lock.
    fn try_write(&self) -> impl Future<Output = Result<Option<WriteGuard>>> + Send + '_ {
        async move { self.write(&AcquireOptions::new().no_wait()).await }
    }
}

impl<T: ReadWriteLock + ?Sized> ReadWriteLockExt for T {}

macro_rules! forward_rwlock {
    ($($ptr:ident),*) => {$(
        #[async_trait]
        impl<T: ReadWriteLock + ?Sized> ReadWriteLock for $ptr<T> {
            fn name(&self) -> &str {
                (**self).name()
            }
            async fn read(&self, opts: &AcquireOptions) -> Result<Option<ReadGuard>> {
                (**self).read(opts).await
            }
            async fn write(&self, opts: &AcquireOptions) -> Result<Option<WriteGuard>> {
                (**self).write(opts).await
            }
            async fn is_locked(&self) -> Result<bool> {
                (**self).is_locked().await
            }
            async fn force_unlock(&self) -> Result<bool> {
                (**self).force_unlock().await
            }
        }
    )*};
}
forward_rwlock!(Arc, Box);
