//! The backend object: configuration, the connection pool, the session and the per-name watches.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{GetOptions, SortOrder, SortTarget};
use lockkit_core::{
    encode_name, Backend, BackendKind, Capabilities, DistLock, Error, ErrorKind, FencingToken,
    HoldMode, HolderInfo, LockInfo, Primitive, Result, WaiterInfo,
};

use crate::client::Pool;
use crate::mutex::EtcdMutex;
use crate::session::Session;
use crate::watch::NameWatch;

/// The default session lease TTL.
pub(crate) const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(10);

/// Everything one `Locks` handle shares: the pool, the session and the per-name watches.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) pool: Arc<Pool>,
    pub(crate) root: String,
    pub(crate) session_ttl: Duration,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    names: Mutex<HashMap<Vec<u8>, Weak<NameWatch>>>,
    closed: AtomicBool,
}

impl Inner {
    pub(crate) fn new(pool: Pool, root: String, session_ttl: Duration) -> Arc<Inner> {
        Arc::new(Inner {
            pool: Arc::new(pool),
            root,
            session_ttl,
            session: tokio::sync::Mutex::new(None),
            names: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        })
    }

    /// The key prefix of a mutex (ends with `/`): `<root>/<encoded name>/`, the prefix Go's
    /// `concurrency.NewMutex(session, "<root>/<encoded name>")` uses.
    pub(crate) fn mutex_prefix(&self, name: &str) -> Vec<u8> {
        format!("{}/{}/", self.root, encode_name(name)).into_bytes()
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::new(
                ErrorKind::Closed,
                "this etcd Locks handle was closed",
            ))
        } else {
            Ok(())
        }
    }

    /// The live session, granting a new lease when there is none or the last one was lost.
    pub(crate) async fn session(&self) -> Result<Arc<Session>> {
        self.check_open()?;
        let mut s = self.session.lock().await;
        if let Some(cur) = s.as_ref() {
            if cur.is_alive() {
                return Ok(cur.clone());
            }
        }
        let fresh = Session::grant(&self.pool, self.session_ttl).await?;
        *s = Some(fresh.clone());
        Ok(fresh)
    }

    /// Forgets `session` if it is the current one (after the server said its lease is gone).
    pub(crate) async fn drop_session(&self, dead: &Arc<Session>) {
        dead.retire("the server does not know the lease");
        let mut s = self.session.lock().await;
        if s.as_ref().is_some_and(|cur| Arc::ptr_eq(cur, dead)) {
            *s = None;
        }
    }

    /// The watch of `prefix`, created (and awaited until in place) if this client has none.
    pub(crate) async fn name_watch(&self, prefix: &[u8]) -> Result<Arc<NameWatch>> {
        self.check_open()?;
        let nw = {
            let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
            match names.get(prefix).and_then(Weak::upgrade) {
                Some(nw) => nw,
                None => {
                    names.retain(|_, w| w.strong_count() > 0);
                    let nw = NameWatch::start(self.pool.clone(), prefix.to_vec());
                    names.insert(prefix.to_vec(), Arc::downgrade(&nw));
                    nw
                }
            }
        };
        nw.ready(self.pool.timeout()).await?;
        Ok(nw)
    }

    /// Stops everything: every guard turns Lost, the session lease is revoked.
    pub(crate) async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        self.stop_watches();
        let s = self.session.lock().await.take();
        match s {
            Some(s) => s.revoke(&self.pool).await,
            None => Ok(()),
        }
    }

    fn stop_watches(&self) {
        let names = std::mem::take(&mut *self.names.lock().unwrap_or_else(|e| e.into_inner()));
        for nw in names.values().filter_map(Weak::upgrade) {
            nw.stop();
        }
    }

    /// The keys on `prefix`, oldest first.
    pub(crate) async fn keys_by_create(
        &self,
        prefix: &[u8],
        limit: i64,
    ) -> Result<Vec<etcd_client::KeyValue>> {
        let p = prefix.to_vec();
        let mut resp = self
            .pool
            .run("range", true, move |mut c| {
                let p = p.clone();
                async move {
                    c.get(
                        p,
                        Some(
                            GetOptions::new()
                                .with_prefix()
                                .with_sort(SortTarget::Create, SortOrder::Ascend)
                                .with_limit(limit),
                        ),
                    )
                    .await
                }
            })
            .await?;
        Ok(resp.take_kvs())
    }
}

/// The etcd backend behind a [`Locks`](lockkit_core::Locks) handle.
#[derive(Debug)]
pub(crate) struct EtcdBackend {
    pub(crate) inner: Arc<Inner>,
}

impl Drop for EtcdBackend {
    fn drop(&mut self) {
        // The last Locks clone is gone: stop the background work and give the lease back.
        let inner = self.inner.clone();
        inner.closed.store(true, Ordering::Release);
        inner.stop_watches();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = inner.close().await;
            });
        } else if let Ok(mut s) = inner.session.try_lock() {
            if let Some(s) = s.take() {
                s.retire("the Locks handle was dropped");
            }
        }
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Etcd
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::mutex_only();
        caps.fair = true;
        caps.fixed_lease = true;
        caps.cross_process = true;
        caps
    }

    fn mutex(&self, name: &str) -> Result<Arc<dyn DistLock>> {
        Ok(Arc::new(EtcdMutex::new(self.inner.clone(), name)))
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }

    async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        if primitive != Primitive::Mutex {
            return Err(Error::unsupported(
                "the etcd backend has only mutexes so far",
            ));
        }
        let kvs = self
            .inner
            .keys_by_create(&self.inner.mutex_prefix(name), 0)
            .await?;
        let mut holders = Vec::new();
        let mut waiters = Vec::new();
        for (i, kv) in kvs.iter().enumerate() {
            let owner = String::from_utf8_lossy(kv.key()).into_owned();
            if i == 0 {
                holders.push(
                    HolderInfo::new(owner, HoldMode::Exclusive)
                        .with_token(FencingToken(kv.create_revision() as u64)),
                );
            } else {
                waiters.push(WaiterInfo::new(owner, HoldMode::Exclusive));
            }
        }
        Ok(LockInfo::new(holders, waiters))
    }
}
