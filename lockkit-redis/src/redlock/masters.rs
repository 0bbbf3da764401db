//! The N independent masters: one managed connection each (a master down at connect is dialled
//! again in the background once a request finds it missing), and one request sent to all of
//! them in parallel, each bounded by its own timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use lockkit_core::{Error, ErrorKind, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionInfo, FromRedisValue, ScriptInvocation};

use super::config::Settings;
use crate::conn::PubSubConn;
use crate::error;
use crate::pubsub::{keep_connected, Holder, Pushes, Subscriptions};

/// One master.
struct Master {
    addr: String,
    info: ConnectionInfo,
    conn: Mutex<Option<ConnectionManager>>,
    /// Its pub/sub connection's subscriptions (a release tells the waiter whose turn is next),
    /// and the task that brings that connection back after it dropped. Without them, waiters
    /// of this master only poll.
    subs: Mutex<Option<(Arc<Subscriptions>, tokio::task::JoinHandle<()>)>>,
    /// A dial is under way in the background: requests meanwhile count this master as failed
    /// instead of waiting for a server that may not answer.
    dialling: AtomicBool,
    /// A pub/sub dial is under way, or failed less than a second ago.
    pubsub_dialling: AtomicBool,
    /// The client was closed: a dial that ends now keeps nothing running.
    stopped: AtomicBool,
    /// The client's holder channel, heard on every pub/sub connection.
    holder: Holder,
}

impl Master {
    fn current(&self) -> Option<ConnectionManager> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Opens its connection, within `timeout`.
    async fn dial(
        &self,
        config: ConnectionManagerConfig,
        timeout: Duration,
    ) -> Result<ConnectionManager> {
        let what = format!("connect to master {}", self.addr);
        let client = redis::Client::open(self.info.clone()).map_err(|e| error::map(e, &what))?;
        let conn = match tokio::time::timeout(
            timeout,
            client.get_connection_manager_with_config(config.clone()),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(error::map(e, &what)),
            Err(_) => return Err(error::timeout(&what)),
        };
        *self.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn.clone());
        if let Err(e) = self.dial_pubsub(config, timeout).await {
            tracing::debug!(backend = "redlock", error = %e, "lockkit: no pub/sub connection");
        }
        Ok(conn)
    }

    /// Opens its pub/sub connection (RESP3, resubscribing after a reconnect), within `timeout`.
    async fn dial_pubsub(&self, config: ConnectionManagerConfig, timeout: Duration) -> Result<()> {
        let what = format!("pub/sub connect to master {}", self.addr);
        let redis = self
            .info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let info = self.info.clone().set_redis_settings(redis);
        let client = redis::Client::open(info).map_err(|e| error::map(e, &what))?;
        let pushes = Pushes::default();
        let config = config
            .set_push_sender(pushes.clone())
            .set_automatic_resubscription();
        let conn =
            match tokio::time::timeout(timeout, client.get_connection_manager_with_config(config))
                .await
            {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(error::map(e, &what)),
                Err(_) => return Err(error::timeout(&what)),
            };
        let subs = Subscriptions::new(PubSubConn::Single(conn), &pushes);
        subs.hear_holder(self.holder.clone()).await;
        let keeper = tokio::spawn(keep_connected(pushes));
        let mut slot = self.subs.lock().unwrap_or_else(|e| e.into_inner());
        if self.stopped.load(Ordering::Acquire) || slot.is_some() {
            keeper.abort();
        } else {
            *slot = Some((subs, keeper));
        }
        Ok(())
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        if let Some((_, keeper)) = self.subs.lock().unwrap_or_else(|e| e.into_inner()).take() {
            keeper.abort();
        }
    }
}

/// Whether a request may be sent again after its connection dropped: every Redlock script
/// checks its owner (or only reads) but the admin delete, which would delete a lock taken
/// meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Sent again once when its connection had dropped (a master that came back: the first
    /// request on the old connection fails and starts the reconnect, which a second one meets).
    Once,
    /// Sent once.
    Never,
}

/// The masters of one client.
pub(crate) struct Masters {
    masters: Vec<Arc<Master>>,
    config: ConnectionManagerConfig,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Masters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<&str> = self.masters.iter().map(|m| m.addr.as_str()).collect();
        f.debug_struct("Masters").field("addrs", &addrs).finish()
    }
}

impl Masters {
    /// Opens a connection to every master of `settings` in parallel. Fails unless a quorum of
    /// them answers (`Connection`, retryable; `Auth` when one refuses the credentials), or when
    /// two of them are one server (`Config`: it would count twice towards the quorum); the
    /// others are dialled again later.
    pub(crate) async fn connect(settings: &Settings, holder: Holder) -> Result<Masters> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_response_timeout(Some(settings.command_timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200));
        let masters = Masters {
            masters: settings
                .masters
                .iter()
                .map(|info| {
                    Arc::new(Master {
                        addr: info.addr().to_string(),
                        info: info.clone(),
                        conn: Mutex::new(None),
                        subs: Mutex::new(None),
                        dialling: AtomicBool::new(false),
                        pubsub_dialling: AtomicBool::new(false),
                        stopped: AtomicBool::new(false),
                        holder: holder.clone(),
                    })
                })
                .collect(),
            config,
            connect_timeout: settings.connect_timeout,
        };
        let opened = join_all(
            masters
                .masters
                .iter()
                .map(|m| masters.identify(m, settings.connect_timeout)),
        )
        .await;
        let mut ids: Vec<(&str, String)> = Vec::new();
        let mut errors = Vec::new();
        for (m, r) in masters.masters.iter().zip(opened) {
            match r {
                Ok(id) => {
                    if let Some((other, _)) = ids.iter().find(|(_, seen)| *seen == id) {
                        return Err(Error::config(format!(
                            "redlock: masters {other} and {} are one server (run_id {id}); \
                             each must be an independent server, or it would count twice \
                             towards the quorum",
                            m.addr
                        )));
                    }
                    ids.push((&m.addr, id));
                }
                Err(e) => errors.push(e),
            }
        }
        let (up, quorum) = (ids.len(), settings.quorum());
        if up < quorum {
            // A refused credential says more than a refused connection.
            errors.sort_by_key(|e| e.kind() != ErrorKind::Auth);
            let cause = errors.into_iter().next();
            let kind = match cause.as_ref().map(Error::kind) {
                Some(ErrorKind::Auth) => ErrorKind::Auth,
                _ => ErrorKind::Connection,
            };
            let e = Error::new(
                kind,
                format!(
                    "redlock: only {up} of {} masters answered; a quorum is {quorum}",
                    masters.len()
                ),
            )
            .with_retryable(kind != ErrorKind::Auth);
            return Err(match cause {
                Some(c) => e.with_source(c),
                None => e,
            });
        }
        Ok(masters)
    }

    /// Dials master `m` and asks for its `run_id`, which tells two names of one server apart
    /// from two servers.
    async fn identify(&self, m: &Master, timeout: Duration) -> Result<String> {
        let mut conn = m.dial(self.config.clone(), timeout).await?;
        // A user whose ACL forbids INFO still locks: its masters are told apart by address.
        let info = tokio::time::timeout(
            timeout,
            redis::cmd("INFO")
                .arg("server")
                .query_async::<String>(&mut conn),
        )
        .await;
        let info = match info {
            Ok(Ok(info)) => info,
            _ => String::new(),
        };
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .unwrap_or(&m.addr)
            .trim()
            .to_string())
    }

    /// How many masters there are.
    pub(crate) fn len(&self) -> usize {
        self.masters.len()
    }

    /// The subscriptions of master `i`, if it has a pub/sub connection. A master that has a
    /// command connection but none (its dial failed) is dialled again in the background, at
    /// most once a second.
    pub(crate) fn subs(&self, i: usize) -> Option<Arc<Subscriptions>> {
        let m = &self.masters[i];
        if let Some((s, _)) = m.subs.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            return Some(s.clone());
        }
        if m.current().is_some()
            && !m.stopped.load(Ordering::Acquire)
            && !m.pubsub_dialling.swap(true, Ordering::AcqRel)
        {
            let (m, config, timeout) = (m.clone(), self.config.clone(), self.connect_timeout);
            tokio::spawn(async move {
                if let Err(e) = m.dial_pubsub(config, timeout).await {
                    tracing::debug!(backend = "redlock", error = %e, "lockkit: no pub/sub connection");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                m.pubsub_dialling.store(false, Ordering::Release);
            });
        }
        None
    }

    /// Stops the tasks that keep the pub/sub connections up.
    pub(crate) fn stop(&self) {
        for m in &self.masters {
            m.stop();
        }
    }

    /// The connection of master `i`; without one, a dial starts in the background (one at a
    /// time) and the master counts as failed for this request.
    fn open(&self, i: usize) -> Result<ConnectionManager> {
        let m = &self.masters[i];
        if let Some(c) = m.current() {
            return Ok(c);
        }
        if !m.stopped.load(Ordering::Acquire) && !m.dialling.swap(true, Ordering::AcqRel) {
            let (m, config, timeout) = (m.clone(), self.config.clone(), self.connect_timeout);
            tokio::spawn(async move {
                if let Err(e) = m.dial(config, timeout).await {
                    tracing::debug!(backend = "redlock", error = %e, "lockkit: dial failed");
                }
                m.dialling.store(false, Ordering::Release);
            });
        }
        Err(Error::new(
            ErrorKind::Connection,
            format!("redlock: master {} is not connected yet", m.addr),
        ))
    }

    /// Runs `inv` on every master in parallel, each within `limit`: the answers in master
    /// order.
    pub(crate) async fn all<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
        limit: Duration,
        what: &str,
        resend: Resend,
    ) -> Vec<Result<T>> {
        join_all((0..self.len()).map(|i| self.on(i, inv, limit, what, resend))).await
    }

    /// Runs `inv` on master `i` within `limit`.
    pub(crate) async fn on<T: FromRedisValue>(
        &self,
        i: usize,
        inv: &ScriptInvocation<'_>,
        limit: Duration,
        what: &str,
        resend: Resend,
    ) -> Result<T> {
        let call = async {
            let mut conn = self.open(i)?;
            match inv.invoke_async::<T>(&mut conn).await {
                Err(e)
                    if resend == Resend::Once && (e.is_connection_dropped() || e.is_io_error()) =>
                {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    inv.invoke_async::<T>(&mut conn).await
                }
                r => r,
            }
            .map_err(|e| error::map(e, what))
        };
        match tokio::time::timeout(limit, call).await {
            Ok(r) => r,
            Err(_) => Err(error::timeout(what)),
        }
    }
}
