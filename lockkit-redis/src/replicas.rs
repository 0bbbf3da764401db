//! Replica safety: a write that must outlive a failover (an acquire, a renewal, a release) is
//! followed by Redis `WAIT`, so the lock is on the replicas before its holder relies on it, as
//! Redisson does by default (`checkLockSyncedSlaves`).
//!
//! `WAIT` blocks the connection it runs on, so it never runs on the handle's shared command
//! connection: each handle keeps one connection of its own to the primary for it, opened when
//! first needed. `WAIT` waits for the replication offset of its connection's last write, so
//! each round sends a `PUBLISH` (propagated to replicas, and it writes no key) before it: the
//! round then covers every write whose reply came before it, on any connection. Writes that ask
//! while a round is under way share the next one (a group commit), so a burst of acquires costs
//! one round trip to the replicas, not one each.
//!
//! `wait_replicas=auto` (the default): wait for the replicas connected now (`ROLE`, refreshed
//! every round and every second); it fails (`ReplicaSync`) only when replicas are connected and
//! none acknowledged within `wait_timeout`, as Redisson's check does. With no replica connected
//! nothing waits and nothing is sent. `wait_replicas=N`: an acquire needs N acknowledgements;
//! renewals and releases follow the `auto` rule (after a failover fewer replicas may be left,
//! and a held lock must not turn Lost for it). `0`: off.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::{Error, ErrorKind, Result};
use redis::aio::MultiplexedConnection;
use redis::{ConnectionInfo, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::config::{Settings, TlsFiles, WaitReplicas};
use crate::conn::Conn;
use crate::error;
use crate::sentinel::Switchable;

/// How often the number of connected replicas is looked up when nothing asks for a round.
const REFRESH: Duration = Duration::from_secs(1);

/// The channel of the marker `PUBLISH` that starts each round (nobody listens on it).
const MARKER: &str = "lockkit:replica-sync";

/// Where the handle's own connection for `WAIT` goes.
pub(crate) enum Target {
    /// One server.
    Fixed(Box<ConnectionInfo>),
    /// Whatever primary the Sentinels name now.
    Primary(Arc<Switchable>),
}

/// What one round found: replicas that acknowledged, and replicas connected.
#[derive(Clone, Copy, Debug)]
struct Round {
    acked: i64,
    connected: i64,
}

type Reply = oneshot::Sender<std::result::Result<Round, (ErrorKind, String)>>;

/// One request for a round: the replicas it waits for (`None`: those connected), and where the
/// answer goes.
type Request = (Option<u32>, Reply);

/// The replica waits of one handle.
pub(crate) struct Replicas {
    want: WaitReplicas,
    timeout: Duration,
    /// Replicas connected at the last look (-1: not known yet).
    connected: Arc<AtomicI64>,
    requests: mpsc::UnboundedSender<Request>,
    task: AbortHandle,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas")
            .field("want", &self.want)
            .field("connected", &self.connected.load(Ordering::Relaxed))
            .finish()
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Replicas {
    /// Starts the rounds of a handle (`shared`: its command connection, for `ROLE`), and looks
    /// up the connected replicas once.
    pub(crate) async fn start(settings: &Settings, shared: Conn, target: Target) -> Replicas {
        let connected = Arc::new(AtomicI64::new(-1));
        let (requests, rx) = mpsc::unbounded_channel();
        let worker = Worker {
            want: settings.wait_replicas,
            timeout: settings.wait_timeout,
            command_timeout: settings.command_timeout,
            connect_timeout: settings.connect_timeout,
            tls: settings.tls.clone(),
            connected: connected.clone(),
            shared,
            target,
            own: None,
        };
        if settings.wait_replicas != WaitReplicas::Off {
            worker.refresh().await;
        }
        let task = tokio::spawn(worker.run(rx)).abort_handle();
        Replicas {
            want: settings.wait_replicas,
            timeout: settings.wait_timeout,
            connected,
            requests,
            task,
        }
    }

    /// Whether writes wait for replicas now.
    pub(crate) fn waits(&self) -> bool {
        match self.want {
            WaitReplicas::Off => false,
            WaitReplicas::AtLeast(_) => true,
            WaitReplicas::Auto => self.connected.load(Ordering::Acquire) != 0,
        }
    }

    /// Waits until the replicas have the acquire whose reply came before this call:
    /// `ReplicaSync` when too few acknowledged in time (`wait_replicas`).
    pub(crate) async fn acquired(&self) -> Result<()> {
        let need = match self.want {
            WaitReplicas::AtLeast(n) => Some(n),
            _ => None,
        };
        self.sync("acquire", need).await
    }

    /// Waits until the replicas have the renewal or release (`what`) whose reply came before
    /// this call: `ReplicaSync` when replicas are connected and none acknowledged in time.
    pub(crate) async fn kept(&self, what: &str) -> Result<()> {
        self.sync(what, None).await
    }

    /// After a release: asks for the next round without waiting for it (the caller learns
    /// nothing from it: the lock is released on the primary either way; a release the replicas
    /// miss comes back after a failover until its lease ends).
    pub(crate) fn released(self: &Arc<Self>) {
        if self.want == WaitReplicas::Off || self.connected.load(Ordering::Acquire) == 0 {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = me.kept("release").await {
                tracing::debug!(error = %e, "lockkit: release not on the replicas");
            }
        });
    }

    async fn sync(&self, what: &str, need: Option<u32>) -> Result<()> {
        let no_replicas = self.connected.load(Ordering::Acquire) == 0;
        if self.want == WaitReplicas::Off || (need.is_none() && no_replicas) {
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        self.requests
            .send((need, tx))
            .map_err(|_| Error::closed())?;
        let round = match rx.await {
            Ok(Ok(round)) => round,
            Ok(Err((kind, message))) => {
                return Err(Error::new(kind, message).with_retryable(true));
            }
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
    tls: TlsFiles,
    connected: Arc<AtomicI64>,
    shared: Conn,
    target: Target,
    /// The connection for `WAIT`, and the Sentinel switches it was opened after.
    own: Option<(u64, MultiplexedConnection)>,
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
                    // WAIT for the most any request of the round needs.
                    let connected = self.connected.load(Ordering::Acquire).max(1);
                    let wanted = batch
                        .iter()
                        .map(|(need, _)| need.map_or(connected, i64::from))
                        .max()
                        .unwrap_or(connected);
                    let round = self.round(wanted).await.map_err(|e| (e.kind(), e.to_string()));
                    if round.is_err() {
                        self.own = None;
                    }
                    for (_, reply) in batch {
                        let _ = reply.send(round.clone());
                    }
                    refresh.reset();
                }
                _ = refresh.tick(), if self.want == WaitReplicas::Auto => self.refresh().await,
            }
        }
    }

    /// Looks up how many replicas are connected (on the shared connection: `ROLE` is quick).
    async fn refresh(&self) {
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

    /// One round on the handle's own connection: `ROLE`, the marker, `WAIT` for `wanted`.
    async fn round(&mut self, wanted: i64) -> Result<Round> {
        let (timeout, limit) = (self.timeout, self.timeout + self.command_timeout);
        let conn = self.connection().await?;
        let mut pipe = redis::pipe();
        pipe.cmd("ROLE")
            .cmd("PUBLISH")
            .arg(MARKER)
            .arg("")
            .ignore()
            .cmd("WAIT")
            .arg(wanted)
            .arg(timeout.as_millis().max(1) as u64);
        let (role, acked): (Value, i64) =
            match tokio::time::timeout(limit, pipe.query_async(conn)).await {
                Ok(r) => r.map_err(|e| error::map(e, "WAIT"))?,
                Err(_) => return Err(error::timeout("WAIT")),
            };
        let connected = replicas_of(&role).ok_or_else(|| {
            Error::new(
                ErrorKind::Connection,
                "the server WAIT ran on is no longer the primary",
            )
            .with_retryable(true)
        })?;
        self.connected.store(connected, Ordering::Release);
        Ok(Round { acked, connected })
    }

    /// The handle's own connection to the primary, opened (again) when needed.
    async fn connection(&mut self) -> Result<&mut MultiplexedConnection> {
        let (switches, info) = match &self.target {
            Target::Fixed(info) => (0, (**info).clone()),
            Target::Primary(s) => s.primary(),
        };
        if self.own.as_ref().is_some_and(|(seen, _)| *seen != switches) {
            self.own = None;
        }
        if self.own.is_none() {
            let client = crate::tls::client(info, &self.tls)?;
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.connect_timeout))
                .set_response_timeout(Some(self.timeout + self.command_timeout));
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(|e| error::map(e, "connect for WAIT"))?;
            self.own = Some((switches, conn));
        }
        Ok(&mut self.own.as_mut().expect("just set").1)
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
