//! Single operations on our keys and leases (delete, owner-checked or not; revoke), and the
//! hand-off of a delete that failed to the handle's reaper.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};
use lockkit_core::spi::Attempt;
use lockkit_core::Result;

use crate::client::is_lease_not_found;
use crate::inner::Inner;
use crate::session::Session;
use crate::watch::Slot;

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

/// Deletes an acquisition's key, created at `rev` (0: not known, as when its create went
/// unanswered; the slot is ours until the delete is done, so a key in it now is ours), and
/// revokes its fixed lease. The delete compares the create revision, so that one applied late
/// (sent to an endpoint that went silent, then sent again to the next) can never delete the
/// key a later acquisition put in the slot once it was free.
pub(crate) async fn delete_key(
    inner: &Inner,
    key: &[u8],
    rev: i64,
    lease: &KeyLease,
) -> Result<()> {
    let rev = match rev {
        0 => created_at(inner, key).await?,
        rev => Some(rev),
    };
    if let Some(rev) = rev {
        delete_if_ours(inner, key, rev).await?;
    }
    if let KeyLease::Fixed(id) = lease {
        inner.pool.revoke_lease(*id).await?;
    }
    Ok(())
}

/// The create revision of `key` (`None`: absent), by a linearizable read.
async fn created_at(inner: &Inner, key: &[u8]) -> Result<Option<i64>> {
    let k = key.to_vec();
    let resp = inner
        .pool
        .run("read a lock key", true, move |mut c| {
            let k = k.clone();
            async move { c.get(k, None).await }
        })
        .await?;
    Ok(resp.kvs().first().map(|kv| kv.create_revision()))
}

/// Whether lease `id` is certainly gone on the server (expired or revoked): then every key on
/// it is gone too.
pub(crate) async fn lease_gone(inner: &Inner, id: i64) -> Result<bool> {
    let r = inner
        .pool
        .run("lease ttl", true, move |mut c| async move {
            c.lease_time_to_live(id, None).await
        })
        .await;
    match r {
        Ok(resp) => Ok(resp.ttl() < 0),
        Err(e) if is_lease_not_found(&e) => Ok(true),
        Err(e) => Err(e),
    }
}

/// One try at a cleanup whose work is `work`: done when it succeeds, moot when `lease` is
/// certainly gone, to be tried again otherwise.
pub(crate) async fn reap_step(inner: &Inner, lease: i64, work: Result<()>) -> Attempt {
    Attempt::of(work, async {
        matches!(lease_gone(inner, lease).await, Ok(true))
    })
    .await
}

/// Hands the revoke of lease `id` to the handle's reaper: tried until it is revoked or gone.
pub(crate) fn reap_lease(inner: &Arc<Inner>, id: i64) {
    let inner = inner.clone();
    inner.reaper.clone().retry("revoke a lease", move || {
        let inner = inner.clone();
        async move {
            let work = inner.pool.revoke_lease(id).await;
            reap_step(&inner, id, work).await
        }
    });
}

/// Hands the delete of our keys (one acquisition's, or a multi-lock's taken in one
/// transaction), each with its create revision (0: not known), to the handle's reaper, after
/// `inflight` (the create still running) has finished: tried until every key is deleted or
/// their lease is gone. The slots stay reserved until then.
pub(crate) fn reap_keys(
    inner: &Arc<Inner>,
    keys: Vec<(Vec<u8>, i64)>,
    lease: KeyLease,
    inflight: Option<InFlight>,
    slots: Vec<Slot>,
) {
    let reaper = inner.reaper.clone();
    let inner = inner.clone();
    let inflight = Arc::new(tokio::sync::Mutex::new(inflight));
    let keys = Arc::new(keys);
    reaper.retry("delete a lock key", move || {
        // Owned by the job, so the slots are released when the job ends.
        let _reserved = &slots;
        let (inner, keys, lease, inflight) =
            (inner.clone(), keys.clone(), lease.clone(), inflight.clone());
        async move {
            if let Some(create) = inflight.lock().await.take() {
                let _ = create.await;
            }
            let mut work = Ok(());
            for (key, rev) in keys.iter() {
                work = delete_key(&inner, key, *rev, &lease).await;
                if work.is_err() {
                    break;
                }
            }
            reap_step(&inner, lease.id(), work).await
        }
    });
}

/// Puts `key` on lease `to`, keeping its value, while its create revision is `rev` and, with
/// `from`, while it is on lease `from` (so that a move delivered late cannot undo a later
/// one). Returns whether the key is on `to` now (an earlier move whose answer was lost may
/// have put it there); `false`: the key is gone, or on another lease.
pub(crate) async fn move_to_lease(
    inner: &Inner,
    key: &[u8],
    rev: i64,
    from: Option<i64>,
    to: i64,
) -> Result<bool> {
    let k = key.to_vec();
    let mut when = vec![Compare::create_revision(k.clone(), CompareOp::Equal, rev)];
    if let Some(from) = from {
        when.push(Compare::lease(k.clone(), CompareOp::Equal, from));
    }
    let resp = inner
        .pool
        .run("move a key to another lease", true, move |mut c| {
            let txn = Txn::new()
                .when(when.clone())
                .and_then([TxnOp::put(
                    k.clone(),
                    "",
                    Some(PutOptions::new().with_lease(to).with_ignore_value()),
                )])
                .or_else([TxnOp::get(k.clone(), None)]);
            async move { c.txn(txn).await }
        })
        .await?;
    if resp.succeeded() {
        return Ok(true);
    }
    Ok(resp.op_responses().into_iter().any(|r| {
        matches!(r, TxnOpResponse::Get(g) if g
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == rev && kv.lease() == to))
    }))
}

/// Sets `key`'s value to `value`, keeping its lease, only while its create revision is `rev`
/// and every compare of `also` holds. Returns whether it did (`false`: the key is not ours any
/// more, or `also` failed).
pub(crate) async fn set_value_if_ours(
    inner: &Inner,
    what: &'static str,
    key: &[u8],
    rev: i64,
    value: Vec<u8>,
    also: &[Compare],
) -> Result<bool> {
    let k = key.to_vec();
    let mut when = vec![Compare::create_revision(k.clone(), CompareOp::Equal, rev)];
    when.extend_from_slice(also);
    let resp = inner
        .pool
        .run(what, true, move |mut c| {
            let txn = Txn::new().when(when.clone()).and_then([TxnOp::put(
                k.clone(),
                value.clone(),
                Some(PutOptions::new().with_ignore_lease()),
            )]);
            async move { c.txn(txn).await }
        })
        .await?;
    Ok(resp.succeeded())
}

/// The lease `key` is on while its create revision is `rev` (`None`: it is not ours any more).
pub(crate) async fn key_lease(inner: &Inner, key: &[u8], rev: i64) -> Result<Option<i64>> {
    let k = key.to_vec();
    let resp = inner
        .pool
        .run("read a key's lease", true, move |mut c| {
            let k = k.clone();
            async move { c.get(k, None).await }
        })
        .await?;
    Ok(resp
        .kvs()
        .first()
        .filter(|kv| kv.create_revision() == rev)
        .map(|kv| kv.lease()))
}

/// Deletes `key` only while its create revision is `rev`. Returns whether it deleted.
pub(crate) async fn delete_if_ours(inner: &Inner, key: &[u8], rev: i64) -> Result<bool> {
    inner.pool.delete_if_created(key, rev).await
}

/// Admin: deletes the first key under `prefix` (the holder, or the leader), whoever's it is.
/// Returns whether there was one.
pub(crate) async fn delete_first(inner: &Inner, prefix: &[u8]) -> Result<bool> {
    loop {
        let kvs = inner.keys_by_create(prefix, 1).await?;
        let Some(first) = kvs.first() else {
            return Ok(false);
        };
        // It may have left (and another become first) since the read: look again.
        if delete_if_ours(inner, first.key(), first.create_revision()).await? {
            return Ok(true);
        }
    }
}
