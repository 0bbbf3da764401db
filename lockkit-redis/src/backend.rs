//! The backend object: connections, scripts, background tasks.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::{
    Backend, GuardParts, RawElection, RawMutex, RawRwLock, RawSemaphore, Reaper, Request, Taken,
};
use lockkit_core::{
    async_trait, BackendKind, Capabilities, LockEntry, LockInfo, Member, Primitive, Result, Support,
};
use tokio::task::JoinHandle;

use crate::client::Inner;
use crate::config::Settings;
use crate::keys::LockKeys;
use crate::mutex::RedisMutex;
use crate::pubsub::Subscriptions;
use crate::replicas::{Replicas, Target};
use crate::script_set::Scripts;
use crate::watchdog::{Renewer, Watchdog};

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

        let scripts = Arc::new(Scripts::new());
        let wd = Arc::new(Watchdog::new("redis"));
        let target = match (&conn, &settings.topology) {
            (crate::conn::Conn::Sentinel(primary), _) => Target::Primary(primary.clone()),
            (_, crate::config::Topology::Cluster { nodes }) => {
                // Its own cluster client: a WAIT blocks the node connection it runs on.
                let client = crate::conn::cluster_builder(&settings, nodes, false)
                    .response_timeout(settings.wait_timeout + settings.command_timeout)
                    .build()
                    .map_err(|e| crate::error::map(e, "cluster client setup"))?;
                Target::Cluster(Box::new(client), settings.prefix.as_str().into())
            }
            _ => Target::Fixed(Box::new(settings.info.clone())),
        };
        let replicas = Arc::new(Replicas::start(&settings, conn.clone(), target).await?);
        let inner = Arc::new(Inner::new(
            conn,
            settings,
            scripts,
            subs,
            wd.clone(),
            replicas,
        ));
        // A force-unlock names each holder it took the lock from; the guard is checked at once.
        let taken = Arc::downgrade(&wd);
        let holder = crate::pubsub::Holder {
            channel: inner.holder_channel(),
            taken: Arc::new(move |owner, key| {
                if let Some(wd) = taken.upgrade() {
                    let (owner, key) = (owner.to_string(), key.to_string());
                    wd.taken_where(move |r| r.owner == owner && r.key == key, true);
                }
            }),
        };
        inner.subs.hear_holder(holder).await;
        let keeper_task = tokio::spawn(crate::pubsub::keep_connected(pushes));
        let watchdog_task = tokio::spawn(wd.clone().run(Renewer {
            conn: inner.conn.clone(),
            scripts: inner.scripts.clone(),
            replicas: inner.replicas.clone(),
            command_timeout: inner.settings.command_timeout,
            cluster: inner.settings.topology.is_cluster(),
        }));
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
        self.inner.replicas.stop();
        self.inner.closed.send_replace(true);
    }

    /// This client's id: the `<client-uuid>` part of its owner fields.
    pub fn client_id(&self) -> &str {
        self.inner.client_id()
    }

    /// How many held locks the watchdog is watching (renewed or fixed-lease).
    pub fn watched_locks(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// How many channels this client is subscribed to for its waiters: its waiting acquirers'
    /// lock channels, and the channels of the elections it observes or leads (not its holder
    /// channel, which it keeps while it lives).
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
        crate::config::KIND
    }

    fn capabilities(&self) -> Capabilities {
        // The mutex serves its queue in order and `fair` also stops newcomers barging in; the
        // RW lock and the semaphore have no fair mode.
        // Redisson's RW lock and semaphore layouts are not inspected, and its bare-named keys
        // cannot be listed.
        let compat = self.inner.settings.redisson_compat;
        let shared = Support::all()
            .fair(false)
            .inspect(!compat)
            .remaining_lease(false);
        Capabilities::new(Support::all())
            .with_rwlock(shared)
            .with_semaphore(shared)
            .with_election(Support::all().remaining_lease(false))
            .list(!compat)
            // Redisson's RSemaphore keeps only its free count.
            .semaphore_size(!compat)
    }

    fn default_lease(&self) -> Duration {
        self.inner.settings.lease
    }

    fn reaper(&self) -> Reaper {
        self.inner.reaper.clone()
    }

    fn mutex(&self, name: &str) -> Result<Box<dyn RawMutex>> {
        Ok(Box::new(RedisMutex::new(self.inner.clone(), name)?))
    }

    /// Native mutexes that one script reaches (see `multi.rs`).
    async fn take_all(
        &self,
        members: &[Member<'_>],
        req: &Request,
    ) -> Result<Taken<Vec<GuardParts>>> {
        crate::multi::take_all(&self.inner, members, req).await
    }

    /// On Redisson's layout a mutex, an RW lock and a semaphore of one name are one key, the
    /// name itself (as in Redisson, where `getLock("x")` and `getReadWriteLock("x")` share the
    /// hash `x`); natively, and for elections, every primitive has keys of its own.
    fn resource(&self, primitive: Primitive, name: &str) -> String {
        if self.inner.settings.redisson_compat && primitive != Primitive::Election {
            name.to_string()
        } else {
            format!("{}/{name}", primitive.as_str())
        }
    }

    fn rwlock(&self, name: &str) -> Result<Box<dyn RawRwLock>> {
        Ok(Box::new(crate::shared::RedisRwLock::new(
            self.inner.clone(),
            name,
        )?))
    }

    fn semaphore(&self, name: &str, permits: Option<u32>) -> Result<Box<dyn RawSemaphore>> {
        Ok(Box::new(crate::shared::RedisSemaphore::new(
            self.inner.clone(),
            name,
            permits,
        )?))
    }

    fn election(&self, name: &str) -> Result<Box<dyn RawElection>> {
        Ok(Box::new(crate::election::RedisElection::new(
            self.inner.clone(),
            name,
        )?))
    }

    /// The core has released every guard of the handle (owner-checked, handing locks to their
    /// next waiters); what remains is to stop the background tasks.
    async fn close(&self) -> Result<()> {
        self.stop();
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockEntry>> {
        crate::views::list(&self.inner, prefix).await
    }

    async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        crate::views::inspect(&self.inner, name, primitive).await
    }
}
