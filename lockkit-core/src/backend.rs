//! The backend trait and the `Locks` handle users hold.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{Error, ErrorKind, Result};
use crate::inspect::{LockInfo, Primitive};
use crate::lock::DistLock;
use crate::name::validate_name;
use crate::rwlock::ReadWriteLock;
use crate::semaphore::Semaphore;

/// Which backend a [`Locks`] handle talks to.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// In-process (`mem://`).
    Memory,
    /// Lock files in a directory (`file://`).
    File,
    /// Redis (`redis://`, `rediss://`).
    Redis,
    /// ZooKeeper (`zk://`).
    ZooKeeper,
    /// etcd (`etcd://`, `etcds://`).
    Etcd,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Memory => "mem",
            BackendKind::File => "file",
            BackendKind::Redis => "redis",
            BackendKind::ZooKeeper => "zk",
            BackendKind::Etcd => "etcd",
        })
    }
}

/// What a backend offers. The conformance suite checks that everything marked `false` returns
/// [`ErrorKind::Unsupported`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Read-write locks.
    pub rwlock: bool,
    /// Counting semaphores.
    pub semaphore: bool,
    /// Honours `AcquireOptions::fair` (FIFO order among waiters).
    pub fair: bool,
    /// Fixed (non-renewed) leases and `extend()`.
    pub fixed_lease: bool,
    /// Locks exclude other processes and machines (false only for `mem://`).
    pub cross_process: bool,
}

impl Capabilities {
    /// Mutex only.
    pub fn mutex_only() -> Self {
        Self::default()
    }

    /// Everything.
    pub fn all() -> Self {
        Capabilities {
            rwlock: true,
            semaphore: true,
            fair: true,
            fixed_lease: true,
            cross_process: true,
        }
    }
}

/// What a backend implements to plug into [`Locks`]. Names arrive validated.
#[async_trait]
pub trait Backend: Any + Send + Sync + fmt::Debug {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// What it offers.
    fn capabilities(&self) -> Capabilities;

    /// A mutex handle. Creating a handle talks to no server.
    fn mutex(&self, name: &str) -> Result<Arc<dyn DistLock>>;

    /// A read-write lock handle.
    fn rwlock(&self, name: &str) -> Result<Arc<dyn ReadWriteLock>> {
        let _ = name;
        Err(Error::unsupported(format!(
            "{} has no read-write lock",
            self.kind()
        )))
    }

    /// A semaphore handle with `permits` permits in total.
    fn semaphore(&self, name: &str, permits: u32) -> Result<Arc<dyn Semaphore>> {
        let _ = (name, permits);
        Err(Error::unsupported(format!(
            "{} has no semaphore",
            self.kind()
        )))
    }

    /// Stops background work and gives server-side resources back (sessions, leases).
    async fn close(&self) -> Result<()> {
        Ok(())
    }

    /// Holders and waiters of one lock, for operators.
    async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        let _ = (name, primitive);
        Err(Error::unsupported(format!(
            "{} cannot inspect locks",
            self.kind()
        )))
    }
}

/// A cheap-to-clone handle to one backend client, returned by `lockkit::connect`. Its background
/// tasks stop when the last clone is dropped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lockkit_core::Result<()> {
/// use lockkit_core::{DistLockExt, Locks};
/// let locks = Locks::memory();
/// let orders = locks.mutex("orders/42")?;
/// let guard = orders.lock().await?;
/// println!("token {}", guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locks {
    backend: Arc<dyn Backend>,
}

impl fmt::Debug for Locks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locks")
            .field("backend", &self.backend)
            .finish()
    }
}

impl Locks {
    /// Wraps a backend.
    pub fn new(backend: impl Backend) -> Self {
        Locks {
            backend: Arc::new(backend),
        }
    }

    /// A fresh in-process backend (`mem://`).
    pub fn memory() -> Self {
        Locks::new(crate::mem::MemBackend::new())
    }

    /// A mutex named `name`. Fails with `InvalidName` for a bad name.
    pub fn mutex(&self, name: &str) -> Result<Arc<dyn DistLock>> {
        validate_name(name)?;
        self.backend.mutex(name)
    }

    /// A read-write lock named `name`, or `Unsupported`.
    pub fn rwlock(&self, name: &str) -> Result<Arc<dyn ReadWriteLock>> {
        validate_name(name)?;
        self.backend.rwlock(name)
    }

    /// A semaphore named `name` with `permits` permits, or `Unsupported`.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Arc<dyn Semaphore>> {
        validate_name(name)?;
        if permits == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a semaphore needs at least one permit",
            ));
        }
        self.backend.semaphore(name, permits)
    }

    /// What the backend offers.
    pub fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    /// Which backend this is.
    pub fn backend(&self) -> BackendKind {
        self.backend.kind()
    }

    /// The backend itself.
    pub fn backend_ref(&self) -> &dyn Backend {
        &*self.backend
    }

    /// The backend as its concrete type, for backend-specific extensions; `None` if it is
    /// another backend.
    ///
    /// ```
    /// let locks = lockkit_core::Locks::memory();
    /// assert!(locks.backend_as::<lockkit_core::mem::MemBackend>().is_some());
    /// ```
    pub fn backend_as<T: Backend>(&self) -> Option<&T> {
        let any: &dyn Any = &*self.backend;
        any.downcast_ref::<T>()
    }

    /// Holders and waiters of one lock, for operators (`lockkit inspect`).
    pub async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        validate_name(name)?;
        self.backend.inspect(name, primitive).await
    }

    /// Gives server-side resources back now (for example etcd's lease), instead of waiting for
    /// them to expire. Guards still alive turn Lost.
    pub async fn close(&self) -> Result<()> {
        self.backend.close().await
    }
}
