//! The connections of one client, whatever the deployment: one server, a Sentinel-managed
//! primary, or a Redis Cluster. [`Conn`] carries commands and scripts, [`PubSubConn`] the
//! wake-up subscriptions; both are cheap to clone.

use std::sync::Arc;

use lockkit_core::Result;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, RedisFuture, Value};

use crate::config::{manager_config, tcp_settings, Settings, Topology};
use crate::error;
use crate::push::PushSink;
use crate::sentinel::{self, Switchable};

/// The command connection.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server, reconnecting to the same address.
    Single(ConnectionManager),
    /// The primary Sentinel names, replaced when it changes.
    Sentinel(Arc<Switchable>),
    /// A cluster client: routes each command to the node owning its keys' slot and follows
    /// `MOVED` / `ASK` and topology changes.
    Cluster(ClusterConnection),
}

impl Conn {
    /// Runs a script with `timeout` as an outer bound.
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &self,
        inv: &redis::ScriptInvocation<'_>,
        timeout: std::time::Duration,
        what: &str,
    ) -> Result<T> {
        let mut conn = self.clone();
        match tokio::time::timeout(timeout, inv.invoke_async(&mut conn)).await {
            Ok(r) => r.map_err(|e| error::map(e, what)),
            Err(_) => Err(error::timeout(what)),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Sentinel(s) => {
                let s = s.clone();
                Box::pin(async move {
                    let (seen, mut c) = s.current_seen();
                    let r = c.req_packed_command(cmd).await;
                    s.check(&r);
                    match &r {
                        Err(e) => match s.switched_after(e, seen).await {
                            Some(mut c) => c.req_packed_command(cmd).await,
                            None => r,
                        },
                        Ok(_) => r,
                    }
                })
            }
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(s) => {
                let s = s.clone();
                Box::pin(async move {
                    let (seen, mut c) = s.current_seen();
                    let r = c.req_packed_commands(pipeline, offset, count).await;
                    s.check(&r);
                    match &r {
                        Err(e) => match s.switched_after(e, seen).await {
                            Some(mut c) => c.req_packed_commands(pipeline, offset, count).await,
                            None => r,
                        },
                        Ok(_) => r,
                    }
                })
            }
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Sentinel(s) => s.current().get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The pub/sub connection (RESP3; messages go to the push channel given at connect).
#[derive(Clone)]
pub(crate) enum PubSubConn {
    /// One server; redis-rs resubscribes after a reconnect.
    Single(ConnectionManager),
    /// Follows the primary; resubscribes on the new one after a switch.
    Sentinel(Arc<Switchable>),
    /// Plain `SUBSCRIBE`, routed by redis-rs to the node owning the channel's slot and
    /// resubscribed after reconnects and slot moves. The scripts' plain `PUBLISH` reaches every
    /// node of the cluster, so any node would do (see `connect`).
    Cluster(ClusterConnection),
}

impl PubSubConn {
    /// Subscribes to `channel`.
    pub(crate) async fn subscribe(&self, channel: &str) -> redis::RedisResult<()> {
        match self {
            PubSubConn::Single(c) => c.clone().subscribe(channel).await,
            PubSubConn::Sentinel(s) => s.subscribe(channel).await,
            PubSubConn::Cluster(c) => c.clone().subscribe(channel).await,
        }
    }

    /// A `PING` on the pub/sub connection (which reconnects it, and resubscribes, if it had
    /// dropped).
    pub(crate) async fn ping(&self) -> redis::RedisResult<()> {
        let ping = redis::cmd("PING");
        match self {
            PubSubConn::Single(c) => ping.query_async(&mut c.clone()).await,
            PubSubConn::Sentinel(s) => ping.query_async(&mut s.current()).await,
            PubSubConn::Cluster(c) => ping.query_async(&mut c.clone()).await,
        }
    }

    /// Unsubscribes from `channel`.
    pub(crate) async fn unsubscribe(&self, channel: &str) -> redis::RedisResult<()> {
        match self {
            PubSubConn::Single(c) => c.clone().unsubscribe(channel).await,
            PubSubConn::Sentinel(s) => s.unsubscribe(channel).await,
            PubSubConn::Cluster(c) => c.clone().unsubscribe(channel).await,
        }
    }
}

/// The connections of one client, and for Sentinel the task that follows the primary.
pub(crate) struct Connections {
    pub(crate) conn: Conn,
    pub(crate) pubsub: PubSubConn,
    pub(crate) follower: Option<tokio::task::JoinHandle<()>>,
}

/// Opens the command and pub/sub connections `settings` ask for; pub/sub messages go to
/// `pushes`.
pub(crate) async fn connect(settings: &Settings, pushes: impl PushSink) -> Result<Connections> {
    match &settings.topology {
        Topology::Single => {
            let client = crate::tls::client(settings.info.clone(), settings.tls.as_ref())?;
            let conn = client
                .get_connection_manager_with_config(manager_config(settings))
                .await
                .map_err(|e| error::map(e, "connect"))?;
            let pubsub_client =
                crate::tls::client(settings.pubsub_info.clone(), settings.tls.as_ref())?;
            let pubsub = pubsub_client
                .get_connection_manager_with_config(
                    manager_config(settings)
                        .set_push_sender(pushes)
                        .set_automatic_resubscription(),
                )
                .await
                .map_err(|e| error::map(e, "pub/sub connect"))?;
            Ok(Connections {
                conn: Conn::Single(conn),
                pubsub: PubSubConn::Single(pubsub),
                follower: None,
            })
        }
        Topology::Sentinel { sentinels, master } => {
            let (conn, pubsub, follower) =
                sentinel::connect(settings, sentinels, master, pushes).await?;
            Ok(Connections {
                conn: Conn::Sentinel(conn),
                pubsub: PubSubConn::Sentinel(pubsub),
                follower: Some(follower),
            })
        }
        Topology::Cluster { nodes } => {
            // Wake-ups use plain PUBLISH / SUBSCRIBE, not sharded SPUBLISH / SSUBSCRIBE. A
            // cluster forwards a PUBLISH to every node over its bus, so a subscriber on any node
            // hears it, and the scripts stay the same in every topology (and stay
            // wire-compatible with Redisson, whose lock scripts PUBLISH too). Sharded pub/sub
            // would keep the message on the slot's own shard, which is cheaper in a large
            // cluster, but needs Redis 7 and a subscription that moves with its slot. Lock
            // releases are rare next to the commands they wake, so the broadcast is cheap here.
            let conn = cluster_builder(settings, nodes, false)
                .build()
                .map_err(|e| error::map(e, "cluster client setup"))?
                .get_async_connection()
                .await
                .map_err(|e| error::map(e, "connect"))?;
            let pubsub = cluster_builder(settings, nodes, true)
                .push_sender(pushes)
                .build()
                .map_err(|e| error::map(e, "cluster client setup"))?
                .get_async_connection()
                .await
                .map_err(|e| error::map(e, "pub/sub connect"))?;
            Ok(Connections {
                conn: Conn::Cluster(conn),
                pubsub: PubSubConn::Cluster(pubsub),
                follower: None,
            })
        }
    }
}

/// The cluster client builder for the seed `nodes` (`resp3`: for the pub/sub connection).
pub(crate) fn cluster_builder(
    settings: &Settings,
    nodes: &[(String, u16)],
    resp3: bool,
) -> redis::cluster::ClusterClientBuilder {
    let mut b = redis::cluster::ClusterClientBuilder::new(
        nodes
            .iter()
            .map(|(h, p)| redis::ConnectionAddr::Tcp(h.clone(), *p))
            .collect::<Vec<_>>(),
    )
    .connection_timeout(settings.connect_timeout)
    .response_timeout(settings.command_timeout)
    .tcp_settings(tcp_settings())
    // Retries follow MOVED / ASK during resharding and failover. They also resend a
    // command whose connection dropped after it was sent, which may have run, so
    // every script is safe to run twice. An acquire whose first run took the lock,
    // share or permits finds its own hold and takes it up again: one hold, its lease
    // from the resend, a new token (the first reply was never seen); it never
    // queues or registers a writer's intent twice, and never answers busy. A
    // reentry sends the hold count it makes, so it counts once. Releases (unlock
    // latches), renewals and leaves are idempotent.
    .retries(2);
    let rs = settings.info.redis_settings();
    if let Some(u) = rs.username() {
        b = b.username(u);
    }
    if let Some(p) = rs.password() {
        b = b.password(p);
    }
    if resp3 {
        b = b.use_protocol(redis::ProtocolVersion::RESP3);
    }
    b
}

/// The slot ranges of a `CLUSTER SLOTS` reply (`[[start, end, [host, port, id], replicas…], …]`)
/// and the primary of each, sorted: `(start, end, host, port)`.
pub(crate) fn slot_ranges(reply: &Value) -> Vec<(u16, u16, String, u16)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let int = |v: Option<&Value>| v.and_then(|v| redis::from_redis_value_ref::<u16>(v).ok());
        let (Some(start), Some(end), Some(Value::Array(primary))) =
            (int(parts.first()), int(parts.get(1)), parts.get(2))
        else {
            continue;
        };
        let host: Option<String> = primary
            .first()
            .and_then(|v| redis::from_redis_value_ref(v).ok());
        if let (Some(host), Some(port)) = (host, int(primary.get(1))) {
            out.push((start, end, host, port));
        }
    }
    out.sort();
    out
}
