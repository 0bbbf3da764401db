//! `Locks`: the handle users hold, over one backend client.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::capabilities::Capabilities;
use crate::election::Election;
use crate::error::{Error, Result};
use crate::inspect::{LockEntry, LockInfo, Primitive};
use crate::kernel::Kernel;
use crate::kind::BackendKind;
use crate::member::Member;
use crate::multi::MultiLock;
use crate::mutex::Mutex;
use crate::name::validate_name;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
use crate::spi::Backend;

/// A cheap-to-clone handle to one backend client, returned by `lockkit::connect`.
///
/// Every [`Mutex`], [`RwLock`], [`Semaphore`] and guard made from it keeps the backend client
/// alive, so dropping the `Locks` early changes nothing; the client's background tasks stop when
/// the last of them is gone. Only [`close`](Self::close) ends it while they live.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lockkit_core::Result<()> {
/// let locks = lockkit_core::Locks::memory();
/// let orders = locks.mutex("orders/42")?;
/// let guard = orders.lock().await?;
/// println!("token {}", guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locks {
    kernel: Arc<Kernel>,
}

impl fmt::Debug for Locks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locks")
            .field("backend", &self.kernel.backend)
            .field("default_lease", &self.kernel.default_lease)
            .finish()
    }
}

impl Locks {
    /// Wraps a backend client (backends call this from their `connect`).
    pub fn new(backend: impl Backend) -> Self {
        Locks {
            kernel: Kernel::new(Arc::new(backend)),
        }
    }

    /// A mutex named `name`. Fails with `InvalidName` for a bad name.
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        validate_name(name)?;
        self.kernel.check_open()?;
        let raw = self.kernel.backend.mutex(name)?;
        Ok(Mutex::new(self.kernel.clone(), name, raw))
    }

    /// A read-write lock named `name`, or `Unsupported`.
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        validate_name(name)?;
        self.kernel.check_open()?;
        self.kernel.support(Primitive::RwLock)?;
        let raw = self.kernel.backend.rwlock(name)?;
        Ok(RwLock::new(self.kernel.clone(), name, raw))
    }

    /// A semaphore named `name` of `permits` permits, or `Unsupported`.
    ///
    /// Where the backend keeps the size with the semaphore
    /// ([`Capabilities::semaphore_size`](crate::Capabilities::semaphore_size)), the first
    /// acquire stores `permits` when no size is stored yet, and an acquire finding another size
    /// stored fails with `InvalidArgument` naming it: two processes that disagree never
    /// oversubscribe. Elsewhere each handle counts against its own `permits`.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        if permits == 0 {
            return Err(Error::invalid("a semaphore needs at least one permit"));
        }
        self.make_semaphore(name, Some(permits))
    }

    /// A semaphore named `name` of whatever size is stored with it, as set by the first
    /// [`semaphore`](Self::semaphore) handle to acquire or by
    /// [`Semaphore::set_permits`]. Its acquires follow every change of size; one made while
    /// no size is stored fails with `InvalidArgument`. `Unsupported` where the backend keeps
    /// no size ([`Capabilities::semaphore_size`](crate::Capabilities::semaphore_size)).
    pub fn open_semaphore(&self, name: &str) -> Result<Semaphore> {
        self.make_semaphore(name, None)
    }

    fn make_semaphore(&self, name: &str, permits: Option<u32>) -> Result<Semaphore> {
        validate_name(name)?;
        self.kernel.check_open()?;
        self.kernel.support(Primitive::Semaphore)?;
        if permits.is_none() {
            self.kernel.semaphore_size()?;
        }
        let raw = self.kernel.backend.semaphore(name, permits)?;
        Ok(Semaphore::new(self.kernel.clone(), name, permits, raw))
    }

    /// A leader election named `name`, or `Unsupported`. Its names are apart from the locks'
    /// names.
    pub fn election(&self, name: &str) -> Result<Election> {
        validate_name(name)?;
        self.kernel.check_open()?;
        self.kernel.support(Primitive::Election)?;
        let raw = self.kernel.backend.election(name)?;
        Ok(Election::new(self.kernel.clone(), name, raw))
    }

    /// A multi-lock over the mutexes `names`: all of them or none, within one wait budget,
    /// taken in one fixed global order so that multi-locks over overlapping sets never deadlock
    /// (see [`MultiLock`]). A name given twice is an `InvalidArgument`.
    pub fn multi<I, S>(&self, names: I) -> Result<MultiLock>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let names: Vec<S> = names.into_iter().collect();
        let members: Vec<Member<'_>> = names.iter().map(|n| Member::Mutex(n.as_ref())).collect();
        self.multi_of(&members)
    }

    /// A multi-lock over mutexes and read or write holds of RW locks, as [`multi`](Self::multi).
    pub fn multi_of(&self, members: &[Member<'_>]) -> Result<MultiLock> {
        MultiLock::new(
            self.kernel.clone(),
            members,
            |p, n| self.kernel.backend.resource(p, n),
            |n| self.mutex(n),
            |n| self.rwlock(n),
        )
    }

    /// What the backend offers.
    pub fn capabilities(&self) -> Capabilities {
        self.kernel.caps
    }

    /// Which backend this is.
    pub fn backend(&self) -> BackendKind {
        self.kernel.kind
    }

    /// The lease an acquire gets when it names none (`LockConfig::lease`, 30 s unless set).
    pub fn default_lease(&self) -> Duration {
        self.kernel.default_lease
    }

    /// The backend as its concrete type, for backend-specific extensions; `None` if it is
    /// another backend.
    ///
    /// ```
    /// let locks = lockkit_core::Locks::memory();
    /// assert!(locks.backend_as::<lockkit_core::mem::MemBackend>().is_some());
    /// ```
    pub fn backend_as<T: Backend>(&self) -> Option<&T> {
        let any: &dyn Any = &*self.kernel.backend;
        any.downcast_ref::<T>()
    }

    /// The locks whose names start with `prefix` (`""` for all) that have a holder or a waiter
    /// right now, sorted by name then primitive, for operators (`lockkit top`). A snapshot read
    /// in pages, never blocking the server; a lock taken or freed meanwhile may be missed or
    /// listed (on Redis, a lock whose last waiter gave up up to a heartbeat ago).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let locks = lockkit_core::Locks::memory();
    /// let _g = locks.mutex("jobs/a").unwrap().lock().await.unwrap();
    /// let listed = locks.list("jobs/").await.unwrap();
    /// assert_eq!(listed, [lockkit_core::LockEntry::new("jobs/a", lockkit_core::Primitive::Mutex)]);
    /// # });
    /// ```
    pub async fn list(&self, prefix: &str) -> Result<Vec<LockEntry>> {
        if let Some(c) = prefix.chars().find(|c| c.is_control()) {
            return Err(Error::new(
                crate::error::ErrorKind::InvalidName,
                format!("name prefix {prefix:?} contains the control character {c:?}"),
            ));
        }
        self.kernel.check_open()?;
        if !self.kernel.backend.capabilities().list {
            return Err(Error::unsupported(format!(
                "the {} backend cannot list locks",
                self.kernel.kind
            )));
        }
        let mut found = self.kernel.backend.list(prefix).await?;
        // A key or node that only looks like a lock (a name no caller could have passed) is
        // left out rather than handed to `inspect` to fail.
        found.retain(|e| e.name.starts_with(prefix) && validate_name(&e.name).is_ok());
        found.sort();
        found.dedup();
        Ok(found)
    }

    /// Holders and waiters of one lock, for operators (`lockkit inspect`).
    pub async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        validate_name(name)?;
        self.kernel.check_open()?;
        if !self.kernel.support(primitive)?.inspect {
            return Err(Error::unsupported(format!(
                "the {} backend cannot inspect a {}",
                self.kernel.kind,
                primitive.describe()
            )));
        }
        self.kernel.backend.inspect(name, primitive).await
    }

    /// Closes the handle, with the same meaning on every backend: every guard made from it
    /// turns Lost (reason `Closed`), later acquires and calls fail with `Closed`, and the
    /// server-side resources (held keys and nodes, sessions, leases) are given back now rather
    /// than when they expire. Every clone of the handle is closed.
    pub async fn close(&self) -> Result<()> {
        self.kernel.close().await
    }
}
