//! The `mem://` backend: in-process locks with the full semantics of the distributed ones
//! (FIFO fairness, fixed leases on the tokio clock, lost signal, fencing tokens, RW locks where
//! a waiting writer blocks new readers, semaphore permits). A watchdog lease needs no renewal
//! here: the holder and the table live and die in one process; a fixed lease ends at its
//! deadline (the core releases it then).
//!
//! Use it for demos, for your own unit tests (leases follow tokio's clock, so
//! `tokio::time::pause()` works), and as the conformance suite's reference.
//!
//! `connect("mem://")` gives every caller in the process the same table, so the parts of an
//! application that connect separately exclude each other exactly as they would through a
//! server; `mem://NAME` names a separate table (a test that wants its own, say).

mod engine;
mod held;
mod queue;

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend_info::{BackendInfo, SchemeInfo};
use crate::capabilities::{Capabilities, Support};
use crate::config::LockConfig;
use crate::error::{Error, Result};
use crate::inspect::{LockEntry, LockInfo, Primitive};
use crate::kind::BackendKind;
use crate::leader::{Leader, LeaderChanges};
use crate::locks::Locks;
use crate::options::DEFAULT_LEASE;
use crate::settings::{NoKey, Settings};
use crate::spi::{
    Backend, GuardParts, RawElection, RawMutex, RawRwLock, RawSemaphore, Reaper, Request,
};
use engine::{Engine, Key, Mode, Prim};
use queue::MemQueue;

/// Every named table of this process (`mem://` is the one named ""). A table lives as long as
/// the process, so its fencing tokens keep increasing even when no handle is left for a while.
fn tables() -> &'static StdMutex<HashMap<String, Arc<Engine>>> {
    static TABLES: OnceLock<StdMutex<HashMap<String, Arc<Engine>>>> = OnceLock::new();
    TABLES.get_or_init(Default::default)
}

fn table(name: &str) -> Arc<Engine> {
    tables()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(name.to_string())
        .or_default()
        .clone()
}

impl Locks {
    /// The process-wide in-memory lock table, the same one `connect("mem://")` gives, with the
    /// default lease.
    pub fn memory() -> Self {
        Locks::new(MemBackend::on(table(""), DEFAULT_LEASE, None))
    }
}

/// The in-process backend's descriptor: `mem://`, always compiled in.
pub static INFO: BackendInfo = BackendInfo {
    kind: BackendKind::MEMORY,
    schemes: &[SchemeInfo {
        name: "mem",
        aliases: &["memory"],
        default_port: None,
        tls: false,
    }],
    feature: None,
    connect: |cfg| Box::pin(connect(cfg)),
};

/// Connects to the in-process table named by `cfg`'s URL: `mem://` is the process's one shared
/// table, `mem://NAME` a separate one. Every `connect` to the same URL shares its table, so
/// parts of an application that connect separately exclude each other, as they would through a
/// server. Options: `prefix` (names are kept apart from other prefixes in the same table) and
/// `lease` (the default lease); `connect_timeout` and `command_timeout` are accepted and have
/// nothing to bound.
pub async fn connect(cfg: &LockConfig) -> Result<Locks> {
    let settings = Settings::<NoKey>::parse(cfg, &INFO)?;
    settings.refuse_credentials("mem")?;
    let url = settings.url();
    let name = match (url.hosts.as_slice(), url.path.as_str()) {
        ([], path) => path.to_string(),
        ([h], "") => h.host.clone(),
        _ => {
            return Err(Error::config(
                "a mem:// URL names at most one table: mem:// or mem://NAME",
            ))
        }
    };
    let prefix = settings.explicit_prefix().map(str::to_string);
    Ok(Locks::new(MemBackend::on(
        table(&name),
        settings.lease(),
        prefix,
    )))
}

/// The in-process backend over one lock table.
#[derive(Debug)]
pub struct MemBackend {
    engine: Arc<Engine>,
    lease: Duration,
    prefix: Option<String>,
    reaper: Reaper,
    /// This handle among the table's handles: its election observers end when it is closed.
    id: u64,
}

impl MemBackend {
    fn on(engine: Arc<Engine>, lease: Duration, prefix: Option<String>) -> Self {
        static HANDLES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        MemBackend {
            engine,
            lease,
            prefix,
            reaper: Reaper::default(),
            id: HANDLES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    fn key(&self, prim: Prim, name: &str) -> Key {
        (prim, self.prefix.clone(), name.to_string())
    }
}

#[async_trait]
impl Backend for MemBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::MEMORY
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Support::all())
            .with_rwlock(Support::all().remaining_lease(false))
            .with_semaphore(Support::all().remaining_lease(false))
            .with_election(Support::all().remaining_lease(false))
            .cross_process(false)
            .list(true)
            .semaphore_size(true)
    }

    fn default_lease(&self) -> Duration {
        self.lease
    }

    fn reaper(&self) -> Reaper {
        self.reaper.clone()
    }

    fn mutex(&self, name: &str) -> Result<Box<dyn RawMutex>> {
        Ok(Box::new(MemMutex {
            engine: self.engine.clone(),
            key: self.key(Prim::Mutex, name),
        }))
    }

    fn rwlock(&self, name: &str) -> Result<Box<dyn RawRwLock>> {
        Ok(Box::new(MemRwLock {
            engine: self.engine.clone(),
            key: self.key(Prim::RwLock, name),
        }))
    }

    fn semaphore(&self, name: &str, permits: Option<u32>) -> Result<Box<dyn RawSemaphore>> {
        Ok(Box::new(MemSemaphore {
            engine: self.engine.clone(),
            key: self.key(Prim::Semaphore, name),
            permits,
        }))
    }

    fn election(&self, name: &str) -> Result<Box<dyn RawElection>> {
        Ok(Box::new(MemElection {
            engine: self.engine.clone(),
            key: self.key(Prim::Election, name),
            handle: self.id,
        }))
    }

    /// Ends this handle's election observers; the table itself lives on.
    async fn close(&self) -> Result<()> {
        self.engine.forget_observers(self.id);
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockEntry>> {
        Ok(self
            .engine
            .active()
            .into_iter()
            .filter(|(_, p, _)| *p == self.prefix)
            .filter_map(|(prim, _, name)| {
                let primitive = match prim {
                    Prim::Mutex => Primitive::Mutex,
                    Prim::RwLock => Primitive::RwLock,
                    Prim::Semaphore => Primitive::Semaphore,
                    Prim::Election => Primitive::Election,
                };
                name.starts_with(prefix)
                    .then(|| LockEntry::new(name, primitive))
            })
            .collect())
    }

    async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        let prim = match primitive {
            Primitive::Mutex => Prim::Mutex,
            Primitive::RwLock => Prim::RwLock,
            Primitive::Semaphore => Prim::Semaphore,
            Primitive::Election => Prim::Election,
        };
        Ok(self.engine.inspect(&self.key(prim, name)))
    }
}

#[derive(Debug)]
struct MemMutex {
    engine: Arc<Engine>,
    key: Key,
}

#[async_trait]
impl RawMutex for MemMutex {
    async fn acquire(&self, req: &Request) -> Result<Option<GuardParts>> {
        MemQueue::new(&self.engine, &self.key, Mode::Exclusive, None, &[])
            .acquire(req)
            .await
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(self.engine.is_locked(&self.key))
    }

    async fn force_unlock(&self) -> Result<bool> {
        Ok(self.engine.force_unlock(&self.key))
    }

    async fn remaining_lease(&self) -> Result<Option<Duration>> {
        Ok(self.engine.remaining_lease(&self.key))
    }
}

#[derive(Debug)]
struct MemRwLock {
    engine: Arc<Engine>,
    key: Key,
}

#[async_trait]
impl RawRwLock for MemRwLock {
    async fn read(&self, req: &Request) -> Result<Option<GuardParts>> {
        MemQueue::new(&self.engine, &self.key, Mode::Shared, None, &[])
            .acquire(req)
            .await
    }

    async fn write(&self, req: &Request) -> Result<Option<GuardParts>> {
        MemQueue::new(&self.engine, &self.key, Mode::Exclusive, None, &[])
            .acquire(req)
            .await
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(self.engine.is_locked(&self.key))
    }

    async fn force_unlock(&self) -> Result<bool> {
        Ok(self.engine.force_unlock(&self.key))
    }
}

#[derive(Debug)]
struct MemSemaphore {
    engine: Arc<Engine>,
    key: Key,
    /// The size asked for (`None`: the stored one).
    permits: Option<u32>,
}

#[async_trait]
impl RawSemaphore for MemSemaphore {
    async fn acquire(&self, n: u32, req: &Request) -> Result<Option<GuardParts>> {
        MemQueue::new(&self.engine, &self.key, Mode::Permits(n), self.permits, &[])
            .acquire(req)
            .await
    }

    async fn available(&self) -> Result<u32> {
        self.engine.available(&self.key, self.permits)
    }

    async fn size(&self) -> Result<Option<u32>> {
        Ok(self.engine.size(&self.key))
    }

    async fn set_size(&self, permits: u32) -> Result<Option<u32>> {
        Ok(self.engine.set_size(&self.key, permits))
    }
}

/// An election: candidates queue as exclusive waiters, and the holder leads.
#[derive(Debug)]
struct MemElection {
    engine: Arc<Engine>,
    key: Key,
    handle: u64,
}

#[async_trait]
impl RawElection for MemElection {
    async fn campaign(&self, value: &[u8], req: &Request) -> Result<Option<GuardParts>> {
        MemQueue::new(&self.engine, &self.key, Mode::Exclusive, None, value)
            .acquire(req)
            .await
    }

    async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.engine.leader(&self.key))
    }

    async fn observe(&self) -> Result<LeaderChanges> {
        Ok(self.engine.observe(&self.key, self.handle))
    }

    async fn force_resign(&self) -> Result<bool> {
        Ok(self.engine.force_unlock(&self.key))
    }
}
