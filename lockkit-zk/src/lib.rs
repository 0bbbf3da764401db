#![doc = include_str!("../README.md")]

mod config;
mod error;
mod held;
mod mutex;
pub mod node;
mod queue;
mod rwlock;
mod semaphore;
mod session;
mod tls;

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::{
    encode_name, Backend, BackendKind, Capabilities, DistLock, HoldMode, HoldRegistry, HolderInfo,
    LockConfig, LockInfo, Locks, Primitive, ReadWriteLock, Result, Semaphore, WaiterInfo,
};

use crate::config::ZkConfig;
use crate::session::Session;

pub use crate::queue::find_by_prefix;

/// The ZooKeeper client crate this backend is built on, for tests and benchmarks that need raw
/// access at the same version.
#[doc(hidden)]
pub use zookeeper_client;

/// Finds the node `client`'s session created in `dir` with the protected prefix `prefix`
/// (`_c_<uuid>-<marker>`), as an acquire does after a connection loss interrupted its create.
/// A node with the prefix that another session owns is not ours (its `ephemeralOwner` differs)
/// and gives `None`: Curator's prefix-only lookup would claim it.
pub async fn find_own_node(
    client: &zookeeper_client::Client,
    dir: &str,
    prefix: &str,
) -> Result<Option<String>> {
    queue::find_protected(client, dir, prefix, std::time::Duration::from_secs(5)).await
}

/// Connects to ZooKeeper as described by `cfg` and returns a [`Locks`] handle. The handle owns
/// one ZooKeeper session, shared by all its locks.
///
/// # Cancel safety
/// Dropping the future before it finishes leaves no session behind.
pub async fn connect(cfg: &LockConfig) -> Result<Locks> {
    Ok(connect_backend(cfg).await?.into_locks())
}

/// Like [`connect`], but returns the backend itself, for its ZooKeeper-specific methods
/// ([`ZkBackend::mutex_path`] for Curator interop, [`ZkBackend::wake_count`]).
pub async fn connect_backend(cfg: &LockConfig) -> Result<ZkBackend> {
    let zk_cfg = ZkConfig::from_lock_config(cfg)?;
    Ok(ZkBackend {
        session: Session::open(zk_cfg).await?,
    })
}

/// The ZooKeeper backend. Clones share one session; it closes when the last clone (and the
/// last guard acquired through it) is dropped.
#[derive(Debug, Clone)]
pub struct ZkBackend {
    session: Arc<Session>,
}

impl ZkBackend {
    /// Wraps this backend in a [`Locks`] handle.
    pub fn into_locks(self) -> Locks {
        Locks::new(self)
    }

    /// The absolute ZooKeeper path of the mutex named `name`: give it to Curator's
    /// `InterProcessMutex` to contend for the same lock.
    pub fn mutex_path(&self, name: &str) -> String {
        self.dir("mutex", name)
    }

    /// The absolute path of the read-write lock `name`, for Curator's `InterProcessReadWriteLock`.
    pub fn rwlock_path(&self, name: &str) -> String {
        self.dir("rwlock", name)
    }

    /// The absolute path of the semaphore `name` (Curator's `InterProcessSemaphoreV2` layout).
    pub fn semaphore_path(&self, name: &str) -> String {
        self.dir("semaphore", name)
    }

    /// How many watch events waiters of this session have received so far (each one is a
    /// wake-up). With each waiter watching only its predecessor, one release wakes one waiter.
    pub fn wake_count(&self) -> u64 {
        self.session.wakes()
    }

    /// How many creates were interrupted by a connection loss and looked up again by their
    /// protected prefix.
    pub fn protected_lookups(&self) -> u64 {
        self.session.lookups()
    }

    /// The current ZooKeeper client, for tests and tools that need raw access (inspecting
    /// nodes, expiring the session).
    #[doc(hidden)]
    pub fn zk_client(&self) -> Result<zookeeper_client::Client> {
        self.session.client()
    }

    fn dir(&self, kind: &str, name: &str) -> String {
        format!("{}/{kind}/{}", self.session.cfg.root, encode_name(name))
    }
}

#[async_trait]
impl Backend for ZkBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::ZooKeeper
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::all();
        caps.fixed_lease = false;
        caps
    }

    fn mutex(&self, name: &str) -> Result<Arc<dyn DistLock>> {
        Ok(Arc::new(mutex::ZkMutex {
            session: self.session.clone(),
            name: name.to_string(),
            dir: self.mutex_path(name),
            holds: HoldRegistry::new(),
        }))
    }

    fn rwlock(&self, name: &str) -> Result<Arc<dyn ReadWriteLock>> {
        Ok(Arc::new(rwlock::ZkRwLock {
            session: self.session.clone(),
            name: name.to_string(),
            dir: self.rwlock_path(name),
        }))
    }

    fn semaphore(&self, name: &str, permits: u32) -> Result<Arc<dyn Semaphore>> {
        Ok(Arc::new(semaphore::ZkSemaphore {
            session: self.session.clone(),
            name: name.to_string(),
            dir: self.semaphore_path(name),
            permits,
        }))
    }

    async fn close(&self) -> Result<()> {
        self.session.close().await
    }

    async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        let (dir, markers): (String, &[&str]) = match primitive {
            Primitive::Mutex => (self.mutex_path(name), mutex::MARKERS),
            Primitive::RwLock => (self.rwlock_path(name), rwlock::MARKERS),
            Primitive::Semaphore => (
                format!("{}/leases", self.semaphore_path(name)),
                &[node::LEASE_MARKER],
            ),
            _ => return Err(lockkit_core::Error::unsupported("unknown primitive")),
        };
        let all = queue::participants(&self.session, &dir, markers).await?;
        let mode = |p: &node::Participant| match primitive {
            Primitive::RwLock if p.marker == 0 => HoldMode::Shared,
            Primitive::Semaphore => HoldMode::Permits(1),
            _ => HoldMode::Exclusive,
        };
        let holding = match primitive {
            Primitive::Semaphore => all.len(),
            Primitive::RwLock => rwlock::holder_count(&all),
            _ => all.len().min(1),
        };
        let client = self.session.client()?;
        let mut holders = Vec::with_capacity(holding);
        for p in &all[..holding] {
            let path = format!("{dir}/{}", p.name);
            let mut info = HolderInfo::new(path.clone(), mode(p));
            if let Ok(Some(stat)) = client.check_stat(&path).await {
                info = info.with_token(lockkit_core::FencingToken(
                    u64::try_from(stat.czxid).unwrap_or(0),
                ));
            }
            holders.push(info);
        }
        let waiters = all[holding..]
            .iter()
            .map(|p| WaiterInfo::new(format!("{dir}/{}", p.name), mode(p)))
            .collect();
        Ok(LockInfo::new(holders, waiters))
    }
}
