//! The semaphore: Curator's InterProcessSemaphoreV2 protocol. An entry mutex (`locks/`) lets one
//! acquirer at a time add its lease nodes (`leases/`) and watch the lease set until it fits, so
//! releases wake only that one acquirer (no herd). Leases are ephemeral: a dead session's permits
//! come back when ZooKeeper expires it. The size lives in `<dir>/size` (`sem_size.rs`): settled
//! before joining the entry queue, and read again (and watched) each time the lease set is.

use async_trait::async_trait;
use lockkit_core::spi::{
    drive, no_size, settle_size, too_many, Exit, Failures, GuardParts, Queue, RawSemaphore,
    Request, Standing, Woken,
};
use lockkit_core::Result;
use std::sync::Arc;
use zookeeper_client as zk;

use crate::held;
use crate::node::{self, LEASE_MARKER, MUTEX_MARKER};
use crate::queue::{self, Node, Rule, Spec, ZkQueue, NODE_DATA};
use crate::sem_size;
use crate::sessions::Sessions;

#[derive(Debug)]
pub(crate) struct ZkSemaphore {
    pub sessions: Arc<Sessions>,
    pub name: String,
    pub dir: String,
    /// The size asked for (`None`: the stored one).
    pub permits: Option<u32>,
}

impl ZkSemaphore {
    fn locks_dir(&self) -> String {
        format!("{}/locks", self.dir)
    }

    fn leases_dir(&self) -> String {
        format!("{}/leases", self.dir)
    }

    async fn lease_count(&self, client: &zk::Client) -> Result<usize> {
        let children = crate::ops::list_or_empty(
            client,
            &self.leases_dir(),
            self.sessions.default().cfg.command_timeout,
        )
        .await?;
        Ok(count_leases(&children))
    }
}

fn count_leases(children: &[String]) -> usize {
    children
        .iter()
        .filter(|c| node::parse(c, &[LEASE_MARKER]).is_some())
        .count()
}

#[async_trait]
impl RawSemaphore for ZkSemaphore {
    async fn acquire(&self, n: u32, req: &Request) -> Result<Option<GuardParts>> {
        self.acquire_permits(n, req).await
    }

    /// The lease set, then the size: the count can only have fallen by then.
    async fn available(&self) -> Result<u32> {
        let session = self.sessions.default();
        let client = session.client()?;
        let used = self.lease_count(&client).await?;
        let stored = sem_size::read(&client, &self.dir, session.cfg.command_timeout).await?;
        let (size, _) = settle_size(&self.name, self.permits, stored)?;
        Ok(size.saturating_sub(u32::try_from(used).unwrap_or(u32::MAX)))
    }

    async fn size(&self) -> Result<Option<u32>> {
        let session = self.sessions.default();
        let client = session.client()?;
        sem_size::read(&client, &self.dir, session.cfg.command_timeout).await
    }

    async fn set_size(&self, permits: u32) -> Result<Option<u32>> {
        let session = self.sessions.default();
        let client = session.client()?;
        sem_size::set(session, &client, &self.dir, permits).await
    }
}

impl ZkSemaphore {
    async fn acquire_permits(&self, n: u32, req: &Request) -> Result<Option<GuardParts>> {
        let session = &self.sessions.for_lease(req.lease().duration()).await?;
        // Refused before joining the queue when the size refuses us now.
        let client = session.live_client(req).await?;
        sem_size::settle(session, &client, &self.dir, &self.name, self.permits, n).await?;
        let (locks_dir, leases_dir) = (self.locks_dir(), self.leases_dir());
        let queue = SemQueue {
            entry: ZkQueue {
                session,
                spec: Spec {
                    name: &self.name,
                    dir: &locks_dir,
                    marker: MUTEX_MARKER,
                    markers: crate::mutex::MARKERS,
                    rule: Rule::Exclusive,
                    data: NODE_DATA,
                },
            },
            leases_dir: &leases_dir,
            dir: &self.dir,
            name: &self.name,
            n,
            permits: self.permits,
        };
        let Some(leases) = drive(&queue, req).await? else {
            return Ok(None);
        };
        Ok(Some(held::parts(
            session,
            &self.name,
            leases,
            req.lease(),
            None,
        )))
    }
}

/// The semaphore as the core driver's queue: a claim first waits in the entry mutex's queue;
/// once the entry is ours it adds its lease nodes and watches the lease set until they fit.
/// Every node it made is deleted, leases first, if it ends without a hold.
struct SemQueue<'a> {
    entry: ZkQueue<'a>,
    leases_dir: &'a str,
    dir: &'a str,
    name: &'a str,
    n: u32,
    permits: Option<u32>,
}

struct SemClaim {
    entry: queue::Claim,
    leases: Vec<Node>,
    /// The watches of the lease set and of the size, while our leases do not fit.
    watchers: Option<(zk::OneshotWatcher, zk::OneshotWatcher)>,
    /// Whether the entry is ours: a failure from then on is never borne (a part of our leases
    /// may be taken, and a look cannot tell which).
    fitting: bool,
}

impl SemQueue<'_> {
    /// [`fit`](Self::fit), or `Gone` once the claim's session ended (its leases went with it).
    async fn fit_unless_ended(&self, c: &mut SemClaim) -> Result<Standing> {
        let fitted = self.fit(c).await;
        queue::gone_if_ended(c.entry.client(), fitted)
    }

    /// The entry is ours: adds our leases (once) and tells whether they fit.
    async fn fit(&self, c: &mut SemClaim) -> Result<Standing> {
        c.fitting = true;
        let session = self.entry.session;
        let client = c.entry.client().clone();
        if c.leases.is_empty() {
            for _ in 0..self.n {
                let cleanup = c.entry.cleanup();
                let (lease, _) = queue::create(
                    session,
                    &client,
                    cleanup,
                    self.leases_dir,
                    LEASE_MARKER,
                    NODE_DATA,
                )
                .await?;
                c.leases.push(lease);
            }
        }
        let limit = session.cfg.command_timeout;
        let (children, leases) = crate::ops::retry(limit, "watch leases", || {
            client.list_and_watch_children(self.leases_dir)
        })
        .await?;
        // A lease of ours deleted behind our back (an admin, a force-unlock) would let us in
        // counting one lease too few: start over with new nodes, as Curator does.
        let listed = |l: &Node| {
            let name = l.path.rsplit('/').next().unwrap_or_default();
            children.iter().any(|n| n == name)
        };
        if !c.leases.iter().all(listed) {
            return Ok(Standing::Gone);
        }
        // The size after the lease set (see `sem_size.rs`); one changed while we waited is
        // the one we count against, and one too small for us refuses us.
        let (stored, size_watch) = sem_size::read_and_watch(&client, self.dir, limit).await?;
        let size = stored.or(self.permits).ok_or_else(|| no_size(self.name))?;
        if self.n > size {
            return Err(too_many(self.name, self.n, size));
        }
        if count_leases(&children) <= size as usize {
            return Ok(Standing::Owner);
        }
        c.watchers = Some((leases, size_watch));
        Ok(Standing::Waiting)
    }
}

#[async_trait]
impl Queue for SemQueue<'_> {
    type Claim = SemClaim;
    type Output = Vec<Node>;

    async fn claim(&self, req: &Request) -> Result<SemClaim> {
        Ok(SemClaim {
            entry: self.entry.claim(req).await?,
            leases: Vec::new(),
            watchers: None,
            fitting: false,
        })
    }

    async fn enqueue(&self, c: &mut SemClaim, req: &Request) -> Result<Standing> {
        match self.entry.enqueue(&mut c.entry, req).await? {
            Standing::Owner => self.fit_unless_ended(c).await,
            other => Ok(other),
        }
    }

    async fn wait(&self, c: &mut SemClaim, req: &Request) -> Result<Woken> {
        let Some((leases, size)) = c.watchers.take() else {
            return self.entry.wait(&mut c.entry, req).await;
        };
        let session = self.entry.session;
        let fired = tokio::select! {
            r = queue::watch_fired(session, leases, req) => r,
            r = queue::watch_fired(session, size, req) => r,
        };
        queue::woken_unless_failed(c.entry.client(), fired)
    }

    async fn standing(&self, c: &mut SemClaim, req: &Request) -> Result<Standing> {
        if c.leases.is_empty() {
            match self.entry.standing(&mut c.entry, req).await? {
                Standing::Owner => self.fit_unless_ended(c).await,
                other => Ok(other),
            }
        } else {
            self.fit_unless_ended(c).await
        }
    }

    /// Our leases fit: deletes the entry node to let the next acquirer in; the leases belong
    /// to the guard.
    async fn hold(&self, c: &mut SemClaim, _req: &Request) -> Result<Option<Vec<Node>>> {
        let limit = self.entry.session.cfg.command_timeout;
        if let Some(entry) = c.entry.node() {
            crate::ops::delete_node(c.entry.client(), &entry.path, limit).await?;
        }
        c.entry.disarm();
        Ok(Some(std::mem::take(&mut c.leases)))
    }

    async fn leave(&self, c: &mut SemClaim, exit: Exit) -> Result<()> {
        self.entry.leave(&mut c.entry, exit).await
    }

    fn abandon(&self, c: SemClaim) {
        self.entry.abandon(c.entry);
    }

    /// The entry node's while the claim waits for the entry (a dropped connection is borne);
    /// nothing once the entry is ours.
    fn tolerance(&self, c: &SemClaim, f: &Failures<'_>) -> std::time::Duration {
        if c.fitting {
            return std::time::Duration::ZERO;
        }
        self.entry.tolerance(&c.entry, f)
    }

    fn lock_name(&self) -> &str {
        self.entry.lock_name()
    }
}
