//! The `mem://` backend: in-process locks with the full semantics of the distributed ones
//! (FIFO fairness, leases on the tokio clock, watchdog renewal, lost signal, fencing tokens, RW
//! locks where a waiting writer blocks new readers, leased semaphore permits).
//!
//! Use it for demos, for your own unit tests (leases follow tokio's clock, so
//! `tokio::time::pause()` works), and as the conformance suite's reference.

mod engine;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{Backend, BackendKind, Capabilities};
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::guard::{GuardParts, Held, HoldRegistry, LockGuard, Permit, ReadGuard, WriteGuard};
use crate::inspect::{LockInfo, Primitive};
use crate::lock::DistLock;
use crate::options::{AcquireOptions, Lease};
use crate::rwlock::ReadWriteLock;
use crate::semaphore::Semaphore;
use engine::{Engine, Grant, Key, Mode, Prim};

/// The in-process backend. Every clone of the [`Locks`](crate::Locks) handle made from one
/// `MemBackend` shares its lock table; two backends share nothing.
#[derive(Debug, Default)]
pub struct MemBackend {
    engine: Arc<Engine>,
}

impl MemBackend {
    /// A fresh, empty lock table.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Backend for MemBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Memory
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::all();
        caps.cross_process = false;
        caps
    }

    fn mutex(&self, name: &str) -> Result<Arc<dyn DistLock>> {
        Ok(Arc::new(MemMutex {
            engine: self.engine.clone(),
            key: (Prim::Mutex, name.to_string()),
            holds: HoldRegistry::new(),
        }))
    }

    fn rwlock(&self, name: &str) -> Result<Arc<dyn ReadWriteLock>> {
        Ok(Arc::new(MemRwLock {
            engine: self.engine.clone(),
            key: (Prim::RwLock, name.to_string()),
        }))
    }

    fn semaphore(&self, name: &str, permits: u32) -> Result<Arc<dyn Semaphore>> {
        Ok(Arc::new(MemSemaphore {
            engine: self.engine.clone(),
            key: (Prim::Semaphore, name.to_string()),
            permits,
        }))
    }

    async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        let prim = match primitive {
            Primitive::Mutex => Prim::Mutex,
            Primitive::RwLock => Prim::RwLock,
            _ => Prim::Semaphore,
        };
        Ok(self.engine.inspect(&(prim, name.to_string())))
    }
}

#[derive(Debug)]
struct MemHeld {
    engine: Arc<Engine>,
    key: Key,
    owner: u64,
    token: FencingToken,
    lease: Lease,
}

#[async_trait]
impl Held for MemHeld {
    async fn release(&self) -> Result<()> {
        self.engine.release(&self.key, self.owner)
    }

    fn release_in_background(&self) {
        // The table lock is never held across an await, so releasing inline cannot block.
        let _ = self.engine.release(&self.key, self.owner);
    }

    async fn extend(&self, lease: Duration) -> Result<()> {
        self.engine.extend(&self.key, self.owner, lease)
    }

    async fn downgrade(&self) -> Result<GuardParts> {
        let state = self.engine.downgrade(&self.key, self.owner)?;
        let held = MemHeld {
            engine: self.engine.clone(),
            key: self.key.clone(),
            ..*self
        };
        // The read ownership keeps the write ownership's token: no writer came in between.
        Ok(GuardParts::new(
            self.key.1.as_str(),
            self.token,
            self.lease,
            state,
            Box::new(held),
        ))
    }
}

fn parts(engine: &Arc<Engine>, key: &Key, grant: Grant) -> GuardParts {
    let held = MemHeld {
        engine: engine.clone(),
        key: key.clone(),
        owner: grant.owner(),
        token: grant.token(),
        lease: grant.lease(),
    };
    let p = GuardParts::new(
        key.1.as_str(),
        grant.token(),
        grant.lease(),
        grant.state(),
        Box::new(held),
    );
    grant.disarm();
    p
}

#[derive(Debug)]
struct MemMutex {
    engine: Arc<Engine>,
    key: Key,
    holds: HoldRegistry,
}

#[async_trait]
impl DistLock for MemMutex {
    fn name(&self) -> &str {
        &self.key.1
    }

    async fn acquire(&self, opts: &AcquireOptions) -> Result<Option<LockGuard>> {
        let Some(grant) = self
            .engine
            .acquire(self.key.clone(), Mode::Exclusive, 1, opts)
            .await?
        else {
            return Ok(None);
        };
        let guard = LockGuard::new(parts(&self.engine, &self.key, grant));
        self.holds.track(&guard);
        Ok(Some(guard))
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(self.engine.is_locked(&self.key))
    }

    async fn hold_count(&self) -> Result<u32> {
        Ok(self.holds.hold_count())
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
impl ReadWriteLock for MemRwLock {
    fn name(&self) -> &str {
        &self.key.1
    }

    async fn read(&self, opts: &AcquireOptions) -> Result<Option<ReadGuard>> {
        let grant = self
            .engine
            .acquire(self.key.clone(), Mode::Shared, 1, opts)
            .await?;
        Ok(grant.map(|g| ReadGuard::new(parts(&self.engine, &self.key, g))))
    }

    async fn write(&self, opts: &AcquireOptions) -> Result<Option<WriteGuard>> {
        let grant = self
            .engine
            .acquire(self.key.clone(), Mode::Exclusive, 1, opts)
            .await?;
        Ok(grant.map(|g| WriteGuard::new(parts(&self.engine, &self.key, g))))
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
    permits: u32,
}

#[async_trait]
impl Semaphore for MemSemaphore {
    fn name(&self) -> &str {
        &self.key.1
    }

    fn permits(&self) -> u32 {
        self.permits
    }

    async fn acquire(&self, n: u32, opts: &AcquireOptions) -> Result<Option<Permit>> {
        crate::check_permits(n, self.permits)?;
        let grant = self
            .engine
            .acquire(self.key.clone(), Mode::Permits(n), self.permits, opts)
            .await?;
        Ok(grant.map(|g| Permit::new(parts(&self.engine, &self.key, g).with_permits(n))))
    }

    async fn available(&self) -> Result<u32> {
        Ok(self.engine.available(&self.key, self.permits))
    }
}
