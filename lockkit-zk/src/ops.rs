//! Single ZooKeeper requests, tried again while only the connection is down (the session lives
//! on), with the core's backoff.

use std::time::Duration;

use lockkit_core::{Backoff, Budget, Error, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{is_transient, map};

/// How a request that failed only because the connection dropped is tried again.
pub(crate) const TRANSIENT: Backoff = Backoff::REQUEST;

/// Retries `op` while the connection is down (the session lives on), up to `limit`.
pub(crate) async fn retry<T, F, Fut>(limit: Duration, what: &str, op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, zk::Error>>,
{
    TRANSIENT
        .retry(Budget::Until(Instant::now() + limit), is_transient, op)
        .await
        .map_err(|e| map(e, what))
}

/// Deletes `path`; `Ok(false)` when it was already gone.
pub(crate) async fn delete_node(client: &zk::Client, path: &str, limit: Duration) -> Result<bool> {
    let r = retry(limit, "delete", || async {
        match client.delete(path, None).await {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode) => Ok(false),
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
