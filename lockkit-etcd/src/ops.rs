//! Single operations on our keys and leases: delete (owner-checked or not), revoke.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnResponse};
use lockkit_core::Result;

use crate::inner::Inner;
use crate::session::Session;

/// A create transaction while it runs.
pub(crate) type InFlight =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<TxnResponse>> + Send>>;

/// Which lease a key is attached to.
#[derive(Debug, Clone)]
pub(crate) enum KeyLease {
    /// The shared session lease (watchdog leases).
    Session(Arc<Session>),
    /// A lease of its own (fixed leases).
    Fixed(i64),
}

impl KeyLease {
    pub(crate) fn id(&self) -> i64 {
        match self {
            KeyLease::Session(s) => s.id(),
            KeyLease::Fixed(id) => *id,
        }
    }
}

/// Deletes an acquisition's key whatever its revision (the key is ours alone: it embeds our lease
/// and a slot we reserved), after an in-flight create has finished. A fixed lease is revoked.
pub(crate) async fn remove_key(
    inner: &Inner,
    key: &[u8],
    lease: &KeyLease,
    inflight: Option<InFlight>,
) -> Result<()> {
    if let Some(f) = inflight {
        let _ = f.await;
    }
    let k = key.to_vec();
    let r = inner
        .pool
        .run("delete", true, move |mut c| {
            let k = k.clone();
            async move { c.delete(k, None).await }
        })
        .await
        .map(drop);
    if let KeyLease::Fixed(id) = lease {
        revoke(inner, *id).await;
    }
    r
}

pub(crate) async fn revoke(inner: &Inner, id: i64) {
    let _ = inner
        .pool
        .run("lease revoke", true, move |mut c| async move {
            c.lease_revoke(id).await
        })
        .await;
}

/// Deletes `key` only while its create revision is `rev`. Returns whether it deleted.
pub(crate) async fn delete_if_ours(inner: &Inner, key: &[u8], rev: i64) -> Result<bool> {
    let k = key.to_vec();
    let resp = inner
        .pool
        .run("release", true, move |mut c| {
            let txn = Txn::new()
                .when([Compare::create_revision(k.clone(), CompareOp::Equal, rev)])
                .and_then([TxnOp::delete(k.clone(), None)]);
            async move { c.txn(txn).await }
        })
        .await?;
    Ok(resp.succeeded())
}
