//! Acquiring a key on a lock prefix, shared by the mutex, the RW lock and the semaphore.
//!
//! One transaction creates our key `<prefix><lease hex>[_n]` if absent (attached to the session
//! lease, or to a lease of its own for fixed leases) and reads the keys ranked before it. If
//! they leave room for us we hold at once. Otherwise we wait on the name's long-lived watch (see
//! `watch.rs`) until the mirror shows that we hold; ranks are create revisions, never key names
//! or mere existence, because key names come back whenever a session locks again. The watch
//! only wakes us: the turn it shows, and a wait that ran out, are settled by one linearizable
//! read of the queue, since the watch may lag the server. If our own key vanishes while we wait
//! (etcd issue 11456) we start over with a fresh key. Every failure, timeout and cancellation
//! deletes our key (etcd issue 9715).

use std::sync::{Arc, Mutex};

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use lockkit_core::spi::{GuardParts, LeaseClock, OnDrop, Request, StateCell};
use lockkit_core::{Error, ErrorKind, FencingToken, Lease, Result};
use tokio::time::Instant;

use crate::client::is_lease_not_found;
use crate::held::{EtcdHeld, HeldShared};
use crate::inner::Inner;
use crate::ops::{delete_if_ours, delete_key, move_to_lease, reap_key, revoke, InFlight, KeyLease};
use crate::session::{grant_exact, Session};
use crate::watch::{Kind, NameWatch, Need, Slot, Standing};

/// What one acquire wants on a prefix.
pub(crate) struct Want<'a> {
    pub(crate) name: &'a Arc<str>,
    pub(crate) nw: &'a Arc<NameWatch>,
    pub(crate) kind: Kind,
    pub(crate) need: Need,
    /// The value of our key: empty (mutex, as Go writes it), `w` / `r` (RW lock), the permit
    /// count (semaphore).
    pub(crate) value: String,
}

/// Acquires per `want` and `r`; `Ok(None)` when the wait budget ran out (our key deleted by
/// then).
pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    want: Want<'_>,
    r: &Request,
) -> Result<Option<GuardParts>> {
    let deadline = r.deadline();
    let req = want;
    let nw = req.nw;
    let prefix = nw.prefix().to_vec();
    loop {
        let d = r.lease().duration();
        let (lease, mut clock) = if r.lease().is_watchdog() {
            let s = inner.session(d).await?;
            let clock = s.clock().clone();
            (KeyLease::Session(s), clock)
        } else {
            let (id, sent) = grant_exact(&inner.pool, d).await?;
            (KeyLease::Fixed(id), LeaseClock::starting(sent, d))
        };
        let slot = nw.take_slot();
        let key = match &lease {
            KeyLease::Session(s) => slot.key(s.id()),
            KeyLease::Fixed(id) => {
                let mut k = prefix.clone();
                k.extend_from_slice(format!("{id:x}").as_bytes());
                k
            }
        };
        let mut attempt = Attempt {
            inner: inner.clone(),
            key,
            lease: lease.clone(),
            slot: Some(slot),
            inflight: None,
            armed: true,
        };
        let (rev, holds) = match attempt
            .create(&prefix, &req.value, req.need, req.kind)
            .await
        {
            Ok(v) => v,
            Err(e) if is_lease_not_found(&e) => {
                if let KeyLease::Session(s) = &lease {
                    inner.drop_session(s).await;
                }
                attempt.cleanup().await;
                continue;
            }
            Err(e) => {
                attempt.cleanup().await;
                return Err(e);
            }
        };
        if !holds {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                attempt.cleanup().await;
                return Ok(None);
            }
            // A fixed lease starts when the lock is taken: while we wait, our key lives on the
            // handle's session lease instead.
            let fixed = !r.lease().is_watchdog();
            let parked = !fixed || attempt.park(rev, inner.session(inner.lease).await?).await?;
            let standing = if parked {
                wait_turn(nw, rev, req.need, deadline).await
            } else {
                Standing::Gone
            };
            // The watch shows our turn as of the last event it delivered, and the server may be
            // past it: our key deleted a moment later (a lease revoked), the lock already taken
            // by someone who saw both deletes. A watch may also lag so far that our turn came
            // and the wait budget ran out before it said so; giving up then would send us to
            // the back of the queue, and waiters that all lag would leapfrog each other for
            // ever. So a turn, and a wait that ran out, are settled by a linearizable read (Go's
            // `Mutex.Lock` reads its key again too).
            let standing = match standing {
                Standing::Gone => Standing::Gone,
                _ if inner.check_open().is_err() => Standing::Waiting,
                _ => turn_on_server(inner, &prefix, &attempt.key, rev, req.need, req.kind).await?,
            };
            match standing {
                Standing::Owner if fixed => match attempt.unpark(rev, d).await? {
                    Some(c) => clock = c,
                    None => {
                        attempt.cleanup().await;
                        inner.check_open()?;
                        continue;
                    }
                },
                Standing::Owner => {}
                Standing::Gone => {
                    // Our key vanished while we waited (lease lost, force_unlock): start over.
                    attempt.cleanup().await;
                    inner.check_open()?;
                    continue;
                }
                _ => {
                    attempt.cleanup().await;
                    inner.check_open()?;
                    return Ok(None);
                }
            }
        }
        let state = StateCell::new(clock);
        if let KeyLease::Session(s) = &attempt.lease {
            s.track(&state);
        }
        nw.add_holder(rev, &state);
        let held = attempt.into_held(r.lease(), req.name.clone(), nw.clone(), rev, state.clone());
        return Ok(Some(GuardParts::new(
            FencingToken(rev as u64),
            r.lease(),
            state,
            Box::new(held),
        )));
    }
}

/// Waits until our key holds, vanishes, or the deadline passes (then `Waiting`).
async fn wait_turn(
    nw: &Arc<NameWatch>,
    rev: i64,
    need: Need,
    deadline: Option<Instant>,
) -> Standing {
    let notify = nw.add_waiter(rev, need);
    let _unregister = OnDrop::armed(|| nw.remove_waiter(rev));
    loop {
        if let s @ (Standing::Owner | Standing::Gone) = nw.standing(rev, need) {
            return s;
        }
        match deadline {
            Some(d) => {
                if tokio::time::timeout_at(d, notify.notified()).await.is_err() {
                    // One last look: the hand-off may have landed at the deadline.
                    return match nw.standing(rev, need) {
                        Standing::Owner => Standing::Owner,
                        _ => Standing::Waiting,
                    };
                }
            }
            None => notify.notified().await,
        }
        if nw.is_stopped() {
            return Standing::Waiting;
        }
    }
}

/// Where our key (create revision `rev`) stands on the server now: one linearizable read of
/// the keys created up to ours.
async fn turn_on_server(
    inner: &Inner,
    prefix: &[u8],
    key: &[u8],
    rev: i64,
    need: Need,
    kind: Kind,
) -> Result<Standing> {
    // A mutex or writer only needs to know whether ours is the first key.
    let limit = if need == Need::Exclusive { 1 } else { 0 };
    let p = prefix.to_vec();
    let resp = inner
        .pool
        .run("read the lock queue", true, move |mut c| {
            let opts = GetOptions::new()
                .with_prefix()
                .with_max_create_revision(rev)
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(limit);
            let p = p.clone();
            async move { c.get(p, Some(opts)).await }
        })
        .await?;
    let kvs = resp.kvs();
    if !kvs
        .iter()
        .any(|kv| kv.create_revision() == rev && kv.key() == key)
    {
        // Ours is not among them: gone, unless a limited read stopped at an older key.
        let older = kvs.first().is_some_and(|kv| kv.create_revision() < rev);
        return Ok(if older && limit > 0 {
            Standing::Waiting
        } else {
            Standing::Gone
        });
    }
    let before: Vec<_> = kvs
        .iter()
        .filter(|kv| kv.create_revision() < rev)
        .map(|kv| kind.entry(kv.value()))
        .collect();
    Ok(if need.holds(before.iter()) {
        Standing::Owner
    } else {
        Standing::Waiting
    })
}

/// One try at creating our key. Dropping it (a cancelled acquire) deletes the key in the
/// background, after the create transaction, if still in flight, has finished.
struct Attempt {
    inner: Arc<Inner>,
    key: Vec<u8>,
    lease: KeyLease,
    slot: Option<Slot>,
    inflight: Option<InFlight>,
    armed: bool,
}

impl Attempt {
    /// Creates our key (deleting a stale key of ours in the slot first) and returns our create
    /// revision and whether we hold at once.
    async fn create(
        &mut self,
        prefix: &[u8],
        value: &str,
        need: Need,
        kind: Kind,
    ) -> Result<(i64, bool)> {
        // The mutex only needs the first key; the others need everyone ranked before them.
        let limit = if need == Need::Exclusive { 1 } else { 0 };
        for _ in 0..3 {
            let (pool, key, lease, prefix, value) = (
                self.inner.pool.clone(),
                self.key.clone(),
                self.lease.id(),
                prefix.to_vec(),
                value.to_string(),
            );
            // Owned by the attempt, so that a cancelled acquire cannot cut the request and leave
            // us unsure whether the key exists: a dropped attempt hands the unfinished request
            // to its cleanup task, which drives it to the end before deleting the key.
            let fut: InFlight = Box::pin(async move {
                pool.run("acquire", true, move |mut c| {
                    let owner = TxnOp::get(
                        prefix.clone(),
                        Some(
                            GetOptions::new()
                                .with_prefix()
                                .with_sort(SortTarget::Create, SortOrder::Ascend)
                                .with_limit(limit),
                        ),
                    );
                    let txn = Txn::new()
                        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                        .and_then([
                            TxnOp::put(
                                key.clone(),
                                value.clone(),
                                Some(PutOptions::new().with_lease(lease)),
                            ),
                            owner.clone(),
                        ])
                        .or_else([TxnOp::get(key.clone(), None), owner]);
                    async move { c.txn(txn).await }
                })
                .await
            });
            self.inflight = Some(fut);
            let resp = self.inflight.as_mut().expect("just set").await;
            self.inflight = None;
            let resp = resp?;
            let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
            let ops = resp.op_responses();
            if resp.succeeded() {
                let holds = match ops.get(1) {
                    Some(TxnOpResponse::Get(g)) => {
                        let before: Vec<_> = g
                            .kvs()
                            .iter()
                            .filter(|kv| kv.create_revision() < rev)
                            .map(|kv| kind.entry(kv.value()))
                            .collect();
                        need.holds(before.iter())
                    }
                    _ => false,
                };
                return Ok((rev, holds));
            }
            // Our slot's key exists: left over from an earlier acquisition whose delete failed,
            // or from a retried request. Never adopt it (its token would repeat): delete it.
            let stale = match ops.first() {
                Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| kv.create_revision()),
                _ => None,
            };
            if let Some(stale) = stale {
                delete_if_ours(&self.inner, &self.key, stale).await?;
            }
        }
        Err(Error::new(
            ErrorKind::Backend,
            "could not create the lock key (it kept reappearing)",
        ))
    }

    /// Moves our key (create revision `rev`) onto the session lease `s`, keeping its value, and
    /// revokes the fixed lease it was on: a waiter's key then lives as long as we wait. `false`
    /// when the key is gone.
    async fn park(&mut self, rev: i64, s: Arc<Session>) -> Result<bool> {
        let KeyLease::Fixed(fixed) = self.lease else {
            return Ok(true);
        };
        if !move_to_lease(&self.inner, &self.key, rev, s.id()).await? {
            return Ok(false);
        }
        self.lease = KeyLease::Session(s);
        let _ = revoke(&self.inner, fixed).await;
        Ok(true)
    }

    /// Grants the fixed lease of `d` now that we hold, and moves our key onto it: its clock
    /// starts here. `None` when the key is gone.
    async fn unpark(
        &mut self,
        rev: i64,
        d: std::time::Duration,
    ) -> Result<Option<Arc<LeaseClock>>> {
        let (id, sent) = grant_exact(&self.inner.pool, d).await?;
        match move_to_lease(&self.inner, &self.key, rev, id).await {
            Ok(true) => {
                self.lease = KeyLease::Fixed(id);
                Ok(Some(LeaseClock::starting(sent, d)))
            }
            other => {
                let _ = revoke(&self.inner, id).await;
                other.map(|_| None)
            }
        }
    }

    /// Deletes our key now (awaited), so that the next acquirer finds nothing of ours; a delete
    /// the server does not take now goes to the reaper. Armed until done: if this future is
    /// dropped half-way (the core keeps the wait budget), the drop hands the rest to the reaper.
    async fn cleanup(&mut self) {
        if let Some(create) = self.inflight.as_mut() {
            let _ = create.await;
            self.inflight = None;
        }
        let deleted = delete_key(&self.inner, &self.key, &self.lease).await;
        self.armed = false;
        if deleted.is_ok() {
            self.slot = None;
        } else {
            let key = std::mem::take(&mut self.key);
            reap_key(&self.inner, key, self.lease.clone(), None, self.slot.take());
        }
    }

    fn into_held(
        mut self,
        guard_lease: Lease,
        name: Arc<str>,
        nw: Arc<NameWatch>,
        rev: i64,
        state: StateCell,
    ) -> EtcdHeld {
        self.armed = false;
        let shared = Arc::new(HeldShared {
            inner: self.inner.clone(),
            name,
            nw,
            key: std::mem::take(&mut self.key),
            rev,
            lease: Mutex::new(self.lease.clone()),
            slot: Mutex::new(self.slot.take()),
            state,
            guard_lease,
        });
        EtcdHeld::new(shared)
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        reap_key(
            &self.inner,
            std::mem::take(&mut self.key),
            self.lease.clone(),
            self.inflight.take(),
            self.slot.take(),
        );
    }
}
