//! The backend object behind a `Locks` handle on etcd.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::spi::{
    Backend, GuardParts, RawElection, RawMutex, RawRwLock, RawSemaphore, Reaper, Request, Taken,
};
use lockkit_core::{
    BackendKind, Capabilities, Error, FencingToken, HoldMode, HolderInfo, LockEntry, LockInfo,
    Primitive, Result, Support, WaiterInfo,
};

use crate::election::EtcdElection;
use crate::inner::Inner;
use crate::mutex::EtcdMutex;
use crate::rwlock::EtcdRwLock;
use crate::sem_size::is_size_key;
use crate::semaphore::EtcdSemaphore;
use crate::watch::{Kind, Need};

/// The etcd backend behind a [`Locks`](lockkit_core::Locks) handle.
#[derive(Debug)]
pub(crate) struct EtcdBackend {
    pub(crate) inner: Arc<Inner>,
}

impl Drop for EtcdBackend {
    fn drop(&mut self) {
        // The last handle and guard are gone: stop the background work, give the leases back.
        self.inner.clone().shut_down();
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    fn kind(&self) -> BackendKind {
        crate::config::KIND
    }

    fn capabilities(&self) -> Capabilities {
        // Keys are served in create-revision order: fair always.
        Capabilities::new(Support::all())
            .with_rwlock(Support::all().remaining_lease(false))
            .with_semaphore(Support::all().remaining_lease(false))
            .with_election(Support::all().remaining_lease(false))
            .list(true)
            .semaphore_size(true)
    }

    fn default_lease(&self) -> Duration {
        self.inner.lease
    }

    fn reaper(&self) -> Reaper {
        self.inner.reaper.clone()
    }

    fn mutex(&self, name: &str) -> Result<Box<dyn RawMutex>> {
        Ok(Box::new(EtcdMutex::new(self.inner.clone(), name)))
    }

    /// Mutexes whose queues are all empty, in one transaction (see `multi.rs`).
    async fn take_all(
        &self,
        members: &[lockkit_core::Member<'_>],
        req: &Request,
    ) -> Result<Taken<Vec<GuardParts>>> {
        crate::multi::take_all(&self.inner, members, req).await
    }

    fn rwlock(&self, name: &str) -> Result<Box<dyn RawRwLock>> {
        Ok(Box::new(EtcdRwLock::new(self.inner.clone(), name)))
    }

    fn semaphore(&self, name: &str, permits: Option<u32>) -> Result<Box<dyn RawSemaphore>> {
        Ok(Box::new(EtcdSemaphore::new(
            self.inner.clone(),
            name,
            permits,
        )))
    }

    fn election(&self, name: &str) -> Result<Box<dyn RawElection>> {
        Ok(Box::new(EtcdElection::new(self.inner.clone(), name)))
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockEntry>> {
        // The encoding works byte by byte, except that the whole names "." and ".." are escaped
        // (`%2E`, `%2E%2E`): those two prefixes are looked for both ways.
        let mut ranges = vec![lockkit_core::encode_name(prefix)];
        if prefix == "." || prefix == ".." {
            ranges.push(prefix.to_string());
        }
        let mut found = Vec::new();
        for (kind, primitive) in [
            (Kind::Mutex, Primitive::Mutex),
            (Kind::RwLock, Primitive::RwLock),
            (Kind::Semaphore, Primitive::Semaphore),
            (Kind::Election, Primitive::Election),
        ] {
            for encoded in &ranges {
                for name in self.inner.names(kind, encoded).await? {
                    found.push(LockEntry::new(name, primitive));
                }
            }
        }
        Ok(found)
    }

    async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        let kind = match primitive {
            Primitive::Mutex => Kind::Mutex,
            Primitive::RwLock => Kind::RwLock,
            Primitive::Semaphore => Kind::Semaphore,
            Primitive::Election => Kind::Election,
            other => return Err(Error::unsupported(format!("cannot inspect a {other:?}"))),
        };
        let kvs = self
            .inner
            .keys_by_create(&self.inner.prefix(kind, name), 0)
            .await?;
        let mut holders = Vec::new();
        let mut waiters = Vec::new();
        let mut before = Vec::new();
        for kv in &kvs {
            if kind == Kind::Semaphore && is_size_key(kv.key()) {
                continue;
            }
            let e = kind.entry(kv.value());
            let owner = String::from_utf8_lossy(kv.key()).into_owned();
            let (need, mode) = match kind {
                Kind::Semaphore => (Need::Shared, HoldMode::Permits(e.weight)),
                _ if e.exclusive => (Need::Exclusive, HoldMode::Exclusive),
                _ => (Need::Shared, HoldMode::Shared),
            };
            // A semaphore's holders are marked as holding, wherever they rank.
            let holds = match kind {
                Kind::Semaphore => e.held,
                _ => need.holds(before.iter(), 0, None) && waiters.is_empty(),
            };
            if holds {
                holders.push(
                    HolderInfo::new(owner, mode)
                        .with_token(FencingToken(kv.create_revision() as u64)),
                );
            } else {
                waiters.push(WaiterInfo::new(owner, mode));
            }
            before.push(e);
        }
        Ok(LockInfo::new(holders, waiters))
    }
}
