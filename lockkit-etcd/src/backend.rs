//! The backend object: configuration, the connection pool, the session and the per-name watches.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{GetOptions, SortOrder, SortTarget};
use lockkit_core::spi::{Backend, RawMutex, RawRwLock, RawSemaphore};
use lockkit_core::{
    encode_name, BackendKind, Capabilities, Error, ErrorKind, FencingToken, HoldMode, HolderInfo,
    LockInfo, Primitive, Result, Support, WaiterInfo,
};

use crate::client::Pool;
use crate::mutex::EtcdMutex;
use crate::rwlock::EtcdRwLock;
use crate::semaphore::EtcdSemaphore;
use crate::session::Session;
use crate::watch::{Kind, NameWatch, Need};

/// A name's watch and when it was last asked for.
type WatchEntry = (Arc<NameWatch>, std::time::Instant);

/// How long an unused name's watch is kept.
pub(crate) const WATCH_LINGER: Duration = Duration::from_secs(60);

/// The most session leases (distinct watchdog lease lengths) one handle keeps.
const MAX_SESSIONS: usize = 16;

/// Everything one `Locks` handle shares: the pool, the sessions and the per-name watches.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) pool: Arc<Pool>,
    pub(crate) root: String,
    /// The handle's default lease: its main session's TTL.
    pub(crate) lease: Duration,
    /// One session per watchdog lease length asked for (the default one first).
    sessions: tokio::sync::Mutex<HashMap<Duration, Arc<Session>>>,
    /// Every name's watch, kept for a while after its last use (see `name_watch`).
    names: Mutex<HashMap<Vec<u8>, WatchEntry>>,
    closed: AtomicBool,
}

impl Inner {
    pub(crate) fn new(pool: Pool, root: String, lease: Duration) -> Arc<Inner> {
        Arc::new(Inner {
            pool: Arc::new(pool),
            root,
            lease,
            sessions: tokio::sync::Mutex::new(HashMap::new()),
            names: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        })
    }

    /// The key prefix of a lock (ends with `/`). A mutex uses `<root>/<encoded name>/`, the
    /// prefix Go's `concurrency.NewMutex(session, "<root>/<encoded name>")` uses; RW locks and
    /// semaphores use `<root>/%rw/…` and `<root>/%sem/…`, which no encoded name can equal
    /// (`encode_name` never leaves a `%` without two hex digits).
    pub(crate) fn prefix(&self, kind: Kind, name: &str) -> Vec<u8> {
        let enc = encode_name(name);
        match kind {
            Kind::Mutex => format!("{}/{enc}/", self.root),
            Kind::RwLock => format!("{}/%rw/{enc}/", self.root),
            Kind::Semaphore => format!("{}/%sem/{enc}/", self.root),
        }
        .into_bytes()
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

    /// The live session of TTL `ttl`, granting a new lease when there is none or the last one
    /// was lost. A TTL etcd cannot keep exactly is an `InvalidArgument`.
    pub(crate) async fn session(&self, ttl: Duration) -> Result<Arc<Session>> {
        self.check_open()?;
        let mut sessions = self.sessions.lock().await;
        if let Some(cur) = sessions.get(&ttl) {
            if cur.is_alive() {
                return Ok(cur.clone());
            }
        }
        sessions.retain(|_, s| s.is_alive());
        if sessions.len() >= MAX_SESSIONS {
            return Err(Error::invalid(format!(
                "this handle keeps {MAX_SESSIONS} session leases already (one per watchdog lease \
                 length asked for); set the lease on the handle (LockConfig::lease) instead"
            )));
        }
        let fresh = Session::grant(&self.pool, ttl).await?;
        sessions.insert(ttl, fresh.clone());
        Ok(fresh)
    }

    /// Forgets `dead` (after the server said its lease is gone).
    pub(crate) async fn drop_session(&self, dead: &Arc<Session>) {
        dead.retire("the server does not know the lease");
        self.sessions
            .lock()
            .await
            .retain(|_, s| !Arc::ptr_eq(s, dead));
    }

    /// The watch of `prefix`, created (and awaited until in place) if this client has none.
    ///
    /// A watch lives while a handle, an acquire or a guard of its name uses it, and
    /// [`WATCH_LINGER`] after that, so that code creating a fresh handle for every acquire does
    /// not create a watcher on every acquire either.
    pub(crate) async fn name_watch(&self, prefix: &[u8], kind: Kind) -> Result<Arc<NameWatch>> {
        self.check_open()?;
        let nw = {
            let now = std::time::Instant::now();
            let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
            let nw = match names.get_mut(prefix) {
                Some((nw, used)) => {
                    *used = now;
                    nw.clone()
                }
                None => {
                    let nw = NameWatch::start(self.pool.clone(), prefix.to_vec(), kind);
                    names.insert(prefix.to_vec(), (nw.clone(), now));
                    nw
                }
            };
            names.retain(|_, (nw, used)| {
                let keep = Arc::strong_count(nw) > 1 || now.duration_since(*used) < WATCH_LINGER;
                if !keep {
                    nw.stop();
                }
                keep
            });
            nw
        };
        nw.ready(self.pool.timeout()).await?;
        Ok(nw)
    }

    /// Stops everything: the watches end, every session lease is revoked.
    pub(crate) async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        self.stop_watches();
        let sessions: Vec<Arc<Session>> =
            self.sessions.lock().await.drain().map(|(_, s)| s).collect();
        let mut first_error = None;
        for s in sessions {
            if let Err(e) = s.revoke(&self.pool).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn stop_watches(&self) {
        let names = std::mem::take(&mut *self.names.lock().unwrap_or_else(|e| e.into_inner()));
        for (nw, _) in names.values() {
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
        } else if let Ok(mut sessions) = inner.sessions.try_lock() {
            for (_, s) in sessions.drain() {
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
        // Keys are served in create-revision order: fair always.
        Capabilities::new(Support::all())
            .with_rwlock(Support::all().remaining_lease(false))
            .with_semaphore(Support::all().remaining_lease(false))
    }

    fn default_lease(&self) -> Duration {
        self.inner.lease
    }

    fn mutex(&self, name: &str) -> Result<Box<dyn RawMutex>> {
        Ok(Box::new(EtcdMutex::new(self.inner.clone(), name)))
    }

    fn rwlock(&self, name: &str) -> Result<Box<dyn RawRwLock>> {
        Ok(Box::new(EtcdRwLock::new(self.inner.clone(), name)))
    }

    fn semaphore(&self, name: &str, permits: u32) -> Result<Box<dyn RawSemaphore>> {
        Ok(Box::new(EtcdSemaphore::new(
            self.inner.clone(),
            name,
            permits,
        )))
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }

    async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        let kind = match primitive {
            Primitive::Mutex => Kind::Mutex,
            Primitive::RwLock => Kind::RwLock,
            Primitive::Semaphore => Kind::Semaphore,
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
            let e = kind.entry(kv.value());
            let owner = String::from_utf8_lossy(kv.key()).into_owned();
            let (need, mode) = match kind {
                Kind::Semaphore => (
                    Need::Permits {
                        n: e.weight,
                        total: u32::MAX,
                    },
                    HoldMode::Permits(e.weight),
                ),
                _ if e.exclusive => (Need::Exclusive, HoldMode::Exclusive),
                _ => (Need::Shared, HoldMode::Shared),
            };
            // A semaphore's total lives with its handles, not on the server, so every permit
            // key is listed as a holder; mutexes and RW locks list their waiters.
            let holds = kind == Kind::Semaphore || need.holds(before.iter());
            if holds && waiters.is_empty() {
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
