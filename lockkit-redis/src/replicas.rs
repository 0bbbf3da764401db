//! Replica safety: a write that must outlive a failover (an acquire, a renewal, an extend, a
//! release) is followed by Redis `WAIT`, so the lock is on the replicas before its holder relies
//! on it, as Redisson does by default (`checkLockSyncedSlaves`).
//!
//! `WAIT` blocks the connection it runs on, so it never runs on the handle's shared command
//! connection: each handle keeps one connection of its own to the primary for it, opened when
//! first needed. `WAIT` waits for the replication offset of its connection's last write, so
//! each round sends a `PUBLISH` (propagated to replicas outside cluster mode, and it writes no
//! key) before it: the round then covers every write whose reply came before it, on any
//! connection. Writes that ask while a round is under way share the next one (a group commit),
//! so a burst of acquires costs one round trip to the replicas, not one each. Each request
//! carries the Sentinel epoch its write was sent in: a round on a primary of a later epoch cannot
//! vouch for it, and fails it.
//!
//! `wait_replicas=auto` (the default): wait for the replicas connected now (`ROLE`, refreshed
//! every round and every second); it fails (`ReplicaSync`) only when replicas are connected and
//! none acknowledged within `wait_timeout`, as Redisson's check does. With no replica connected
//! nothing waits and nothing is sent, and a user that may not run `ROLE` or `WAIT` turns `auto`
//! off (with a warning). `wait_replicas=N`: an acquire needs N acknowledgements (and a user that
//! may not run them is a `Config` error at connect); renewals, extends and releases follow the
//! `auto` rule (after a failover fewer replicas may be left, and a held lock must not turn Lost
//! for it). `0`: off.
//!
//! In a cluster each slot's primary has replicas of its own, and `PUBLISH` goes over the cluster
//! bus, not through replication. So each request names the slot of the key its write touched,
//! and a round runs on the primary that owns that slot now, over the handle's own cluster
//! connection (`route_pipeline`), with a marker of its own: a script that sets and deletes a key
//! of that slot (`<prefix>:replica-sync:{<tag>}`), which replicates and leaves nothing behind.
//! Requests whose slots one primary owns (`CLUSTER SLOTS`, refreshed every second) share a
//! round; rounds on different primaries run side by side. `auto` there means the replicas
//! that primary has connected now (its `ROLE`). The writes themselves stay on the shared
//! connection, so no command, waited for or not, queues behind a `WAIT`. A cluster has no
//! Sentinel epoch: a round that runs on a replica promoted after the write (a failover between
//! a write's reply and its round, which the cluster takes `cluster-node-timeout` to decide)
//! cannot tell that it may lack the write.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::{Error, ErrorKind, Result};
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{ConnectionInfo, RedisError, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::config::{Settings, WaitReplicas};
use crate::conn::Conn;
use crate::error;
use crate::sentinel::Switchable;

/// How often the number of connected replicas is looked up when nothing asks for a round.
const REFRESH: Duration = Duration::from_secs(1);

/// The channel of the marker `PUBLISH` that starts each round (nobody listens on it).
const MARKER: &str = "lockkit:replica-sync";

/// The marker of a cluster round: a write to a key of the slot that replicates and leaves
/// nothing behind.
const CLUSTER_MARKER: &str = "redis.call('set', KEYS[1], '') return redis.call('del', KEYS[1])";

/// Where the handle's own connection for `WAIT` goes.
#[derive(Clone)]
pub(crate) enum Target {
    /// One server.
    Fixed(Box<ConnectionInfo>),
    /// Whatever primary the Sentinels name now.
    Primary(Arc<Switchable>),
    /// The primary that owns each write's slot, through a cluster client of the handle's own
    /// (built, not connected yet) and the key prefix for the markers.
    Cluster(Box<ClusterClient>, Arc<str>),
}

impl Target {
    /// The Sentinel epoch (switches so far; always 0 for one server or a cluster).
    fn epoch(&self) -> u64 {
        match self {
            Target::Primary(s) => s.primary().0,
            _ => 0,
        }
    }

    /// The Sentinel epoch and how to reach the primary of it (`None` on a cluster).
    fn primary(&self) -> Option<(u64, ConnectionInfo)> {
        match self {
            Target::Fixed(info) => Some((0, (**info).clone())),
            Target::Primary(s) => Some(s.primary()),
            Target::Cluster(..) => None,
        }
    }
}

/// Taken before a write that will be waited for: the Sentinel epoch it is sent in and, on a
/// cluster, the slot of its key and the marker key of that slot.
#[derive(Clone, Debug)]
pub(crate) struct Ticket {
    epoch: u64,
    slot: Option<(Slot, Arc<str>)>,
}

/// The marker key of `key`'s slot under `prefix` (which holds no braces).
fn marker_key(prefix: &str, key: &str) -> String {
    let base = format!("{prefix}:replica-sync:");
    if let Some(tag) = hash_tag(key) {
        return format!("{base}{{{tag}}}");
    }
    if !key.contains('}') {
        return format!("{base}{{{key}}}");
    }
    // A key without a tag but with a '}': find a tag of the same slot.
    let slot = Slot::for_key(key);
    (0u64..)
        .map(|n| format!("{base}{{{n}}}"))
        .find(|k| Slot::for_key(k) == slot)
        .expect("every slot has a numeric tag")
}

/// The hash tag of `key`: what lies between its first '{' and the next '}', if not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// What one round found: replicas that acknowledged, and replicas connected.
#[derive(Clone, Copy, Debug)]
struct Round {
    acked: i64,
    connected: i64,
}

/// Why a round could not vouch for a write (an [`Error`] is not `Clone`).
#[derive(Clone, Debug)]
struct Failure {
    kind: ErrorKind,
    message: String,
    retryable: bool,
}

impl Failure {
    fn of(e: &Error) -> Self {
        Failure {
            kind: e.kind(),
            message: e.to_string(),
            retryable: e.is_retryable(),
        }
    }

    fn into_error(self) -> Error {
        Error::new(self.kind, self.message).with_retryable(self.retryable)
    }
}

/// One request for a round.
struct Request {
    /// The replicas it needs (`None`: one of those connected).
    need: Option<u32>,
    /// The Sentinel epoch its write was sent in.
    epoch: u64,
    /// On a cluster: the slot its write touched, and the marker key of that slot.
    slot: Option<(Slot, Arc<str>)>,
    reply: oneshot::Sender<std::result::Result<Round, Failure>>,
}

/// The replica waits of one handle.
pub(crate) struct Replicas {
    want: WaitReplicas,
    timeout: Duration,
    /// Replicas connected at the last look (-1: not known yet).
    connected: Arc<AtomicI64>,
    /// `auto` found that this user may not run `ROLE` or `WAIT`, and turned itself off.
    refused: Arc<AtomicBool>,
    epochs: Target,
    /// On a cluster, the key prefix for marker keys.
    cluster: Option<Arc<str>>,
    requests: mpsc::UnboundedSender<Request>,
    task: AbortHandle,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas")
            .field("want", &self.want)
            .field("connected", &self.connected.load(Ordering::Relaxed))
            .field("refused", &self.refused.load(Ordering::Relaxed))
            .finish()
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether the server refused a command to this user, or does not know it.
fn is_refusal(e: &RedisError) -> bool {
    e.code() == Some("NOPERM") || e.to_string().contains("unknown command")
}

impl Replicas {
    /// Starts the rounds of a handle (`shared`: its command connection, for `ROLE`), after one
    /// look at the connected replicas and at whether this user may run `ROLE` and `WAIT`.
    pub(crate) async fn start(
        settings: &Settings,
        shared: Conn,
        target: Target,
    ) -> Result<Replicas> {
        let epochs = target.clone();
        let cluster = match &target {
            Target::Cluster(_, prefix) => Some(prefix.clone()),
            _ => None,
        };
        let connected = Arc::new(AtomicI64::new(-1));
        let refused = Arc::new(AtomicBool::new(false));
        let want = settings.wait_replicas;
        if want != WaitReplicas::Off {
            let mut conn = shared.clone();
            let mut probe = redis::pipe();
            probe.cmd("ROLE").cmd("WAIT").arg(0).arg(0).ignore();
            let looked = tokio::time::timeout(settings.command_timeout, async {
                match &mut conn {
                    // Any primary: the rounds run on primaries.
                    Conn::Cluster(c) => {
                        let route = SingleNodeRoutingInfo::RandomPrimary;
                        let r = c.route_pipeline(probe.clone(), 0, 2, route).await?;
                        let role = r.into_iter().next().unwrap_or(Value::Nil).extract_error()?;
                        Ok((role,))
                    }
                    _ => probe.query_async::<(Value,)>(&mut conn).await,
                }
            })
            .await;
            match looked {
                // On a cluster the refresh below counts every primary's replicas.
                Ok(Ok((role,))) if cluster.is_none() => {
                    if let Some(n) = replicas_of(&role) {
                        connected.store(n, Ordering::Release);
                    }
                }
                Ok(Err(e)) if is_refusal(&e) => {
                    if let WaitReplicas::AtLeast(n) = want {
                        return Err(Error::config(format!(
                            "wait_replicas={n} needs the commands ROLE and WAIT, which this \
                             server refuses to this user ({e}); grant them or set \
                             wait_replicas=0"
                        )));
                    }
                    tracing::warn!(backend = "redis", error = %e, "lockkit: this user may not run ROLE or WAIT; \
                        wait_replicas=auto is off for this handle");
                    refused.store(true, Ordering::Release);
                }
                // The server is away: the rounds find out later.
                _ => {}
            }
        }
        let (requests, rx) = mpsc::unbounded_channel();
        let worker = Worker {
            want,
            timeout: settings.wait_timeout,
            command_timeout: settings.command_timeout,
            connect_timeout: settings.connect_timeout,
            tls: settings.tls.clone(),
            connected: connected.clone(),
            refused: refused.clone(),
            shared,
            target,
            own: None,
            own_cluster: None,
            owners: HashMap::new(),
            ranges: Vec::new(),
            node_replicas: HashMap::new(),
        };
        let mut worker = worker;
        if cluster.is_some() && want != WaitReplicas::Off {
            worker.refresh().await;
        }
        let task = tokio::spawn(worker.run(rx)).abort_handle();
        Ok(Replicas {
            want,
            timeout: settings.wait_timeout,
            connected,
            refused,
            epochs,
            cluster,
            requests,
            task,
        })
    }

    /// Stops the rounds (the handle is closed); later waits fail with `Closed`.
    pub(crate) fn stop(&self) {
        self.task.abort();
    }

    /// Take it before sending a write to `key` that will be waited for: the Sentinel epoch
    /// now and, on a cluster, the slot of `key`.
    pub(crate) fn ticket(&self, key: &str) -> Ticket {
        Ticket {
            epoch: self.epochs.epoch(),
            slot: self
                .cluster
                .as_ref()
                .filter(|_| self.want != WaitReplicas::Off)
                .map(|prefix| (Slot::for_key(key), marker_key(prefix, key).into())),
        }
    }

    /// Whether writes wait for replicas now.
    pub(crate) fn waits(&self) -> bool {
        match self.want {
            WaitReplicas::Off => false,
            _ if self.refused.load(Ordering::Acquire) => false,
            WaitReplicas::AtLeast(_) => true,
            WaitReplicas::Auto => self.connected.load(Ordering::Acquire) != 0,
        }
    }

    /// Waits until the replicas have the acquire sent with `ticket` whose reply came before
    /// this call: `ReplicaSync` when too few acknowledged in time (`wait_replicas`).
    pub(crate) async fn acquired(&self, ticket: Ticket) -> Result<()> {
        let need = match self.want {
            WaitReplicas::AtLeast(n) => Some(n),
            _ => None,
        };
        self.sync("acquire", need, ticket).await
    }

    /// Waits until the replicas have the renewal, extend or release (`what`) sent with
    /// `ticket`: `ReplicaSync` when replicas are connected and none acknowledged in time.
    pub(crate) async fn kept(&self, what: &str, ticket: Ticket) -> Result<()> {
        self.sync(what, None, ticket).await
    }

    /// Waits until the replicas have the release of lock `name` sent with `ticket`, as
    /// Redisson does; the lock is released on the primary either way, so a release they miss is
    /// only logged (after a failover it comes back until its lease ends).
    pub(crate) async fn released(&self, name: &str, ticket: Ticket) {
        if let Err(e) = self.kept("release", ticket).await {
            tracing::warn!(
                backend = "redis",
                lock = name,
                error = %e,
                "lockkit: a release did not reach the replicas"
            );
        }
    }

    async fn sync(&self, what: &str, need: Option<u32>, ticket: Ticket) -> Result<()> {
        let no_replicas = self.connected.load(Ordering::Acquire) == 0;
        if !self.waits() || (need.is_none() && no_replicas) {
            return Ok(());
        }
        let (reply, rx) = oneshot::channel();
        let Ticket { epoch, slot } = ticket;
        let request = Request {
            need,
            epoch,
            slot,
            reply,
        };
        self.requests.send(request).map_err(|_| Error::closed())?;
        let round = match rx.await {
            Ok(Ok(round)) => round,
            Ok(Err(failure)) => return Err(failure.into_error()),
            Err(_) => return Err(Error::closed()),
        };
        let enough = match need {
            None => round.connected == 0 || round.acked >= 1,
            Some(n) => round.acked >= i64::from(n),
        };
        if enough {
            return Ok(());
        }
        let wanted = match need {
            Some(n) => format!("{n} required"),
            None => format!("{} connected", round.connected),
        };
        Err(Error::new(
            ErrorKind::ReplicaSync,
            format!(
                "{what}: {} replicas ({wanted}) acknowledged within {:?}",
                round.acked, self.timeout
            ),
        ))
    }
}

/// The task that runs the rounds, and what it needs.
struct Worker {
    want: WaitReplicas,
    timeout: Duration,
    command_timeout: Duration,
    connect_timeout: Duration,
    tls: Option<lockkit_core::Tls>,
    connected: Arc<AtomicI64>,
    refused: Arc<AtomicBool>,
    shared: Conn,
    target: Target,
    /// The connection for `WAIT`, and the Sentinel epoch of the primary it goes to.
    own: Option<(u64, MultiplexedConnection)>,
    /// On a cluster: the handle's own cluster connection for the rounds.
    own_cluster: Option<ClusterConnection>,
    /// On a cluster: the primary (`host:port`) that owns each slot, by the last `CLUSTER SLOTS`.
    owners: HashMap<Slot, String>,
    /// The slot ranges `owners` was built from (start, end, primary).
    ranges: Vec<(u16, u16, String)>,
    /// On a cluster: the replicas each primary had connected at the last look.
    node_replicas: HashMap<String, i64>,
}

impl Worker {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Request>) {
        let mut refresh = tokio::time::interval(REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                first = rx.recv() => {
                    let Some(first) = first else { return };
                    let mut batch = vec![first];
                    while let Ok(more) = rx.try_recv() {
                        batch.push(more);
                    }
                    self.serve(batch).await;
                    refresh.reset();
                }
                _ = refresh.tick(), if self.refreshes() => self.refresh().await,
            }
        }
    }

    /// One round for `batch`: `WAIT` for the most any request needs, then each request's
    /// answer (a request of an earlier epoch than the primary the round ran on gets an error).
    async fn serve(&mut self, batch: Vec<Request>) {
        if matches!(self.target, Target::Cluster(..)) {
            return self.serve_cluster(batch).await;
        }
        let connected = self.connected.load(Ordering::Acquire).max(1);
        let wanted = batch
            .iter()
            .map(|r| r.need.map_or(connected, i64::from))
            .max()
            .unwrap_or(connected);
        let round = self.round(wanted).await;
        if let Err(e) = &round {
            if self.want == WaitReplicas::Auto && e.kind() == ErrorKind::Auth {
                tracing::warn!(backend = "redis", error = %e, "lockkit: WAIT refused; wait_replicas=auto is off");
                self.refused.store(true, Ordering::Release);
            }
        }
        let answer = round.map_err(|e| Failure::of(&e));
        for r in batch {
            let a = match &answer {
                Ok((epoch, _)) if *epoch != r.epoch => Err(Failure {
                    kind: ErrorKind::ReplicaSync,
                    message: "the Redis primary changed after the write: it may be lost".into(),
                    retryable: true,
                }),
                Ok((_, round)) => Ok(*round),
                Err(f) => Err(f.clone()),
            };
            let _ = r.reply.send(a);
        }
    }

    /// Whether the counts (and on a cluster the slot owners) are looked up every second.
    fn refreshes(&self) -> bool {
        match self.target {
            Target::Cluster(..) => self.want != WaitReplicas::Off,
            _ => self.want == WaitReplicas::Auto,
        }
    }

    /// Looks up how many replicas are connected (on the shared connection: `ROLE` is quick).
    async fn refresh(&mut self) {
        if matches!(self.target, Target::Cluster(..)) {
            return self.refresh_cluster().await;
        }
        let mut conn = self.shared.clone();
        let role = tokio::time::timeout(
            self.command_timeout,
            redis::cmd("ROLE").query_async::<Value>(&mut conn),
        )
        .await;
        if let Ok(Ok(role)) = role {
            if let Some(n) = replicas_of(&role) {
                self.connected.store(n, Ordering::Release);
            }
        }
    }

    /// One round on the handle's own connection: `ROLE`, the marker, `WAIT` for `wanted`; the
    /// epoch of the primary it ran on. A connection found broken is opened again once.
    async fn round(&mut self, wanted: i64) -> Result<(u64, Round)> {
        let reused = self.own.is_some();
        match self.round_once(wanted).await {
            Err(e) if reused && e.kind() == ErrorKind::Connection => {
                self.own = None;
                self.round_once(wanted).await
            }
            other => other,
        }
    }

    async fn round_once(&mut self, wanted: i64) -> Result<(u64, Round)> {
        let (timeout, limit) = (self.timeout, self.timeout + self.command_timeout);
        let (epoch, conn) = self.connection().await?;
        let mut pipe = redis::pipe();
        pipe.cmd("ROLE")
            .cmd("PUBLISH")
            .arg(MARKER)
            .arg("")
            .ignore()
            .cmd("WAIT")
            .arg(wanted)
            .arg(timeout.as_millis().max(1) as u64);
        let replied = tokio::time::timeout(limit, pipe.query_async(conn)).await;
        let (role, acked): (Value, i64) = match replied {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                self.own = None;
                return Err(error::map(e, "WAIT"));
            }
            Err(_) => {
                self.own = None;
                return Err(error::timeout("WAIT"));
            }
        };
        let Some(connected) = replicas_of(&role) else {
            self.own = None;
            return Err(Error::new(
                ErrorKind::Connection,
                "the server WAIT ran on is no longer the primary",
            )
            .with_retryable(true));
        };
        self.connected.store(connected, Ordering::Release);
        Ok((epoch, Round { acked, connected }))
    }

    /// The handle's own connection to the primary, opened (again) when needed, with the epoch
    /// of that primary.
    async fn connection(&mut self) -> Result<(u64, &mut MultiplexedConnection)> {
        let (epoch, info) = self.target.primary().expect("not a cluster");
        if self.own.as_ref().is_some_and(|(seen, _)| *seen != epoch) {
            self.own = None;
        }
        if self.own.is_none() {
            let client = crate::tls::client(info, self.tls.as_ref())?;
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.connect_timeout))
                .set_response_timeout(Some(self.timeout + self.command_timeout));
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(|e| error::map(e, "connect for WAIT"))?;
            self.own = Some((epoch, conn));
        }
        let (epoch, conn) = self.own.as_mut().expect("just set");
        Ok((*epoch, conn))
    }
}

/// One round on a cluster primary, for the requests of the slots it owns.
struct NodeRound {
    /// The primary as `CLUSTER SLOTS` names it (or the slot, when it names none).
    node: String,
    /// A slot of it and the marker key of that slot: the round is routed by them.
    slot: Slot,
    marker: Arc<str>,
    requests: Vec<Request>,
}

impl Worker {
    /// The rounds of `batch` on a cluster: one per primary, side by side.
    async fn serve_cluster(&mut self, batch: Vec<Request>) {
        let mut rounds: Vec<NodeRound> = Vec::new();
        for r in batch {
            let Some((slot, marker)) = r.slot.clone() else {
                let _ = r.reply.send(Ok(Round {
                    acked: 0,
                    connected: 0,
                }));
                continue;
            };
            let node = self
                .owners
                .get(&slot)
                .cloned()
                .unwrap_or_else(|| format!("{slot:?}"));
            match rounds.iter_mut().find(|g| g.node == node) {
                Some(g) => g.requests.push(r),
                None => rounds.push(NodeRound {
                    node,
                    slot,
                    marker,
                    requests: vec![r],
                }),
            }
        }
        let conn = match self.cluster_connection().await {
            Ok(c) => c,
            Err(e) => {
                let f = Failure::of(&e);
                for r in rounds.into_iter().flat_map(|g| g.requests) {
                    let _ = r.reply.send(Err(f.clone()));
                }
                return;
            }
        };
        let known = self.connected.load(Ordering::Acquire).max(1);
        let runs = rounds.iter().map(|g| {
            let connected = self.node_replicas.get(&g.node).copied().unwrap_or(known);
            let wanted = g
                .requests
                .iter()
                .map(|r| r.need.map_or(connected, i64::from))
                .max()
                .unwrap_or(connected);
            self.cluster_round(conn.clone(), g.slot, &g.marker, wanted)
        });
        let results = futures::future::join_all(runs).await;
        let mut broken = false;
        for (g, result) in rounds.into_iter().zip(results) {
            if let Err(e) = &result {
                broken |= e.kind() == ErrorKind::Connection;
                if self.want == WaitReplicas::Auto && e.kind() == ErrorKind::Auth {
                    tracing::warn!(error = %e, "lockkit: WAIT refused; wait_replicas=auto is off");
                    self.refused.store(true, Ordering::Release);
                }
            }
            if let Ok(round) = &result {
                self.node_replicas.insert(g.node, round.connected);
            }
            let answer = result.map_err(|e| Failure::of(&e));
            for r in g.requests {
                let _ = r.reply.send(answer.clone());
            }
        }
        if broken {
            self.own_cluster = None;
        }
    }

    /// One round on the primary that owns `slot`: `ROLE`, the marker, `WAIT` for `wanted`.
    /// (A primary with no replica connected needs no `WAIT`; the round still asks, and
    /// `wanted` is at least 1, because the count may be stale.)
    async fn cluster_round(
        &self,
        mut conn: ClusterConnection,
        slot: Slot,
        marker: &str,
        wanted: i64,
    ) -> Result<Round> {
        let (timeout, limit) = (self.timeout, self.timeout + self.command_timeout);
        let mut pipe = redis::pipe();
        pipe.cmd("ROLE")
            .cmd("EVAL")
            .arg(CLUSTER_MARKER)
            .arg(1)
            .arg(marker)
            .cmd("WAIT")
            .arg(wanted)
            .arg(timeout.as_millis().max(1) as u64);
        let route = SingleNodeRoutingInfo::SpecificNode(Route::with_slot(slot, SlotAddr::Master));
        let replied = tokio::time::timeout(limit, conn.route_pipeline(pipe, 0, 3, route)).await;
        let values = match replied {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(error::map(e, "WAIT")),
            Err(_) => return Err(error::timeout("WAIT")),
        };
        let mut values = values.into_iter().map(Value::extract_error);
        let mut next = || -> Result<Value> {
            values
                .next()
                .unwrap_or(Ok(Value::Nil))
                .map_err(|e| error::map(e, "WAIT"))
        };
        let (role, _marker, acked) = (next()?, next()?, next()?);
        let acked: i64 = redis::from_redis_value(acked)
            .map_err(|e| Error::new(ErrorKind::Backend, format!("WAIT: unexpected reply: {e}")))?;
        let Some(connected) = replicas_of(&role) else {
            return Err(Error::new(
                ErrorKind::Connection,
                "the node WAIT ran on no longer owns the slot as a primary",
            )
            .with_retryable(true));
        };
        Ok(Round { acked, connected })
    }

    /// The handle's own cluster connection for the rounds, opened (again) when needed.
    async fn cluster_connection(&mut self) -> Result<ClusterConnection> {
        if let Some(c) = &self.own_cluster {
            return Ok(c.clone());
        }
        let Target::Cluster(client, _) = &self.target else {
            unreachable!("a cluster round without a cluster target");
        };
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| error::map(e, "connect for WAIT"))?;
        self.own_cluster = Some(conn.clone());
        Ok(conn)
    }

    /// Looks up which primary owns each slot (`CLUSTER SLOTS`) and how many replicas each has
    /// connected (its `ROLE`), on the shared connection; `connected` becomes the most any
    /// primary has (0: no primary has one, and nothing waits).
    async fn refresh_cluster(&mut self) {
        let Conn::Cluster(shared) = &self.shared else {
            return;
        };
        let mut shared = shared.clone();
        let slots = tokio::time::timeout(
            self.command_timeout,
            shared.route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
            ),
        )
        .await;
        let Ok(Ok(slots)) = slots else { return };
        let ranges: Vec<(u16, u16, String)> = crate::conn::slot_ranges(&slots)
            .into_iter()
            .map(|(start, end, host, port)| (start, end, format!("{host}:{port}")))
            .collect();
        if ranges.is_empty() {
            return;
        }
        if ranges != self.ranges {
            self.owners.clear();
            for (start, end, node) in &ranges {
                for n in *start..=*end {
                    if let Some(slot) = Slot::new(n) {
                        self.owners.insert(slot, node.clone());
                    }
                }
            }
            self.ranges = ranges;
        }
        let mut primaries: Vec<String> = self.ranges.iter().map(|(_, _, n)| n.clone()).collect();
        primaries.sort_unstable();
        primaries.dedup();
        let limit = self.command_timeout;
        let looks = primaries.iter().map(|node| {
            let mut c = shared.clone();
            let (host, port) = node.rsplit_once(':').expect("host:port");
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: host.to_string(),
                port: port.parse().unwrap_or(0),
            });
            async move {
                let role =
                    tokio::time::timeout(limit, c.route_command(redis::cmd("ROLE"), route)).await;
                match role {
                    Ok(Ok(role)) => replicas_of(&role),
                    _ => None,
                }
            }
        });
        let counts = futures::future::join_all(looks).await;
        let mut most = None;
        let mut seen = HashMap::new();
        for (node, n) in primaries.iter().zip(counts) {
            if let Some(n) = n {
                seen.insert(node.clone(), n);
                most = Some(most.map_or(n, |m: i64| m.max(n)));
            }
        }
        self.node_replicas = seen;
        if let Some(n) = most {
            self.connected.store(n, Ordering::Release);
        }
    }
}

/// The number of replicas a `ROLE` reply lists, if it comes from a primary.
fn replicas_of(role: &Value) -> Option<i64> {
    let Value::Array(parts) = role else {
        return None;
    };
    match (parts.first(), parts.get(2)) {
        (Some(Value::BulkString(r)), Some(Value::Array(replicas))) if r == b"master" => {
            Some(replicas.len() as i64)
        }
        _ => None,
    }
}
