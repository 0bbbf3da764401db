#![doc = include_str!("../README.md")]

mod config;
mod error;
mod held;
mod mutex;
pub mod node;
mod ops;
mod queue;
mod rwlock;
mod semaphore;
mod session;
mod sessions;
mod tls;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::spi::{Backend, RawMutex, RawRwLock, RawSemaphore, Reaper};
use lockkit_core::{
    encode_name, BackendInfo, BackendKind, Capabilities, HoldMode, HolderInfo, LockConfig,
    LockEntry, LockInfo, Locks, Primitive, Result, SchemeInfo, Support, WaiterInfo,
};

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
    let ours =
        queue::find_protected(client, dir, prefix, std::time::Duration::from_secs(5)).await?;
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
        locks: Locks::new(ZkBackend {
            sessions: sessions.clone(),
        }),
        sessions,
    })
}

/// The ZooKeeper backend behind a [`Locks`] handle. Its sessions close when the last handle,
/// lock and guard made from it is dropped.
#[derive(Debug)]
pub struct ZkBackend {
    sessions: Arc<Sessions>,
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
        dir(&self.sessions, kind, name)
    }
}

fn dir(sessions: &Sessions, kind: &str, name: &str) -> String {
    format!("{}/{}", kind_root(sessions, kind), encode_name(name))
}

/// The directory holding every lock directory of one primitive (`mutex`, `rwlock`, `semaphore`).
fn kind_root(sessions: &Sessions, kind: &str) -> String {
    format!("{}/{kind}", sessions.default().cfg.root)
}

impl ZkBackend {
    fn dir(&self, kind: &str, name: &str) -> String {
        dir(&self.sessions, kind, name)
    }

    fn mutex_path(&self, name: &str) -> String {
        self.dir("mutex", name)
    }

    fn rwlock_path(&self, name: &str) -> String {
        self.dir("rwlock", name)
    }

    fn semaphore_path(&self, name: &str) -> String {
        self.dir("semaphore", name)
    }
}

#[async_trait]
impl Backend for ZkBackend {
    fn kind(&self) -> BackendKind {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        // Ephemeral nodes live as long as their session: no fixed leases, and no remaining
        // lease to tell. Nodes are served in sequence order: fair always.
        let support = Support::all().fixed_lease(false).remaining_lease(false);
        Capabilities::new(support)
            .with_rwlock(support)
            .with_semaphore(support)
            .list(true)
    }

    fn default_lease(&self) -> Duration {
        self.sessions.default().cfg.session_timeout
    }

    fn reaper(&self) -> Reaper {
        self.sessions.reaper()
    }

    fn mutex(&self, name: &str) -> Result<Box<dyn RawMutex>> {
        Ok(Box::new(mutex::ZkMutex {
            sessions: self.sessions.clone(),
            name: name.to_string(),
            dir: self.mutex_path(name),
        }))
    }

    fn rwlock(&self, name: &str) -> Result<Box<dyn RawRwLock>> {
        Ok(Box::new(rwlock::ZkRwLock {
            sessions: self.sessions.clone(),
            name: name.to_string(),
            dir: self.rwlock_path(name),
        }))
    }

    fn semaphore(&self, name: &str, permits: u32) -> Result<Box<dyn RawSemaphore>> {
        Ok(Box::new(semaphore::ZkSemaphore {
            sessions: self.sessions.clone(),
            name: name.to_string(),
            dir: self.semaphore_path(name),
            permits,
        }))
    }

    async fn close(&self) -> Result<()> {
        self.sessions.close().await
    }

    /// The lock directories under each primitive's root whose name starts with `prefix` and
    /// that have a child (a holder or waiter; a semaphore's in `leases` or `locks`). Directories
    /// stay after their last node goes (they are containers ZooKeeper removes later), so each
    /// one is looked into.
    async fn list(&self, prefix: &str) -> Result<Vec<LockEntry>> {
        let session = self.sessions.default();
        let client = session.client()?;
        let limit = session.cfg.command_timeout;
        let mut found = Vec::new();
        for (kind, primitive, inside) in [
            ("mutex", Primitive::Mutex, &[""][..]),
            ("rwlock", Primitive::RwLock, &[""][..]),
            (
                "semaphore",
                Primitive::Semaphore,
                &["/leases", "/locks"][..],
            ),
        ] {
            let root = kind_root(&self.sessions, kind);
            for child in ops::list_or_empty(&client, &root, limit).await? {
                let Some(name) = lockkit_core::decode_name(&child) else {
                    continue;
                };
                if !name.starts_with(prefix) {
                    continue;
                }
                for sub in inside {
                    let dir = format!("{root}/{child}{sub}");
                    if !ops::list_or_empty(&client, &dir, limit).await?.is_empty() {
                        found.push(LockEntry::new(name, primitive));
                        break;
                    }
                }
            }
        }
        Ok(found)
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
        let session = self.sessions.default();
        let all = queue::participants(session, &dir, markers).await?;
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
        let client = session.client()?;
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
