//! The ZooKeeper [`Backend`]: handles for each primitive, close, and the operator views (list
//! and inspect) over the lock directories.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::spi::{
    Backend, GuardParts, RawElection, RawMutex, RawRwLock, RawSemaphore, Reaper, Request, Taken,
};
use lockkit_core::{
    encode_name, BackendKind, Capabilities, HoldMode, HolderInfo, LockEntry, LockInfo, Primitive,
    Result, Support, WaiterInfo,
};

use crate::config::KIND;
use crate::ops::within;
use crate::sessions::Sessions;
use crate::{election, multi, mutex, node, ops, queue, rwlock, semaphore};

/// The ZooKeeper backend behind a [`Locks`](lockkit_core::Locks) handle. Its sessions close when the last handle,
/// lock and guard made from it is dropped.
#[derive(Debug)]
pub struct ZkBackend {
    sessions: Arc<Sessions>,
    /// Whether this handle's last one-step multi-lock take found its set busy (see `multi.rs`).
    contended: std::sync::atomic::AtomicBool,
}

impl ZkBackend {
    pub(crate) fn new(sessions: Arc<Sessions>) -> Self {
        ZkBackend {
            sessions,
            contended: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

pub(crate) fn dir(sessions: &Sessions, kind: &str, name: &str) -> String {
    format!("{}/{}", kind_root(sessions, kind), encode_name(name))
}

/// The directory holding every lock directory of one primitive (`mutex`, `rwlock`, `semaphore`,
/// `election`).
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
            .with_election(support)
            .list(true)
            .semaphore_size(true)
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

    /// Mutexes by one `multi` of creates, held where each node is first (see `multi.rs`).
    async fn take_all(
        &self,
        members: &[lockkit_core::Member<'_>],
        req: &Request,
    ) -> Result<Taken<Vec<GuardParts>>> {
        let dir = |n: &str| self.mutex_path(n);
        multi::take_all(&self.sessions, members, req, dir, &self.contended).await
    }

    fn rwlock(&self, name: &str) -> Result<Box<dyn RawRwLock>> {
        Ok(Box::new(rwlock::ZkRwLock {
            sessions: self.sessions.clone(),
            name: name.to_string(),
            dir: self.rwlock_path(name),
        }))
    }

    fn semaphore(&self, name: &str, permits: Option<u32>) -> Result<Box<dyn RawSemaphore>> {
        Ok(Box::new(semaphore::ZkSemaphore {
            sessions: self.sessions.clone(),
            name: name.to_string(),
            dir: self.semaphore_path(name),
            permits,
        }))
    }

    fn election(&self, name: &str) -> Result<Box<dyn RawElection>> {
        let marker = self.sessions.default().cfg.election_layout.marker();
        Ok(Box::new(election::ZkElection::new(
            self.sessions.clone(),
            name,
            self.dir("election", name),
            marker,
        )))
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
            ("election", Primitive::Election, &[""][..]),
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
            Primitive::Election => (
                self.dir("election", name),
                election::markers(self.sessions.default().cfg.election_layout.marker()),
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
            let until = tokio::time::Instant::now() + session.cfg.command_timeout;
            if let Ok(Some(stat)) = within(until, client.check_stat(&path)).await {
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
