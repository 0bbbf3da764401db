//! The connection pool: one etcd client per endpoint, explicit failover, per-request timeouts
//! and the mapping of etcd-client errors to lockkit's error kinds.
//!
//! etcd-client load-balances over its endpoints but never fails over by itself: a request routed
//! to a dead member fails, and one routed to a hung member waits until its timeout. So lockkit
//! keeps one client per endpoint, sends every request to the current one, and on a connection
//! error or a timeout moves to the next endpoint. Idempotent requests (reads, and lockkit's own
//! compare-guarded transactions) are retried on the next endpoint, once per endpoint.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, TlsOptions, Txn, TxnOp};
use lockkit_core::{Error, ErrorKind, Result};

/// One client per endpoint, a current index and the per-request timeout.
pub(crate) struct Pool {
    clients: Vec<(String, Client)>,
    /// Per endpoint, a client whose requests require a leader, for the watch streams only
    /// (opened on first use): a member cut off from the quorum ends them instead of keeping
    /// them open and silent. Other requests keep working through an election.
    watchers: Vec<tokio::sync::OnceCell<Client>>,
    /// Per endpoint, its watch client's logins (see [`relogin_watcher`](Pool::relogin_watcher));
    /// only with a user.
    logins: Option<Vec<std::sync::Mutex<Login>>>,
    options: ConnectOptions,
    connect_timeout: Duration,
    current: AtomicUsize,
    /// Counts failovers, so that long-lived streams (the lock watches) follow them.
    moves: tokio::sync::watch::Sender<u64>,
    timeout: Duration,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endpoints: Vec<&str> = self.clients.iter().map(|(e, _)| e.as_str()).collect();
        f.debug_struct("Pool")
            .field("endpoints", &endpoints)
            .field("current", &self.current.load(Ordering::Relaxed))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// How often at most a watch client logs in again after a refusal (each login costs the server
/// a password hash).
const RELOGIN_EVERY: Duration = Duration::from_secs(10);

/// One endpoint's watch client's logins after the first: how many, and when the last was.
#[derive(Debug, Default)]
struct Login {
    generation: u64,
    at: Option<tokio::time::Instant>,
}

fn lock_login(m: &std::sync::Mutex<Login>) -> std::sync::MutexGuard<'_, Login> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// Builds one client per endpoint. etcd-client connects lazily, so nothing fails here for a
    /// dead endpoint except an authentication round trip when `user` is set; [`Pool::probe`]
    /// checks that at least one endpoint answers.
    pub(crate) async fn connect(
        endpoints: &[String],
        user: Option<(String, String)>,
        tls: Option<TlsOptions>,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Result<Pool> {
        let mut clients = Vec::new();
        let mut last_err = None;
        let mut options = ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            .with_keep_alive(Duration::from_secs(5), timeout)
            .with_tcp_keepalive(Duration::from_secs(10));
        if let Some((u, p)) = &user {
            // etcd forgets a token unused for `--auth-token-ttl` (5 minutes by default): a
            // request it refuses as `invalid auth token` logs in again and is sent once more,
            // as etcd's Go client does.
            options = options
                .with_user(u.clone(), p.clone())
                .with_auto_token_refresh(true);
        }
        if let Some(tls) = &tls {
            options = options.with_tls(tls.clone());
        }
        for ep in endpoints {
            let opts = options.clone();
            match tokio::time::timeout(connect_timeout, Client::connect([ep.as_str()], Some(opts)))
                .await
            {
                Ok(Ok(c)) => clients.push((ep.clone(), c)),
                Ok(Err(e)) => {
                    let err = map_err(e, "connect");
                    if err.kind() == ErrorKind::Auth || err.kind() == ErrorKind::Config {
                        return Err(err);
                    }
                    last_err = Some(err);
                }
                Err(_) => {
                    last_err = Some(Error::new(
                        ErrorKind::Connection,
                        format!("connecting to etcd at {ep} timed out"),
                    ))
                }
            }
        }
        if clients.is_empty() {
            return Err(last_err
                .unwrap_or_else(|| Error::config("an etcd URL needs at least one endpoint")));
        }
        Ok(Pool {
            watchers: clients
                .iter()
                .map(|_| tokio::sync::OnceCell::new())
                .collect(),
            logins: user.map(|_| clients.iter().map(|_| Default::default()).collect()),
            clients,
            options,
            connect_timeout,
            current: AtomicUsize::new(0),
            moves: tokio::sync::watch::channel(0).0,
            timeout,
        })
    }

    /// The per-request timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The current client and its index.
    pub(crate) fn current(&self) -> (usize, Client) {
        let i = self.current.load(Ordering::Acquire) % self.clients.len();
        (i, self.clients[i].1.clone())
    }

    /// The current endpoint's client for watch streams (it requires a leader), and its index.
    pub(crate) async fn current_watcher(&self) -> Result<(usize, Client)> {
        let i = self.current.load(Ordering::Acquire) % self.clients.len();
        let endpoint = self.clients[i].0.as_str();
        let opts = self.options.clone().with_require_leader(true);
        let client = self.watchers[i]
            .get_or_try_init(|| async {
                match tokio::time::timeout(
                    self.connect_timeout,
                    Client::connect([endpoint], Some(opts)),
                )
                .await
                {
                    Ok(r) => r.map_err(|e| map_err(e, "connect for watches")),
                    Err(_) => Err(Error::new(
                        ErrorKind::Connection,
                        format!("connecting to etcd at {endpoint} timed out"),
                    )),
                }
            })
            .await?;
        Ok((i, client.clone()))
    }

    /// Which login of endpoint `idx`'s watch client a stream opened now carries the token of:
    /// noted before the open, for [`relogin_watcher`](Pool::relogin_watcher).
    pub(crate) fn watcher_login(&self, idx: usize) -> u64 {
        self.logins
            .as_ref()
            .map_or(0, |l| lock_login(&l[idx]).generation)
    }

    /// A watch create on endpoint `idx`'s watch stream, opened with login `opened` (see
    /// [`watcher_login`](Pool::watcher_login)), was refused for authorization: whether the
    /// stream is to be opened again with a newer token. etcd forgets a token unused for
    /// `--auth-token-ttl`, and checks a stream's at each create. Yes when the watch client
    /// logged in again since the stream opened, or does so now (at most once every
    /// [`RELOGIN_EVERY`]). No when the handle has no user, the login fails, or the stream
    /// already carries a token that recent: the refusal stands then (the user may not read the
    /// key).
    pub(crate) async fn relogin_watcher(&self, idx: usize, opened: u64) -> bool {
        let (Some(logins), Some(client)) = (&self.logins, self.watchers[idx].get()) else {
            return false;
        };
        {
            let login = lock_login(&logins[idx]);
            if login.generation != opened {
                return true;
            }
            if login
                .at
                .is_some_and(|at| tokio::time::Instant::now() < at + RELOGIN_EVERY)
            {
                return false;
            }
        }
        match tokio::time::timeout(self.timeout, client.refresh_token()).await {
            Ok(Ok(())) => {
                let mut login = lock_login(&logins[idx]);
                if login.generation == opened {
                    login.generation += 1;
                }
                login.at = Some(tokio::time::Instant::now());
                true
            }
            Ok(Err(e)) => {
                tracing::debug!(backend = "etcd", error = %e, "lockkit: cannot log the watch client in again");
                false
            }
            Err(_) => false,
        }
    }

    /// Moves to the next endpoint if `failed` is still the current one.
    pub(crate) fn failed(&self, failed: usize) {
        if self.clients.len() > 1 {
            let next = (failed + 1) % self.clients.len();
            if self
                .current
                .compare_exchange(failed, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                tracing::warn!(
                    backend = "etcd",
                    from = %self.clients[failed].0,
                    to = %self.clients[next].0,
                    "lockkit: endpoint failed; failing over"
                );
                lockkit_core::telemetry::reconnected("etcd");
                self.moves.send_modify(|n| *n += 1);
            }
        }
    }

    /// Changes whenever the pool fails over to another endpoint.
    pub(crate) fn moves(&self) -> tokio::sync::watch::Receiver<u64> {
        self.moves.subscribe()
    }

    /// Runs one request on the current endpoint with the request timeout. A connection error or
    /// a timeout moves to the next endpoint; when `idempotent`, the request is retried there, at
    /// most once per endpoint.
    pub(crate) async fn run<T, F, Fut>(
        &self,
        what: &'static str,
        idempotent: bool,
        mut f: F,
    ) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let attempts = if idempotent { self.clients.len() } else { 1 };
        let mut tries = 0;
        loop {
            tries += 1;
            let (idx, client) = self.current();
            let err = match tokio::time::timeout(self.timeout, f(client)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => map_err(e, what),
                Err(_) => Error::new(
                    ErrorKind::Timeout,
                    format!("etcd {what} did not answer within {:?}", self.timeout),
                ),
            };
            if matches!(err.kind(), ErrorKind::Connection | ErrorKind::Timeout) {
                self.failed(idx);
                if tries < attempts {
                    continue;
                }
            }
            return Err(err);
        }
    }

    /// Revokes lease `id` (deleting every key on it); one already gone counts as revoked.
    pub(crate) async fn revoke_lease(&self, id: i64) -> Result<()> {
        let r = self
            .run("lease revoke", true, move |mut c| async move {
                c.lease_revoke(id).await
            })
            .await;
        match r {
            Err(e) if !is_lease_not_found(&e) => Err(e),
            _ => Ok(()),
        }
    }

    /// Deletes `key` only while its create revision is `rev`. Returns whether it deleted.
    ///
    /// A compare that fails on a resend counts as deleted when an earlier try may have deleted
    /// the key and its answer been lost (it timed out, or its connection failed other than by a
    /// refusal): that incarnation of the key is gone either way. Answering "not deleted" would
    /// fail a release that succeeded with `LockLost`, and send an admin's force-unlock on to
    /// delete the next holder's key too.
    pub(crate) async fn delete_if_created(&self, key: &[u8], rev: i64) -> Result<bool> {
        let k = key.to_vec();
        let maybe_applied = AtomicBool::new(false);
        let resp = self
            .run("delete a lock key", true, |mut c| {
                let txn = Txn::new()
                    .when([Compare::create_revision(k.clone(), CompareOp::Equal, rev)])
                    .and_then([TxnOp::delete(k.clone(), None)]);
                let maybe_applied = &maybe_applied;
                async move {
                    // Set unless the try ends with an answer or a refusal: a try cut by the
                    // timeout drops this future with the flag set.
                    let unsure = SetOnDrop(maybe_applied);
                    let r = c.txn(txn).await;
                    std::mem::forget(unsure);
                    if matches!(&r, Err(e) if !is_refusal(e)) {
                        maybe_applied.store(true, Ordering::Relaxed);
                    }
                    r
                }
            })
            .await?;
        Ok(resp.succeeded() || maybe_applied.load(Ordering::Relaxed))
    }

    /// Checks that some endpoint answers (etcd-client "connects" to closed ports).
    pub(crate) async fn probe(&self) -> Result<()> {
        self.run("probe", true, |mut c| async move {
            c.get(
                "lockkit-probe",
                Some(etcd_client::GetOptions::new().with_count_only()),
            )
            .await
        })
        .await
        .map(drop)
    }
}

/// Sets its flag when dropped (see [`Pool::delete_if_created`]).
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Whether the request certainly never reached the server: its connection was refused.
fn is_refusal(e: &etcd_client::Error) -> bool {
    inner_error(e)
        .and_then(lockkit_core::find_source::<std::io::Error>)
        .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
}

/// Whether TLS refused the connection (by the core's rule, `tls_probe::refusal_in`): the
/// server's certificate is not trusted (`tls_ca`), the server rejected ours (`tls_cert`,
/// `tls_key`), or the two sides cannot agree. Retrying cannot fix that. The rustls error sits in
/// the chain of tonic's error; etcd-client's own error names no source, so this starts below it.
fn is_tls_refusal(e: &etcd_client::Error) -> bool {
    inner_error(e).is_some_and(|inner| lockkit_core::tls_probe::refusal_in(inner).is_some())
}

/// The error an etcd-client error wraps: its own names no source, so a walk down the chain
/// starts here.
fn inner_error(e: &etcd_client::Error) -> Option<&(dyn std::error::Error + 'static)> {
    use etcd_client::Error as E;
    match e {
        E::TransportError(t) => Some(t),
        E::GRpcStatus(s) => Some(s),
        E::IoError(io) => Some(io),
        _ => None,
    }
}

/// Maps an etcd-client error to lockkit's kinds, using the gRPC status code (and etcd's
/// message for authentication failures, which etcd reports as `InvalidArgument`).
pub(crate) fn map_err(e: etcd_client::Error, what: &str) -> Error {
    use etcd_client::Error as E;
    let (kind, retryable) = match &e {
        _ if is_tls_refusal(&e) => (ErrorKind::Auth, false),
        E::GRpcStatus(s) => {
            let msg = s.message();
            if msg.contains("authentication failed")
                || msg.contains("invalid auth token")
                || msg.contains("user name is empty")
                || msg.contains("permission denied")
            {
                (ErrorKind::Auth, false)
            } else {
                // tonic::Code is a fieldless enum with the gRPC numbering.
                match s.code() as i32 {
                    1 | 2 | 10 | 14 => (ErrorKind::Connection, true),
                    4 => (ErrorKind::Timeout, true),
                    7 | 16 => (ErrorKind::Auth, false),
                    8 => (ErrorKind::Backend, true),
                    _ => (ErrorKind::Backend, false),
                }
            }
        }
        E::TransportError(_) | E::IoError(_) => (ErrorKind::Connection, true),
        E::WatchError(_) | E::LeaseKeepAliveError(_) => (ErrorKind::Connection, true),
        E::InvalidUri(_) | E::InvalidArgs(_) | E::EndpointError(_) => (ErrorKind::Config, false),
        _ => (ErrorKind::Backend, false),
    };
    Error::new(kind, format!("etcd {what} failed"))
        .with_retryable(retryable)
        .with_source(e)
}

/// Whether `e` is etcd saying that a lease does not exist (expired or revoked): the server's
/// `NotFound` status (which our calls get for nothing but a lease); the same error passed on by
/// `etcd grpc-proxy`, which loses its code (`Unknown`) but keeps etcd's message; or
/// etcd-client's own error for a keepalive answered with no time left.
pub(crate) fn is_lease_not_found(e: &Error) -> bool {
    use etcd_client::Error as E;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        match err.downcast_ref::<E>() {
            // tonic::Code is a fieldless enum with the gRPC numbering: 5 is NotFound, 2
            // Unknown.
            Some(E::GRpcStatus(s)) => {
                return match s.code() as i32 {
                    5 => true,
                    2 => s.message() == "etcdserver: requested lease not found",
                    _ => false,
                }
            }
            Some(E::LeaseKeepAliveError(why)) => return why == "lease not found",
            Some(_) => return false,
            None => next = err.source(),
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request to a port nobody listens on is a refusal (it never reached a server); a
    /// request cut by a timeout is not told apart here, and counts as one that may have.
    #[tokio::test]
    async fn a_refused_connection_is_a_refusal() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let opts = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
        let mut c = Client::connect([format!("127.0.0.1:{port}")], Some(opts))
            .await
            .unwrap();
        let e = c.get("k", None).await.unwrap_err();
        assert!(is_refusal(&e), "{e:?}");
        let other = etcd_client::Error::InvalidArgs("x".into());
        assert!(!is_refusal(&other));
    }
}
