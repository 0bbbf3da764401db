//! The backend object: connections, scripts, background tasks.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::{Backend, RawMutex, RawRwLock, RawSemaphore};
use lockkit_core::{
    async_trait, BackendKind, Capabilities, Error, HoldMode, HolderInfo, LockInfo, Primitive,
    Result, Support, WaiterInfo,
};
use redis::{FromRedisValue, Script, ScriptInvocation};
use tokio::task::JoinHandle;

use crate::config::Settings;
use crate::conn::Conn;
use crate::error;
use crate::keys::LockKeys;
use crate::mutex::RedisMutex;
use crate::pubsub::Subscriptions;
use crate::script_set::Scripts;
use crate::watchdog::{self, Watchdog};

/// Release retries after a lost reply (the unlock latch makes them safe).
const RELEASE_RETRIES: u32 = 3;

/// What every handle and guard of one client shares.
pub(crate) struct Inner {
    pub(crate) conn: Conn,
    pub(crate) settings: Settings,
    client_id: String,
    next_owner: AtomicU64,
    pub(crate) scripts: Arc<Scripts>,
    pub(crate) subs: Arc<Subscriptions>,
    pub(crate) watchdog: Arc<Watchdog>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClient")
            .field("client_id", &self.client_id)
            .field("settings", &self.settings)
            .finish()
    }
}

impl Inner {
    /// A fresh owner field `<client-uuid>:<n>` for one acquisition.
    pub(crate) fn new_owner(&self) -> String {
        let n = self.next_owner.fetch_add(1, Ordering::Relaxed);
        format!("{}:{n}", self.client_id)
    }

    pub(crate) fn keys(&self, name: &str) -> Result<LockKeys> {
        if self.settings.redisson_compat {
            LockKeys::redisson_mutex(name)
        } else {
            Ok(LockKeys::mutex(&self.settings.prefix, name))
        }
    }

    /// Runs a script with the command timeout as an outer bound (reconnects included).
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
        what: &str,
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.settings.command_timeout, inv.invoke_async(&mut conn)).await
        {
            Ok(r) => r.map_err(|e| error::map(e, what)),
            Err(_) => Err(error::timeout(what)),
        }
    }

    /// Runs a command with the command timeout as an outer bound.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd, what: &str) -> Result<T> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.settings.command_timeout, cmd.query_async(&mut conn)).await
        {
            Ok(r) => r.map_err(|e| error::map(e, what)),
            Err(_) => Err(error::timeout(what)),
        }
    }

    /// The channel on which this client's waiters of a native mutex hear that the lock was
    /// handed to them.
    pub(crate) fn grant_channel(&self, keys: &LockKeys) -> String {
        format!("{}:{}", keys.lock, self.client_id)
    }

    /// Owner-checked, idempotent release of a mutex: `true` when released, `false` when not
    /// ours. A native release hands the lock to the first live waiter; a `redisson_compat` one
    /// publishes Redisson's unlock message (`fair`: the first fair waiter's id). A reply lost
    /// to a broken connection or a timeout is retried; the ownership's unlock latch makes the
    /// retry answer like the first attempt did.
    pub(crate) async fn release_mutex(
        &self,
        keys: &LockKeys,
        owner: &str,
        fair: bool,
    ) -> Result<bool> {
        let latch = keys.unlock_latch(owner);
        let latch_ttl = (self.settings.command_timeout * (RELEASE_RETRIES + 1) * 2)
            .max(Duration::from_secs(10))
            .as_millis() as u64;
        let mut inv;
        if self.settings.redisson_compat {
            inv = self.scripts.rs_release.prepare_invoke();
            inv.key(&keys.lock)
                .key(&latch)
                .key(&keys.queue)
                .arg(owner)
                .arg(&keys.channel)
                .arg(latch_ttl)
                .arg(if fair { "1" } else { "0" });
        } else {
            inv = self.scripts.release.prepare_invoke();
            inv.key(&keys.lock)
                .key(&latch)
                .key(&keys.fence)
                .key(&keys.queue)
                .key(&keys.waiters)
                .arg(owner)
                .arg(latch_ttl)
                .arg(self.settings.fence_ttl.as_millis() as u64)
                .arg(self.settings.waiter_timeout().as_millis() as u64);
        }
        Ok(self.invoke_retrying(&inv, "release").await? == 1)
    }

    /// Runs an idempotent script, retrying up to [`RELEASE_RETRIES`] times after a lost reply.
    pub(crate) async fn invoke_retrying(
        &self,
        inv: &ScriptInvocation<'_>,
        what: &str,
    ) -> Result<i64> {
        let mut attempt = 0;
        loop {
            match self.invoke::<i64>(inv, what).await {
                Ok(r) => return Ok(r),
                Err(e) if e.is_retryable() && attempt < RELEASE_RETRIES => {
                    attempt += 1;
                    tracing::debug!(error = %e, attempt, "lockkit: retrying {what}");
                    tokio::time::sleep(Duration::from_millis(25 * u64::from(attempt))).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Owner-checked extension of watched ownership `id` (`script`: renew or renew_set).
    pub(crate) async fn extend(
        &self,
        script: &Script,
        key: &str,
        owner: &str,
        lease: Duration,
        id: u64,
        name: &str,
    ) -> Result<()> {
        let mut inv = script.prepare_invoke();
        inv.key(key).arg(owner).arg(lease.as_millis().max(1) as u64);
        let sent_at = tokio::time::Instant::now();
        let r: Vec<i64> = self.invoke(&inv, "extend").await?;
        if r.first() == Some(&1) {
            self.watchdog.extended(id, sent_at, lease);
            Ok(())
        } else {
            self.watchdog.lost(id);
            Err(Error::lost(name))
        }
    }

    /// Owner-checked reentry (hold count + 1) of watched ownership `id`.
    pub(crate) async fn reenter(&self, key: &str, owner: &str, id: u64, name: &str) -> Result<()> {
        let mut inv = self.scripts.reenter.prepare_invoke();
        inv.key(key).arg(owner);
        if self.invoke::<i64>(&inv, "reenter").await? > 0 {
            Ok(())
        } else {
            self.watchdog.lost(id);
            Err(Error::lost(name))
        }
    }

    /// A waiter leaves a mutex's queue; natively this also passes on a lock handed to it (or
    /// taken by an attempt whose reply was lost), and hands a free lock to the next waiter;
    /// with `redisson_compat`, it wakes the next fair waiter if the lock is free.
    pub(crate) async fn leave_queue(&self, keys: &LockKeys, owner: &str) -> Result<()> {
        let mut inv;
        if self.settings.redisson_compat {
            inv = self.scripts.rs_fair_leave.prepare_invoke();
            inv.key(&keys.lock)
                .key(&keys.queue)
                .key(&keys.waiters)
                .arg(owner)
                .arg(&keys.channel);
        } else {
            inv = self.scripts.leave.prepare_invoke();
            inv.key(&keys.lock)
                .key(&keys.fence)
                .key(&keys.queue)
                .key(&keys.waiters)
                .arg(owner)
                .arg(self.settings.fence_ttl.as_millis() as u64)
                .arg(self.settings.waiter_timeout().as_millis() as u64);
        }
        self.invoke_retrying(&inv, "leave queue").await.map(drop)
    }

    /// Runs `work` on the current runtime without waiting for it, from a context that cannot
    /// wait (Drop, cancelled acquires); outside a runtime nothing runs.
    pub(crate) fn in_background<F, Fut>(self: &Arc<Self>, work: F)
    where
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(work(self.clone()));
        }
    }
}

/// The Redis backend of one [`Locks`](lockkit_core::Locks) handle. Its background tasks (the
/// watchdog, the pub/sub keeper, and the Sentinel follower) stop when it is dropped.
pub struct RedisBackend {
    inner: Arc<Inner>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("client", &self.inner)
            .finish()
    }
}

impl Drop for RedisBackend {
    fn drop(&mut self) {
        self.stop();
    }
}

impl RedisBackend {
    pub(crate) async fn connect(settings: Settings) -> Result<RedisBackend> {
        let pushes = crate::pubsub::Pushes::default();
        let crate::conn::Connections {
            conn,
            pubsub,
            follower,
        } = crate::conn::connect(&settings, pushes.clone()).await?;
        let subs = Subscriptions::new(pubsub, &pushes);
        let keeper_task = tokio::spawn(crate::pubsub::keep_connected(pushes));

        let scripts = Arc::new(Scripts::new());
        let wd = Arc::new(Watchdog::default());
        let watchdog_task = tokio::spawn(watchdog::run(
            wd.clone(),
            conn.clone(),
            scripts.clone(),
            settings.command_timeout,
            settings.topology.is_cluster(),
        ));
        let inner = Arc::new(Inner {
            conn,
            settings,
            client_id: uuid::Uuid::new_v4().to_string(),
            next_owner: AtomicU64::new(1),
            scripts,
            subs,
            watchdog: wd,
        });
        let mut tasks = vec![watchdog_task, keeper_task];
        tasks.extend(follower);
        Ok(RedisBackend {
            inner,
            tasks: std::sync::Mutex::new(tasks),
        })
    }

    /// Stops the background tasks; whatever the watchdog still watched turns Lost.
    fn stop(&self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
        self.inner.watchdog.abandon_all();
    }

    /// This client's id: the `<client-uuid>` part of its owner fields.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// How many held locks the watchdog is watching (renewed or fixed-lease).
    pub fn watched_locks(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// How many lock channels this client is subscribed to for waiting acquirers.
    pub fn waiting_channels(&self) -> usize {
        self.inner.subs.active_channels()
    }

    /// The key layout of mutex `name` under this client's prefix.
    pub fn keys(&self, name: &str) -> Result<LockKeys> {
        self.inner.keys(name)
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Redis
    }

    fn capabilities(&self) -> Capabilities {
        // The mutex serves its queue in order and `fair` also stops newcomers barging in; the
        // RW lock and the semaphore have no fair mode.
        let shared = Support::all()
            .fair(false)
            .inspect(false)
            .remaining_lease(false);
        Capabilities::new(Support::all())
            .with_rwlock(shared)
            .with_semaphore(shared)
    }

    fn default_lease(&self) -> Duration {
        self.inner.settings.lease
    }

    fn mutex(&self, name: &str) -> Result<Box<dyn RawMutex>> {
        Ok(Box::new(RedisMutex::new(self.inner.clone(), name)?))
    }

    fn rwlock(&self, name: &str) -> Result<Box<dyn RawRwLock>> {
        Ok(Box::new(crate::shared::RedisRwLock::new(
            self.inner.clone(),
            name,
        )?))
    }

    fn semaphore(&self, name: &str, permits: u32) -> Result<Box<dyn RawSemaphore>> {
        Ok(Box::new(crate::shared::RedisSemaphore::new(
            self.inner.clone(),
            name,
            permits,
        )?))
    }

    /// The core has released every guard of the handle (owner-checked, handing locks to their
    /// next waiters); what remains is to stop the background tasks.
    async fn close(&self) -> Result<()> {
        self.stop();
        Ok(())
    }

    async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        if primitive != Primitive::Mutex {
            return Err(Error::unsupported(format!(
                "the Redis backend cannot inspect a {primitive:?}"
            )));
        }
        let keys = self.inner.keys(name)?;
        let probe = crate::mutex::probe(&self.inner, &keys).await?;
        // Waiters, first in line first (natively every waiter; with `redisson_compat` the fair
        // ones). Read after the holders, so the two views may be a moment apart.
        let queue: Vec<String> = self
            .inner
            .query(
                redis::cmd("LRANGE").arg(&keys.queue).arg(0).arg(-1),
                "inspect",
            )
            .await?;
        let waiters = queue
            .into_iter()
            .map(|owner| WaiterInfo::new(owner, HoldMode::Exclusive))
            .collect();
        let holders = probe
            .owners
            .into_iter()
            .map(|(owner, _holds)| {
                let h = HolderInfo::new(owner, HoldMode::Exclusive);
                match probe.pttl {
                    Some(d) => h.with_remaining_lease(d),
                    None => h,
                }
            })
            .collect();
        Ok(LockInfo::new(holders, waiters))
    }
}
