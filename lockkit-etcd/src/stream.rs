//! What every long-lived watch stream shares: opening it, sending creates and cancels on it,
//! listening to one life of it (progress checks or probes, failover), and the error for a watch
//! etcd cancelled.

use std::sync::Arc;

use etcd_client::{Client, WatchFilterType, WatchOptions, WatchStream};
use lockkit_core::{Error, ErrorKind, Result};
use tokio::sync::{mpsc, watch};
use tokio::time::{Duration, Instant};

use crate::client::Pool;
use crate::key_watch::Cmd;

/// What a watch stream's listener heard.
pub(crate) enum Heard {
    Message(etcd_client::WatchResponse),
    /// A narrow watch's registry asks for a create or cancel.
    Command(Cmd),
    /// The pool moved to another endpoint: the stream follows.
    Moved,
    /// The stream was silent for a command timeout, and is probed by its owner (see
    /// [`Listen::probe`]): any answer within another keeps it.
    Quiet,
}

/// Listens to one life of a watch stream: a stream that says nothing for a command timeout is
/// asked for a progress report and given up (and the pool fails over) when none comes within
/// another; a stream that broke or ended (a member that lost its leader ends it) is resumed on
/// the next endpoint.
pub(crate) struct Listen<'a> {
    pool: &'a Arc<Pool>,
    idx: usize,
    moves: watch::Receiver<u64>,
    heard: Instant,
    asked: bool,
    idle: bool,
    probe: bool,
}

impl<'a> Listen<'a> {
    pub(crate) fn new(pool: &'a Arc<Pool>, idx: usize, moves: watch::Receiver<u64>) -> Listen<'a> {
        Listen {
            pool,
            idx,
            moves,
            heard: Instant::now(),
            asked: false,
            idle: false,
            probe: false,
        }
    }

    /// A silent stream is probed by its owner (on [`Heard::Quiet`]) instead of asked for a
    /// progress report: etcd's gRPC proxy answers no progress request.
    pub(crate) fn probe(&mut self) {
        self.probe = true;
    }

    /// Whether nothing is watched on the stream: etcd answers no progress request then (3.5
    /// sends its report through a watch), so the silence check pauses, and starts afresh when
    /// something is watched again.
    pub(crate) fn idle(&mut self, idle: bool) {
        if self.idle && !idle {
            self.heard = Instant::now();
            self.asked = false;
        }
        self.idle = idle;
    }

    pub(crate) async fn next(
        &mut self,
        stream: &mut etcd_client::WatchStream,
        mut cmds: Option<&mut mpsc::UnboundedReceiver<Cmd>>,
    ) -> Result<Heard> {
        let (pool, idx, limit) = (self.pool, self.idx, self.pool.timeout());
        loop {
            let quiet_until = self.heard + limit * if self.asked { 2 } else { 1 };
            let msg = tokio::select! {
                msg = stream.message() => msg,
                cmd = async { cmds.as_mut().expect("checked").recv().await }, if cmds.is_some() => {
                    // Every sender gone: the registry was dropped.
                    return Ok(cmd.map_or(Heard::Moved, Heard::Command));
                }
                _ = tokio::time::sleep_until(quiet_until), if !self.idle => {
                    if self.asked {
                        pool.failed(idx);
                        return Err(Error::new(
                            ErrorKind::Timeout,
                            format!("the etcd watch stayed silent for {:?}", limit * 2),
                        ));
                    }
                    if self.probe {
                        self.asked = true;
                        return Ok(Heard::Quiet);
                    }
                    stream
                        .request_progress()
                        .await
                        .map_err(|e| crate::client::map_err(e, "watch progress"))?;
                    self.asked = true;
                    continue;
                }
                _ = self.moves.changed() => {
                    // Others found an endpoint failing: follow them if it was ours.
                    if pool.current().0 != idx {
                        return Ok(Heard::Moved);
                    }
                    continue;
                }
            };
            self.heard = Instant::now();
            self.asked = false;
            let msg = msg.map_err(|e| {
                pool.failed(idx);
                crate::client::map_err(e, "watch")
            })?;
            let Some(r) = msg else {
                pool.failed(idx);
                return Err(Error::new(ErrorKind::Connection, "etcd watch stream ended"));
            };
            return Ok(Heard::Message(r));
        }
    }
}

/// Opens a watch stream on endpoint `idx`'s `client` with its first create; an endpoint that
/// fails to open one is marked failed.
pub(crate) async fn open(
    pool: &Pool,
    idx: usize,
    client: &mut Client,
    key: Vec<u8>,
    opts: WatchOptions,
) -> Result<WatchStream> {
    match tokio::time::timeout(pool.timeout(), client.watch(key, Some(opts))).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => {
            pool.failed(idx);
            Err(crate::client::map_err(e, "watch"))
        }
        Err(_) => {
            pool.failed(idx);
            Err(Error::new(ErrorKind::Timeout, "etcd watch did not open"))
        }
    }
}

/// Sends a create of a watch on `key` within `limit`.
pub(crate) async fn create(
    stream: &mut WatchStream,
    key: Vec<u8>,
    opts: WatchOptions,
    limit: Duration,
) -> Result<()> {
    match tokio::time::timeout(limit, stream.watch(key, Some(opts))).await {
        Ok(sent) => sent.map_err(|e| crate::client::map_err(e, "watch")),
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            "a watch request could not be sent",
        )),
    }
}

/// Sends a cancel of the server's watch `id` within `limit`.
pub(crate) async fn cancel(stream: &mut WatchStream, id: i64, limit: Duration) -> Result<()> {
    match tokio::time::timeout(limit, stream.cancel(id)).await {
        Ok(sent) => sent.map_err(|e| crate::client::map_err(e, "watch cancel")),
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            "a watch cancel could not be sent",
        )),
    }
}

/// A probe of a silent stream behind a gRPC proxy (which answers no progress request): a watch
/// `id` of one key that hears nothing, whose `created` answer shows the stream is alive and which
/// is then cancelled.
pub(crate) fn probe(id: i64) -> WatchOptions {
    WatchOptions::new()
        .with_watch_id(id)
        .with_filters([WatchFilterType::NoPut, WatchFilterType::NoDelete])
}

/// Whether etcd cancelled a watch because the user may not read its key or prefix. A watch
/// response carries only the reason's text (no status code); etcd's Go client tells its errors
/// by their text too.
pub(crate) fn refused(reason: &str) -> bool {
    reason.contains("permission denied")
}

/// Whether etcd cancelled a watch for authorization: the user may not read the key, or (to
/// etcd 3.4 the same) the stream's token lapsed, or (etcd 3.5, JWT) it predates a change of the
/// users and roles; etcd 3.5 says the latter two apart.
fn auth_refused(reason: &str) -> bool {
    refused(reason)
        || reason.contains("invalid auth token")
        || reason.contains("revision of auth store is old")
}

/// A watch create etcd cancelled with `reason` on endpoint `idx`'s stream, opened with the watch
/// client's login `login`: the retryable error that ends the stream when its token may have
/// lapsed and a newer one is there ([`Pool::relogin_watcher`]: the stream is opened again with
/// it); `None` when the refusal stands.
pub(crate) async fn lapsed(pool: &Pool, idx: usize, login: u64, reason: &str) -> Option<Error> {
    if !(auth_refused(reason) && pool.relogin_watcher(idx, login).await) {
        return None;
    }
    Some(
        Error::new(
            ErrorKind::Connection,
            "etcd refused a watch on a stream whose token had lapsed; logged in again",
        )
        .with_retryable(true),
    )
}

/// The error for a watch create etcd cancelled on endpoint `idx`'s stream (see [`lapsed`]),
/// else [`cancelled`].
pub(crate) async fn refusal(pool: &Pool, idx: usize, login: u64, reason: &str) -> Error {
    match lapsed(pool, idx, login, reason).await {
        Some(e) => e,
        None => cancelled(reason),
    }
}

/// The error for a watch etcd cancelled: `Auth` when the user may not read the prefix.
pub(crate) fn cancelled(reason: &str) -> Error {
    if refused(reason) {
        Error::new(
            ErrorKind::Auth,
            format!("etcd refused the watch of the lock: {reason}"),
        )
        .with_retryable(false)
    } else {
        Error::new(
            ErrorKind::Backend,
            format!("etcd cancelled the watch: {reason}"),
        )
    }
}
