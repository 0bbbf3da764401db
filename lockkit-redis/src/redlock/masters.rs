//! The N independent masters: one managed connection each, opened lazily (a master that is down
//! at connect is reached once it answers), and one request sent to all of them in parallel, each
//! bounded by its own timeout.

use std::sync::Mutex;
use std::time::Duration;

use futures::future::join_all;
use lockkit_core::{Error, ErrorKind, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionInfo, FromRedisValue, ScriptInvocation};

use super::config::Settings;
use crate::error;

/// One master.
struct Master {
    addr: String,
    info: ConnectionInfo,
    conn: Mutex<Option<ConnectionManager>>,
    /// Held while a connection is being opened: requests meanwhile count this master as failed
    /// instead of queueing behind a server that may not answer.
    opening: tokio::sync::Mutex<()>,
}

/// The masters of one client.
pub(crate) struct Masters {
    masters: Vec<Master>,
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
    /// them answers (`Connection`, retryable; `Auth` when one refuses the credentials); the
    /// others are reached later, when a request finds them up.
    pub(crate) async fn connect(settings: &Settings) -> Result<Masters> {
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
                .map(|info| Master {
                    addr: info.addr().to_string(),
                    info: info.clone(),
                    conn: Mutex::new(None),
                    opening: tokio::sync::Mutex::new(()),
                })
                .collect(),
            config,
            connect_timeout: settings.connect_timeout,
        };
        let opened = join_all((0..masters.len()).map(|i| masters.open(i))).await;
        let up = opened.iter().filter(|r| r.is_ok()).count();
        if up < settings.quorum() {
            // A refused credential says more than a refused connection.
            let first = opened.into_iter().filter_map(|r| r.err());
            let mut errors: Vec<Error> = first.collect();
            errors.sort_by_key(|e| e.kind() != ErrorKind::Auth);
            let cause = errors.into_iter().next();
            let e = Error::new(
                cause
                    .as_ref()
                    .map_or(ErrorKind::Connection, |e| match e.kind() {
                        ErrorKind::Auth => ErrorKind::Auth,
                        _ => ErrorKind::Connection,
                    }),
                format!(
                    "redlock: only {up} of {} masters answered; a quorum is {}",
                    masters.len(),
                    settings.quorum()
                ),
            );
            return Err(match cause {
                Some(c) => {
                    let retryable = c.is_retryable();
                    e.with_source(c).with_retryable(retryable)
                }
                None => e,
            });
        }
        Ok(masters)
    }

    /// How many masters there are.
    pub(crate) fn len(&self) -> usize {
        self.masters.len()
    }

    /// The connection of master `i`, opened now if it has none.
    async fn open(&self, i: usize) -> Result<ConnectionManager> {
        let m = &self.masters[i];
        if let Some(c) = m.conn.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(c);
        }
        let Ok(_opening) = m.opening.try_lock() else {
            return Err(Error::new(
                ErrorKind::Connection,
                format!("redlock: master {} is being connected", m.addr),
            ));
        };
        if let Some(c) = m.conn.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(c);
        }
        let client =
            redis::Client::open(m.info.clone()).map_err(|e| error::map(e, "client setup"))?;
        let opened = tokio::time::timeout(
            self.connect_timeout,
            client.get_connection_manager_with_config(self.config.clone()),
        )
        .await;
        let conn = match opened {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(error::map(e, &format!("connect to master {}", m.addr))),
            Err(_) => return Err(error::timeout(&format!("connect to master {}", m.addr))),
        };
        *m.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// Runs `inv` on every master in parallel, each within `limit`: the answers in master
    /// order.
    pub(crate) async fn all<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
        limit: Duration,
        what: &str,
    ) -> Vec<Result<T>> {
        join_all((0..self.len()).map(|i| self.on(i, inv, limit, what))).await
    }

    /// Runs `inv` on master `i` within `limit`.
    pub(crate) async fn on<T: FromRedisValue>(
        &self,
        i: usize,
        inv: &ScriptInvocation<'_>,
        limit: Duration,
        what: &str,
    ) -> Result<T> {
        let call = async {
            let mut conn = self.open(i).await?;
            match inv.invoke_async::<T>(&mut conn).await {
                // A master that came back: the first request on the old connection fails and
                // starts the reconnect, which a second one meets. Every Redlock script may run
                // twice (each checks its owner).
                Err(e) if e.is_connection_dropped() || e.is_io_error() => {
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
