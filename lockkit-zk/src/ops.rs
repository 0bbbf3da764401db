//! Single ZooKeeper requests, tried again while only the connection is down (the session lives
//! on), with the core's backoff.

use std::time::Duration;

use lockkit_core::{Backoff, Budget, Error, ErrorKind, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{is_transient, map};
use crate::node;

/// How a request that failed only because the connection dropped is tried again.
pub(crate) const TRANSIENT: Backoff = Backoff::REQUEST;

/// Retries `op` while the connection is down (the session lives on), up to `limit`, each try
/// cut off there too: the client keeps a request queued while it reconnects, and fails it only
/// once it gives the session up, long after `command_timeout`.
pub(crate) async fn retry<T, F, Fut>(limit: Duration, what: &str, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, zk::Error>>,
{
    let until = Instant::now() + limit;
    TRANSIENT
        .retry(Budget::Until(until), is_transient, || within(until, op()))
        .await
        .map_err(|e| map(e, what))
}

/// [`retry`], telling `op` whether this is a try after one that failed (`true`): its reply lost,
/// which the server may have applied (a delete sent again then finds no node, a create finds
/// the node it made, a versioned set finds the version it made), or never sent, which the
/// client cannot tell apart.
pub(crate) async fn retry_resent<T, F, Fut>(limit: Duration, what: &str, mut op: F) -> Result<T>
where
    F: FnMut(bool) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, zk::Error>>,
{
    let mut tries = 0u32;
    retry(limit, what, || {
        tries += 1;
        op(tries > 1)
    })
    .await
}

/// `request`, or `zk::Error::Timeout` (transient, like a lost reply) once `until` has come.
pub(crate) async fn within<T>(
    until: Instant,
    request: impl std::future::Future<Output = std::result::Result<T, zk::Error>>,
) -> std::result::Result<T, zk::Error> {
    tokio::time::timeout_at(until, request)
        .await
        .unwrap_or(Err(zk::Error::Timeout))
}

/// Deletes `path`; `Ok(false)` when it was already gone. A node found gone by a delete tried
/// again after one that failed counts as deleted by that one, as Curator's release counts every
/// node it finds gone: a release whose reply was lost is not a lost lock, and a force-unlock does
/// not go on to the next holder.
pub(crate) async fn delete_node(client: &zk::Client, path: &str, limit: Duration) -> Result<bool> {
    let r = retry_resent(limit, "delete", |resent| async move {
        match client.delete(path, None).await {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode) => Ok(resent),
            Err(e) => Err(e),
        }
    })
    .await;
    r.map_err(|e| Error::new(e.kind(), format!("cannot delete {path}: {e}")))
}

/// The children of `dir` (retried while the connection is down); none when it does not exist.
pub(crate) async fn list_or_empty(
    client: &zk::Client,
    dir: &str,
    limit: Duration,
) -> Result<Vec<String>> {
    retry(limit, "list", || async {
        match client.list_children(dir).await {
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            other => other,
        }
    })
    .await
}

/// The nodes of ours carrying protected prefix `prefix` in `dir`, in queue order, each checked
/// to be our session's (`ephemeralOwner`): after a connection loss the create may have
/// happened, once or (a late create of the lost connection besides our retry) twice. The
/// listing comes after a `sync`, so a server we reconnected to that lags the leader shows every
/// create that committed.
pub(crate) async fn find_protected(
    client: &zk::Client,
    dir: &str,
    prefix: &str,
    limit: Duration,
) -> Result<Vec<String>> {
    let mut ours = find_own(client, dir, |c| c.starts_with(prefix), limit).await?;
    let seq = |n: &String| n[prefix.len()..].parse::<i64>().unwrap_or(i64::MAX);
    ours.sort_by(|a, b| node::seq_cmp(seq(a), seq(b)));
    Ok(ours)
}

/// The children of `dir` that `wanted` picks by name and that are our session's nodes
/// (`ephemeralOwner`), listed after a `sync`.
pub(crate) async fn find_own(
    client: &zk::Client,
    dir: &str,
    wanted: impl Fn(&str) -> bool,
    limit: Duration,
) -> Result<Vec<String>> {
    match retry(limit, "sync", || client.sync(dir)).await {
        Ok(()) => {}
        // No directory: no node of ours either.
        Err(e) if e.kind() == ErrorKind::Backend => {}
        Err(e) => return Err(e),
    }
    let children = list_or_empty(client, dir, limit).await?;
    let mut ours = Vec::new();
    for name in children.into_iter().filter(|c| wanted(c)) {
        let path = format!("{dir}/{name}");
        let stat = retry(limit, "stat", || client.check_stat(&path)).await?;
        if stat.is_some_and(|s| s.ephemeral_owner == client.session_id().0) {
            ours.push(name);
        }
    }
    Ok(ours)
}
