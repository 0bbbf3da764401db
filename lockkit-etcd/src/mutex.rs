//! The mutex: Go's `concurrency.Mutex` algorithm with its known bugs fixed.
//!
//! Acquire: one transaction creates our key `<prefix><lease hex>` if absent (attached to the
//! session lease) and reads the owner, the key with the lowest create revision on the prefix. If
//! that is us, we hold the lock. Otherwise we wait on the name's long-lived watch (see
//! `watch.rs`) until the mirror shows our key as the lowest; we never compare key names or mere
//! existence, only create revisions, because key names come back whenever a session locks again.
//! If our own key vanishes while we wait (etcd issue 11456) we start over with a fresh key.
//! Every failure, timeout and cancellation deletes our key (etcd issue 9715); unlock deletes the
//! key only while its create revision is still ours (etcd issue 22082).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use lockkit_core::{
    AcquireOptions, DistLock, Error, ErrorKind, FencingToken, GuardParts, Held, HoldRegistry,
    Lease, LockGuard, Result, StateCell,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backend::Inner;
use crate::session::{ttl_secs, Session};
use crate::watch::{NameWatch, Slot, Standing};

/// A mutex handle. Creating one talks to no server; the first acquire sets up the name's watch.
#[derive(Debug)]
pub(crate) struct EtcdMutex {
    inner: Arc<Inner>,
    name: Arc<str>,
    prefix: Vec<u8>,
    watch: tokio::sync::OnceCell<Arc<NameWatch>>,
    holds: HoldRegistry,
}

/// Which lease a key is attached to.
#[derive(Debug, Clone)]
enum KeyLease {
    /// The shared session lease (watchdog leases).
    Session(Arc<Session>),
    /// A lease of its own (fixed leases): its id, TTL seconds, and when its grant was sent.
    Fixed(i64),
}

impl KeyLease {
    fn id(&self) -> i64 {
        match self {
            KeyLease::Session(s) => s.id(),
            KeyLease::Fixed(id) => *id,
        }
    }
}

impl EtcdMutex {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> Self {
        EtcdMutex {
            prefix: inner.mutex_prefix(name),
            inner,
            name: name.into(),
            watch: tokio::sync::OnceCell::new(),
            holds: HoldRegistry::new(),
        }
    }

    async fn watch(&self) -> Result<Arc<NameWatch>> {
        self.inner.check_open()?;
        self.watch
            .get_or_try_init(|| self.inner.name_watch(&self.prefix))
            .await
            .cloned()
    }

    async fn acquire_inner(&self, opts: &AcquireOptions) -> Result<Option<LockGuard>> {
        let deadline = opts.wait_budget().map(|d| Instant::now() + d);
        let nw = self.watch().await?;
        loop {
            let (lease, lease_deadline) = match opts.lease {
                Lease::Fixed(d) => {
                    let (id, deadline) = grant_fixed(&self.inner, d).await?;
                    (KeyLease::Fixed(id), Some(deadline))
                }
                _ => (KeyLease::Session(self.inner.session().await?), None),
            };
            let slot = nw.take_slot();
            let key = match &lease {
                KeyLease::Session(s) => slot.key(s.id()),
                KeyLease::Fixed(id) => {
                    let mut k = self.prefix.clone();
                    k.extend_from_slice(format!("{id:x}").as_bytes());
                    k
                }
            };
            let mut attempt = Attempt {
                inner: self.inner.clone(),
                key,
                lease: lease.clone(),
                slot: Some(slot),
                inflight: None,
                armed: true,
            };
            let (rev, owner) = match attempt.create(&self.prefix).await {
                Ok(v) => v,
                Err(e) if lease_not_found(&e) => {
                    if let KeyLease::Session(s) = &lease {
                        self.inner.drop_session(s).await;
                    }
                    attempt.cleanup().await;
                    continue;
                }
                Err(e) => {
                    attempt.cleanup().await;
                    return Err(e);
                }
            };
            if owner != rev {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    attempt.cleanup().await;
                    return Ok(None);
                }
                match wait_turn(&nw, rev, deadline).await {
                    Standing::Owner => {}
                    Standing::Gone => {
                        // Our key vanished while we waited (lease lost, force_unlock): start over.
                        attempt.cleanup().await;
                        self.inner.check_open()?;
                        continue;
                    }
                    _ => {
                        attempt.cleanup().await;
                        self.inner.check_open()?;
                        return Ok(None);
                    }
                }
            }
            let state = StateCell::new();
            if let KeyLease::Session(s) = &lease {
                s.track(&state);
            }
            nw.add_holder(rev, &state);
            let held = attempt.into_held(nw.clone(), rev, state.clone(), lease_deadline);
            let parts = GuardParts::new(
                self.name.clone(),
                FencingToken(rev as u64),
                opts.lease,
                state,
                Box::new(held),
            );
            let guard = LockGuard::new(parts);
            self.holds.track(&guard);
            return Ok(Some(guard));
        }
    }
}

/// Waits until our key owns the lock, vanishes, or the deadline passes (then `Waiting`).
async fn wait_turn(nw: &Arc<NameWatch>, rev: i64, deadline: Option<Instant>) -> Standing {
    struct Unregister<'a>(&'a NameWatch, i64);
    impl Drop for Unregister<'_> {
        fn drop(&mut self) {
            self.0.remove_waiter(self.1);
        }
    }
    let notify = nw.add_waiter(rev);
    let _unregister = Unregister(nw, rev);
    loop {
        if let s @ (Standing::Owner | Standing::Gone) = nw.standing(rev) {
            return s;
        }
        match deadline {
            Some(d) => {
                if tokio::time::timeout_at(d, notify.notified()).await.is_err() {
                    // One last look: the hand-off may have landed at the deadline.
                    return match nw.standing(rev) {
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

fn lease_not_found(e: &Error) -> bool {
    let s = format!("{e} {e:?}");
    s.contains("requested lease not found") || s.contains("lease not found")
}

async fn grant_fixed(inner: &Inner, d: Duration) -> Result<(i64, Instant)> {
    let secs = ttl_secs(d);
    let sent = Instant::now();
    let resp = inner
        .pool
        .run("lease grant", false, |mut c| async move {
            c.lease_grant(secs, None).await
        })
        .await?;
    Ok((
        resp.id(),
        sent + Duration::from_secs(resp.ttl().max(1) as u64),
    ))
}

/// The create transaction of an attempt, while it runs.
type InFlight = std::pin::Pin<Box<dyn std::future::Future<Output = Result<TxnResponse>> + Send>>;

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
    /// revision and the owner's.
    async fn create(&mut self, prefix: &[u8]) -> Result<(i64, i64)> {
        for _ in 0..3 {
            let (pool, key, lease, prefix) = (
                self.inner.pool.clone(),
                self.key.clone(),
                self.lease.id(),
                prefix.to_vec(),
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
                                .with_limit(1),
                        ),
                    );
                    let txn = Txn::new()
                        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                        .and_then([
                            TxnOp::put(key.clone(), "", Some(PutOptions::new().with_lease(lease))),
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
                let owner = match ops.get(1) {
                    Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| kv.create_revision()),
                    _ => None,
                };
                return Ok((rev, owner.unwrap_or(rev)));
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

    /// Deletes our key now (awaited), so that the next acquirer finds nothing of ours.
    async fn cleanup(&mut self) {
        self.armed = false;
        let inflight = self.inflight.take();
        let _ = remove_key(&self.inner, &self.key, &self.lease, inflight).await;
        self.slot = None;
    }

    fn into_held(
        mut self,
        nw: Arc<NameWatch>,
        rev: i64,
        state: StateCell,
        fixed_deadline: Option<Instant>,
    ) -> EtcdHeld {
        self.armed = false;
        let shared = Arc::new(HeldShared {
            inner: self.inner.clone(),
            nw,
            key: std::mem::take(&mut self.key),
            rev,
            lease: Mutex::new(self.lease.clone()),
            slot: Mutex::new(self.slot.take()),
            state,
        });
        let timer = fixed_deadline.map(|d| {
            let (tx, rx) = tokio::sync::watch::channel(d);
            let task = tokio::spawn(expire_at_deadline(Arc::downgrade(&shared), rx));
            (tx, task)
        });
        EtcdHeld {
            shared,
            timer: Mutex::new(timer),
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, key, lease, inflight, slot) = (
            self.inner.clone(),
            std::mem::take(&mut self.key),
            self.lease.clone(),
            self.inflight.take(),
            self.slot.take(),
        );
        rt.spawn(async move {
            let _ = remove_key(&inner, &key, &lease, inflight).await;
            drop(slot);
        });
    }
}

/// Deletes an acquisition's key whatever its revision (the key is ours alone: it embeds our lease
/// and a slot we reserved), after an in-flight create has finished. A fixed lease is revoked.
async fn remove_key(
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

async fn revoke(inner: &Inner, id: i64) {
    let _ = inner
        .pool
        .run("lease revoke", true, move |mut c| async move {
            c.lease_revoke(id).await
        })
        .await;
}

/// Deletes `key` only while its create revision is `rev`. Returns whether it deleted.
async fn delete_if_ours(inner: &Inner, key: &[u8], rev: i64) -> Result<bool> {
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

/// What a held guard shares with its background tasks.
#[derive(Debug)]
struct HeldShared {
    inner: Arc<Inner>,
    nw: Arc<NameWatch>,
    key: Vec<u8>,
    rev: i64,
    lease: Mutex<KeyLease>,
    slot: Mutex<Option<Slot>>,
    state: StateCell,
}

impl HeldShared {
    fn fixed_lease(&self) -> Option<i64> {
        match &*self.lease.lock().unwrap_or_else(|e| e.into_inner()) {
            KeyLease::Fixed(id) => Some(*id),
            KeyLease::Session(_) => None,
        }
    }

    /// Deletes our key if it is still ours. Connection trouble is retried in the background
    /// (until the lease backstop), so a failed unlock never leaves the lock held for long.
    async fn release(self: &Arc<Self>) -> Result<()> {
        self.nw.remove_holder(self.rev);
        let r = delete_if_ours(&self.inner, &self.key, self.rev).await;
        match r {
            Ok(deleted) => {
                self.finish().await;
                if deleted {
                    Ok(())
                } else {
                    Err(Error::not_held(self.nw_name()))
                }
            }
            Err(e) => {
                if e.is_retryable() {
                    let me = self.clone();
                    tokio::spawn(async move { me.retry_release().await });
                }
                Err(e)
            }
        }
    }

    async fn retry_release(self: Arc<Self>) {
        let mut wait = Duration::from_millis(200);
        for _ in 0..20 {
            tokio::time::sleep(wait).await;
            if delete_if_ours(&self.inner, &self.key, self.rev)
                .await
                .is_ok()
            {
                break;
            }
            wait = (wait * 2).min(Duration::from_secs(2));
        }
        self.finish().await;
    }

    /// After the key is gone: revoke a fixed lease, free the slot.
    async fn finish(&self) {
        if let Some(id) = self.fixed_lease() {
            revoke(&self.inner, id).await;
        }
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn nw_name(&self) -> &str {
        std::str::from_utf8(self.nw.prefix()).unwrap_or("lock")
    }
}

/// A held mutex, from the backend's side.
#[derive(Debug)]
pub(crate) struct EtcdHeld {
    shared: Arc<HeldShared>,
    timer: Mutex<Option<(tokio::sync::watch::Sender<Instant>, JoinHandle<()>)>>,
}

impl EtcdHeld {
    fn stop_timer(&self) {
        if let Some((_, t)) = self.timer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            t.abort();
        }
    }
}

impl Drop for EtcdHeld {
    fn drop(&mut self) {
        self.stop_timer();
    }
}

/// A fixed lease's local deadline: when it passes without an extend, the lock is ours no longer.
/// Delete the key ourselves (if still ours) so that "Lost" and "free" agree, then mark Lost.
async fn expire_at_deadline(
    shared: std::sync::Weak<HeldShared>,
    mut deadline: tokio::sync::watch::Receiver<Instant>,
) {
    loop {
        let d = *deadline.borrow_and_update();
        tokio::select! {
            _ = tokio::time::sleep_until(d) => break,
            changed = deadline.changed() => if changed.is_err() { return },
        }
    }
    let Some(s) = shared.upgrade() else { return };
    s.nw.remove_holder(s.rev);
    let _ = delete_if_ours(&s.inner, &s.key, s.rev).await;
    s.state.mark_lost();
}

#[async_trait]
impl Held for EtcdHeld {
    async fn release(&self) -> Result<()> {
        self.stop_timer();
        self.shared.release().await
    }

    fn release_in_background(&self) {
        self.stop_timer();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let s = self.shared.clone();
            rt.spawn(async move {
                let _ = s.release().await;
            });
        }
    }

    async fn extend(&self, lease: Duration) -> Result<()> {
        let s = &self.shared;
        let Some(old) = s.fixed_lease() else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "extend() is for fixed leases",
            ));
        };
        // A new lease of the requested length; move our key onto it only while it is ours.
        let (new, deadline) = grant_fixed(&s.inner, lease).await?;
        let (k, rev) = (s.key.clone(), s.rev);
        let resp = s
            .inner
            .pool
            .run("extend", true, move |mut c| {
                let txn = Txn::new()
                    .when([Compare::create_revision(k.clone(), CompareOp::Equal, rev)])
                    .and_then([TxnOp::put(
                        k.clone(),
                        "",
                        Some(PutOptions::new().with_lease(new)),
                    )]);
                async move { c.txn(txn).await }
            })
            .await;
        match resp {
            Ok(r) if r.succeeded() => {
                *s.lease.lock().unwrap_or_else(|e| e.into_inner()) = KeyLease::Fixed(new);
                if let Some((tx, _)) = &*self.timer.lock().unwrap_or_else(|e| e.into_inner()) {
                    let _ = tx.send(deadline);
                }
                revoke(&s.inner, old).await;
                Ok(())
            }
            Ok(_) => {
                revoke(&s.inner, new).await;
                s.state.mark_lost();
                Err(Error::lost(s.nw_name()))
            }
            Err(e) => {
                revoke(&s.inner, new).await;
                Err(e)
            }
        }
    }
}

#[async_trait]
impl DistLock for EtcdMutex {
    fn name(&self) -> &str {
        &self.name
    }

    async fn acquire(&self, opts: &AcquireOptions) -> Result<Option<LockGuard>> {
        let span = tracing::debug_span!("lockkit.acquire", lock = %self.name, backend = "etcd");
        tracing::Instrument::instrument(self.acquire_inner(opts), span).await
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(!self.inner.keys_by_create(&self.prefix, 1).await?.is_empty())
    }

    async fn hold_count(&self) -> Result<u32> {
        Ok(self.holds.hold_count())
    }

    async fn force_unlock(&self) -> Result<bool> {
        loop {
            let kvs = self.inner.keys_by_create(&self.prefix, 1).await?;
            let Some(owner) = kvs.first() else {
                return Ok(false);
            };
            if delete_if_ours(&self.inner, owner.key(), owner.create_revision()).await? {
                return Ok(true);
            }
        }
    }
}
