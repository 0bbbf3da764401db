#![doc = include_str!("../README.md")]

mod backend;
mod config;
mod election;
mod error;
mod held;
mod late;
mod multi;
mod mutex;
pub mod node;
mod ops;
mod owned;
mod queue;
mod rwlock;
mod sem_size;
mod semaphore;
mod session;
mod sessions;
mod tls;

use std::sync::Arc;

use lockkit_core::{BackendInfo, LockConfig, Locks, Result, SchemeInfo};

pub use crate::backend::ZkBackend;
use crate::config::ZkConfig;
pub use crate::config::{ZkKey, KIND};
use crate::sessions::Sessions;

pub use crate::queue::find_by_prefix;

/// The ZooKeeper client crate this backend is built on, for tests and benchmarks that need raw
/// access at the same version.
#[doc(hidden)]
pub use zookeeper_client;

/// Finds the node `client`'s session created in `dir` with the protected prefix `prefix`
/// (`_c_<uuid>-<marker>`), as an acquire does after a connection loss interrupted its create
/// (after a `sync`; the one first in queue order if there are several). A node with the prefix
/// that another session owns is not ours (its `ephemeralOwner` differs) and gives `None`:
/// Curator's prefix-only lookup would claim it.
pub async fn find_own_node(
    client: &zookeeper_client::Client,
    dir: &str,
    prefix: &str,
) -> Result<Option<String>> {
    let ours = ops::find_protected(client, dir, prefix, std::time::Duration::from_secs(5)).await?;
    Ok(ours.into_iter().next())
}

/// The ZooKeeper backend's descriptor: `zk://` (or `zookeeper://`), port 2181 by default.
pub static INFO: BackendInfo = BackendInfo {
    kind: KIND,
    schemes: &[SchemeInfo {
        name: "zk",
        aliases: &["zookeeper"],
        default_port: Some(2181),
        tls: false,
    }],
    feature: Some("zk"),
    connect: |cfg| Box::pin(connect(cfg)),
};

/// Connects to ZooKeeper as described by `cfg` and returns a [`Locks`] handle. The handle owns
/// one ZooKeeper session whose timeout is its default lease (`lease`, or `session_timeout`, its
/// ZooKeeper name; 30 s unless set), shared by all its locks; an acquire that asks for another
/// watchdog lease gets a session of that timeout, opened on first use. A timeout the server
/// negotiates to another value is refused (`Config` here, `InvalidArgument` for an acquire), so
/// a lock's lease is always the one asked for.
///
/// # Cancel safety
/// Dropping the future before it finishes leaves no session behind.
pub async fn connect(cfg: &LockConfig) -> Result<Locks> {
    Ok(connect_zk(cfg).await?.into_locks())
}

/// Like [`connect`], but returns a [`ZkLocks`], which also offers ZooKeeper-specific methods
/// ([`ZkLocks::mutex_path`] for Curator interop, [`ZkLocks::wake_count`]).
pub async fn connect_zk(cfg: &LockConfig) -> Result<ZkLocks> {
    let zk_cfg = ZkConfig::from_lock_config(cfg, &INFO)?;
    let sessions = Sessions::open(zk_cfg).await?;
    Ok(ZkLocks {
        locks: Locks::new(ZkBackend::new(sessions.clone())),
        sessions,
    })
}

/// A [`Locks`] handle on ZooKeeper with ZooKeeper-specific extensions. It dereferences to
/// [`Locks`]; clones share its sessions.
#[derive(Debug, Clone)]
pub struct ZkLocks {
    locks: Locks,
    sessions: Arc<Sessions>,
}

impl std::ops::Deref for ZkLocks {
    type Target = Locks;
    fn deref(&self) -> &Locks {
        &self.locks
    }
}

impl From<ZkLocks> for Locks {
    fn from(z: ZkLocks) -> Locks {
        z.locks
    }
}

impl ZkLocks {
    /// The plain [`Locks`] handle.
    pub fn into_locks(self) -> Locks {
        self.locks
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

    /// The absolute path of the election `name`, for Curator's `LeaderLatch` (participant id:
    /// the candidate's value).
    pub fn election_path(&self, name: &str) -> String {
        self.dir("election", name)
    }

    /// The absolute path of the semaphore `name` (Curator's `InterProcessSemaphoreV2` layout).
    pub fn semaphore_path(&self, name: &str) -> String {
        self.dir("semaphore", name)
    }

    /// How many watch events waiters of this session have received so far (each one is a
    /// wake-up). With each waiter watching only its predecessor, one release wakes one waiter.
    pub fn wake_count(&self) -> u64 {
        self.sessions.default().wakes()
    }

    /// How many creates were interrupted by a connection loss and looked up again by their
    /// protected prefix.
    pub fn protected_lookups(&self) -> u64 {
        self.sessions.default().lookups()
    }

    /// The current ZooKeeper client of the default session, for tests and tools that need raw
    /// access (inspecting nodes, expiring the session).
    #[doc(hidden)]
    pub fn zk_client(&self) -> Result<zookeeper_client::Client> {
        self.sessions.default().client()
    }

    fn dir(&self, kind: &str, name: &str) -> String {
        backend::dir(&self.sessions, kind, name)
    }
}
