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
//! for it). `0`: off. Never in cluster mode, where `PUBLISH` does not go through replication.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::{Error, ErrorKind, Result};
use redis::aio::MultiplexedConnection;
use redis::{ConnectionInfo, RedisError, Value};
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
#[derive(Clone)]
pub(crate) enum Target {
    /// One server.
    Fixed(Box<ConnectionInfo>),
    /// Whatever primary the Sentinels name now.
    Primary(Arc<Switchable>),
}

impl Target {
    /// The Sentinel epoch (switches so far; always 0 for one server) and how to reach the
    /// primary of it.
    fn primary(&self) -> (u64, ConnectionInfo) {
        match self {
            Target::Fixed(info) => (0, (**info).clone()),
            Target::Primary(s) => s.primary(),
        }
    }
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
        let connected = Arc::new(AtomicI64::new(-1));
        let refused = Arc::new(AtomicBool::new(false));
        let want = settings.wait_replicas;
        if want != WaitReplicas::Off {
            let mut conn = shared.clone();
            let mut probe = redis::pipe();
            probe.cmd("ROLE").cmd("WAIT").arg(0).arg(0).ignore();
            let looked = tokio::time::timeout(
                settings.command_timeout,
                probe.query_async::<(Value,)>(&mut conn),
            )
            .await;
            match looked {
                Ok(Ok((role,))) => {
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
        };
        let task = tokio::spawn(worker.run(rx)).abort_handle();
        Ok(Replicas {
            want,
            timeout: settings.wait_timeout,
            connected,
            refused,
            epochs,
            requests,
            task,
        })
    }

    /// Stops the rounds (the handle is closed); later waits fail with `Closed`.
    pub(crate) fn stop(&self) {
        self.task.abort();
    }

    /// The Sentinel epoch now: take it before sending a write that will be waited for.
    pub(crate) fn epoch(&self) -> u64 {
        self.epochs.primary().0
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

    /// Waits until the replicas have the acquire sent in `epoch` whose reply came before this
    /// call: `ReplicaSync` when too few acknowledged in time (`wait_replicas`).
    pub(crate) async fn acquired(&self, epoch: u64) -> Result<()> {
        let need = match self.want {
            WaitReplicas::AtLeast(n) => Some(n),
            _ => None,
        };
        self.sync("acquire", need, epoch).await
    }

    /// Waits until the replicas have the renewal, extend or release (`what`) sent in `epoch`:
    /// `ReplicaSync` when replicas are connected and none acknowledged in time.
    pub(crate) async fn kept(&self, what: &str, epoch: u64) -> Result<()> {
        self.sync(what, None, epoch).await
    }

    async fn sync(&self, what: &str, need: Option<u32>, epoch: u64) -> Result<()> {
        let no_replicas = self.connected.load(Ordering::Acquire) == 0;
        if !self.waits() || (need.is_none() && no_replicas) {
            return Ok(());
        }
        let (reply, rx) = oneshot::channel();
        let request = Request { need, epoch, reply };
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
    tls: TlsFiles,
    connected: Arc<AtomicI64>,
    refused: Arc<AtomicBool>,
    shared: Conn,
    target: Target,
    /// The connection for `WAIT`, and the Sentinel epoch of the primary it goes to.
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
                    self.serve(batch).await;
                    refresh.reset();
                }
                _ = refresh.tick(), if self.want == WaitReplicas::Auto => self.refresh().await,
            }
        }
    }

    /// One round for `batch`: `WAIT` for the most any request needs, then each request's
    /// answer (a request of an earlier epoch than the primary the round ran on gets an error).
    async fn serve(&mut self, batch: Vec<Request>) {
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
        let (epoch, info) = self.target.primary();
        if self.own.as_ref().is_some_and(|(seen, _)| *seen != epoch) {
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
            self.own = Some((epoch, conn));
        }
        let (epoch, conn) = self.own.as_mut().expect("just set");
        Ok((*epoch, conn))
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
