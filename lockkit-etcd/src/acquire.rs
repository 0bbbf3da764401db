//! Acquiring a key on a lock prefix, shared by the mutex, the RW lock, the semaphore and the
//! election.
//!
//! One transaction creates our key `<prefix><lease hex>[_n]` if absent (attached to the session
//! lease, or to a lease of its own for fixed leases) and reads the keys ranked before it (a
//! mutex: ours and the one just before it). If they leave room for us we hold at once. Otherwise
//! we wait on the name's long-lived watch (see `watch.rs`): a RW lock's, semaphore's or
//! election's until its mirror shows that we hold, a mutex's (narrow, see `key_watch.rs`) until
//! the key ranked just before ours is deleted. Ranks are create revisions, never key names or
//! mere existence, because key names come back whenever a session locks again. The watch only
//! wakes us: the turn it shows, and a wait that ran out, are settled by a linearizable read of
//! the queue, since the watch may lag the server. If our own key vanishes while we wait (etcd
//! issue 11456) we start over with a fresh key. Every failure, timeout and cancellation deletes
//! our key (etcd issue 9715).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use lockkit_core::spi::{
    drive, no_size, settle_size, too_many, Exit, Failures, GuardParts, LeaseClock, Queue, Request,
    Standing as Turn, StateCell, Woken,
};
use lockkit_core::{async_trait, Backoff, Error, ErrorKind, FencingToken, Lease, Result};
use tokio::sync::Notify;

use crate::client::is_lease_not_found;
use crate::held::{EtcdHeld, HeldShared};
use crate::inner::Inner;
use crate::key_watch::{BeforeWatch, Phase};
use crate::ops::{
    delete_if_ours, delete_key, move_to_lease, reap_keys, reap_lease, set_value_if_ours, InFlight,
    KeyLease,
};
use crate::sem_size::{is_size_key, size_key, stored_size};
use crate::session::{grant_exact, Session};
use crate::watch::{held_weight, Entry, Kind, NameWatch, Need, Slot, Standing, HELD};

/// What one acquire wants on a prefix.
pub(crate) struct Want<'a> {
    pub(crate) name: &'a Arc<str>,
    pub(crate) nw: &'a Arc<NameWatch>,
    pub(crate) kind: Kind,
    pub(crate) need: Need,
    /// The value of our key: empty (mutex, as Go writes it), `w` / `r` (RW lock), the permit
    /// count (semaphore), the candidate's value (election).
    pub(crate) value: Vec<u8>,
}

/// Acquires per `want` and `r` through the core's driver; `Ok(None)` when the wait budget ran
/// out (our key deleted by then).
pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    want: Want<'_>,
    r: &Request,
) -> Result<Option<GuardParts>> {
    let queue = EtcdQueue {
        inner,
        want,
        settled: AtomicBool::new(false),
    };
    drive(&queue, r).await
}

/// A lock prefix as the driver's queue: a claim is our key, ranked by its create revision.
struct EtcdQueue<'a> {
    inner: &'a Arc<Inner>,
    want: Want<'a>,
    /// Whether a key was created: a semaphore handle's size is checked when its acquire
    /// starts, and a claim made again (its key vanished) counts against whatever size is
    /// stored by then, as the waiter did.
    settled: AtomicBool,
}

/// One claim: our key and the lease it is on. Left (deleted) on every way out but a hold; a
/// create still in flight is driven to its end first, so that a cancelled acquire cannot leave
/// us unsure whether the key exists.
struct Claim {
    key: Vec<u8>,
    lease: KeyLease,
    slot: Option<Slot>,
    inflight: Option<InFlight>,
    /// The guard's clock: the session's, or a fixed lease's from its grant.
    clock: Arc<LeaseClock>,
    /// Our key's create revision, once created.
    rev: i64,
    /// The session lease a park whose answer has not come yet moves the key onto: the key may
    /// be on it or on `lease`.
    parking: Option<Arc<Session>>,
    /// Our registration with the name's watch, while we wait.
    waiter: Option<Arc<Notify>>,
    /// What the watch last showed of our key.
    seen: Standing,
    /// Whether `seen` comes from a linearizable read (a narrow watch's waits end in one).
    settled: bool,
    /// A semaphore's: the size key's mod revision the server refused a turn under while the
    /// watch still showed an older size (0: none). Until the watch shows it, a turn the watch
    /// shows is not looked at again at once, but at a pace (`size_pace`).
    size_ahead: i64,
    size_pace: Option<lockkit_core::Retry>,
    /// On a narrow watch: the key ranked just before ours (name, create revision), as last read.
    before: Option<(Vec<u8>, i64)>,
    /// On a narrow watch: our place on the watch of `before`'s key.
    watching: Option<BeforeWatch>,
    /// Whether that watch hears `before`'s delete for certain.
    confirmed: bool,
    /// Paces new watches of `before` that etcd keeps breaking.
    rewatch: Option<lockkit_core::Retry>,
    /// The fixed lease granted for the hold whose move may not have landed (its answer was
    /// lost): the next try moves the key onto this one, and a claim that does not hold revokes
    /// it.
    granted: Option<(i64, tokio::time::Instant)>,
}

#[async_trait]
impl Queue for EtcdQueue<'_> {
    type Claim = Claim;
    type Output = GuardParts;

    async fn claim(&self, r: &Request) -> Result<Claim> {
        let d = r.lease().duration();
        let (lease, clock) = if r.lease().is_watchdog() {
            let s = self.inner.session(d).await?;
            let clock = s.clock().clone();
            (KeyLease::Session(s), clock)
        } else {
            let (id, sent) = grant_exact(&self.inner.pool, d).await?;
            (KeyLease::Fixed(id), LeaseClock::starting(sent, d))
        };
        let slot = self.want.nw.take_slot();
        let key = match &lease {
            KeyLease::Session(s) => slot.key(s.id()),
            KeyLease::Fixed(id) => {
                let mut k = self.want.nw.prefix().to_vec();
                k.extend_from_slice(format!("{id:x}").as_bytes());
                k
            }
        };
        Ok(Claim {
            key,
            lease,
            slot: Some(slot),
            inflight: None,
            clock,
            rev: 0,
            parking: None,
            waiter: None,
            seen: Standing::Unknown,
            settled: false,
            size_ahead: 0,
            size_pace: None,
            before: None,
            watching: None,
            confirmed: false,
            rewatch: None,
            granted: None,
        })
    }

    async fn enqueue(&self, c: &mut Claim, _r: &Request) -> Result<Turn> {
        let adopt = self.settled.load(Ordering::Relaxed);
        let created = c.create(self.inner, &self.want, adopt).await;
        if created.is_ok() {
            self.settled.store(true, Ordering::Relaxed);
        }
        match created {
            Ok(true) => Ok(Turn::Owner),
            Ok(false) => Ok(Turn::Waiting),
            // The lease went away under us: a new claim on a new one.
            Err(e) if is_lease_not_found(&e) => {
                if let KeyLease::Session(s) = &c.lease {
                    self.inner.drop_session(s).await;
                }
                Ok(Turn::Gone)
            }
            Err(e) => Err(e),
        }
    }

    /// Waits until the name's watch wakes us (our turn, or our key gone), or the deadline. A
    /// fixed lease starts when the lock is taken: before its first wait, our key moves onto the
    /// handle's session lease.
    async fn wait(&self, c: &mut Claim, r: &Request) -> Result<Woken> {
        let (nw, need) = (self.want.nw, self.want.need);
        // A fixed lease's key parks before its first wait, and again after a move whose answer
        // was lost.
        if c.park(self.inner).await?.is_none() {
            c.seen = Standing::Gone;
            return Ok(Woken::Look);
        }
        let notify = c
            .waiter
            .get_or_insert_with(|| nw.add_waiter(c.rev, need))
            .clone();
        self.check_watch()?;
        c.settled = false;
        if nw.is_narrow() {
            return self.wait_narrow(c, r, &notify).await;
        }
        c.seen = nw.standing(c.rev, need);
        if c.seen == Standing::Owner && nw.size_seen().0 < c.size_ahead {
            // The watch lags the size the server refused us under: wait for it, at a pace.
            let pace = c.size_pace.get_or_insert_with(|| Backoff::WATCH.start());
            r.within(or_woken(pace.wait(), &notify)).await;
            c.seen = nw.standing(c.rev, need);
            return Ok(Woken::Look);
        }
        c.size_pace = None;
        if matches!(c.seen, Standing::Owner | Standing::Gone) {
            return Ok(Woken::Look);
        }
        // The watch wakes a waiter only when it became owner or lost its key.
        r.within(notify.notified()).await;
        c.seen = nw.standing(c.rev, need);
        Ok(Woken::Look)
    }

    /// The watch shows our turn as of the last event it delivered, and the server may be past
    /// it: our key deleted a moment later (a lease revoked), the lock already taken by someone
    /// who saw both deletes. A watch may also lag so far that our turn came and the wait budget
    /// ran out before it said so; giving up then would send us to the back of the queue, and
    /// waiters that all lag would leapfrog each other for ever. So a turn, and a wait that ran
    /// out, are settled by a linearizable read (Go's `Mutex.Lock` reads its key again too).
    async fn standing(&self, c: &mut Claim, r: &Request) -> Result<Turn> {
        let turn = self.look(c, r, false).await?;
        self.unpark_if_owner(c, r, turn).await
    }

    /// After a wait or look that failed midway, the look reads the server, so that a failure
    /// is borne only while the server does not answer.
    async fn recheck(&self, c: &mut Claim, r: &Request) -> Result<Turn> {
        let turn = self.look(c, r, true).await?;
        self.unpark_if_owner(c, r, turn).await
    }

    async fn hold(&self, c: &mut Claim, r: &Request) -> Result<Option<GuardParts>> {
        debug_assert!(
            !c.parked(r),
            "a parked key is granted its lease by `unpark_if_owner`"
        );
        c.unregister(self.want.nw);
        let state = StateCell::new(c.clock.clone());
        if let KeyLease::Session(s) = &c.lease {
            s.track(&state);
        }
        let w = &self.want;
        w.nw.add_holder(c.rev, &state);
        let rev = c.rev;
        let held = c.take_held(
            self.inner,
            r.lease(),
            w.name.clone(),
            w.nw.clone(),
            state.clone(),
        );
        Ok(Some(GuardParts::new(
            FencingToken(rev as u64),
            r.lease(),
            state,
            Box::new(held),
        )))
    }

    /// Deletes our key now (awaited), so that the next acquirer finds nothing of ours; a delete
    /// the server does not take now fails the leave, and the driver abandons the claim.
    async fn leave(&self, c: &mut Claim, _exit: Exit) -> Result<()> {
        c.unregister(self.want.nw);
        self.want.nw.forget(c.rev);
        if let Some(create) = c.inflight.as_mut() {
            let _ = create.await;
            c.inflight = None;
        }
        delete_key(self.inner, &c.key, c.rev, &c.lease).await?;
        if let Some((id, _)) = c.granted.take() {
            // Nothing of ours is on it any more.
            reap_lease(self.inner, id);
        }
        Ok(())
    }

    /// Hands the key, and a create still in flight, to the reaper.
    fn abandon(&self, mut c: Claim) {
        c.unregister(self.want.nw);
        self.want.nw.forget(c.rev);
        if let Some((id, _)) = c.granted.take() {
            // Our key may be on it: the key's delete below goes by name and create revision,
            // whatever its lease.
            reap_lease(self.inner, id);
        }
        // A key whose park was not answered may be on the session lease: the reaper keeps
        // deleting it while that lease lives, and the fixed one is revoked beside it.
        let lease = match (c.parking.take(), &c.lease) {
            (Some(s), KeyLease::Fixed(fixed)) => {
                reap_lease(self.inner, *fixed);
                KeyLease::Session(s)
            }
            (_, lease) => lease.clone(),
        };
        reap_keys(
            self.inner,
            vec![(std::mem::take(&mut c.key), c.rev)],
            lease,
            c.inflight.take(),
            c.slot.take().into_iter().collect(),
        );
    }

    /// A queued key on the session lease keeps its place for as long as the session lives: a
    /// request that did not reach the server or went unanswered (a connection reset, an
    /// endpoint gone) is borne until the session is known dead or its clock runs out, as Go's
    /// `Mutex.Lock` rides a reset out until its context ends. Refusals (a server that answers
    /// but refuses, such as a full database) are borne one command timeout from the first
    /// one; any failure of a key still on a fixed lease of its own, one command timeout from
    /// the first failure. Before the key is created, or once its session is dead, nothing is.
    fn tolerance(&self, c: &Claim, f: &Failures<'_>) -> Duration {
        if c.rev == 0 {
            return Duration::ZERO;
        }
        let timeout = self.inner.pool.timeout();
        match (&c.lease, f.refused_since()) {
            (KeyLease::Session(s), _) if !s.is_alive() => Duration::ZERO,
            (KeyLease::Session(_), None) => Duration::MAX,
            // The driver counts from the run's first failure.
            (KeyLease::Session(_), Some(refused)) => refused.duration_since(f.since()) + timeout,
            (KeyLease::Fixed(_), _) => timeout,
        }
    }

    fn lock_name(&self) -> &str {
        self.want.name
    }
}

impl EtcdQueue<'_> {
    /// Where the claim stands, settling what the watch showed with a linearizable read where
    /// it must (see [`Queue::standing`]); `after_failure`: the last wait or look failed.
    async fn look(&self, c: &mut Claim, r: &Request, after_failure: bool) -> Result<Turn> {
        if c.seen == Standing::Gone {
            return Ok(Turn::Gone);
        }
        self.inner.check_open()?;
        if after_failure {
            // The last wait or look failed midway: only the server knows where we stand.
            if self.want.nw.is_narrow() {
                // A mutex's read also learns the key now ranked before ours, for the next wait.
                self.read_turn(c).await?;
                return Ok(turn(c.seen));
            }
            let (on_server, _) = turn_on_server(self.inner, &self.want, &c.key, c.rev).await?;
            return Ok(turn(on_server));
        }
        if c.settled && c.seen == Standing::Owner {
            // A linearizable read showed our turn.
            return Ok(Turn::Owner);
        }
        if c.seen != Standing::Owner && !r.expired() {
            // Woken early, and the watch shows no turn: nothing to settle yet.
            return Ok(Turn::Waiting);
        }
        let mirror_size = self.want.nw.size_seen().0;
        let (on_server, size) = turn_on_server(self.inner, &self.want, &c.key, c.rev).await?;
        c.size_ahead = if size > mirror_size { size } else { 0 };
        Ok(match turn(on_server) {
            // The mirror said our turn came, the server says it did not: never trust that
            // mirror again for this key; a fresh key settles it. Unless a semaphore's size
            // changed since the mirror's view, or the mirror has caught up with the server by
            // now: the mirror was only behind, and a fresh key would cost the waiter its place.
            Turn::Waiting
                if c.seen == Standing::Owner
                    && !c.settled
                    && !r.expired()
                    && size == mirror_size
                    && self.want.nw.standing(c.rev, self.want.need) == Standing::Owner =>
            {
                Turn::Gone
            }
            t => t,
        })
    }

    /// The standing a look found, once a parked claim whose turn came has its fixed lease:
    /// granted now, with our key moved onto it, so that the guard's clock starts here. Gone
    /// when the key is. Granted here, after `standing` or `recheck`, rather than in `hold`, so
    /// that a failure meanwhile is borne like any failed look.
    async fn unpark_if_owner(&self, c: &mut Claim, r: &Request, turn: Turn) -> Result<Turn> {
        if turn != Turn::Owner || !c.parked(r) {
            return Ok(turn);
        }
        Ok(match c.unpark(self.inner, r.lease().duration()).await? {
            Some(clock) => {
                c.clock = clock;
                Turn::Owner
            }
            None => Turn::Gone,
        })
    }

    /// An error when the name's watch has stopped (only a closed handle stops its watches).
    fn check_watch(&self) -> Result<()> {
        if self.want.nw.is_stopped() {
            self.inner.check_open()?;
            return Err(Error::new(
                ErrorKind::Closed,
                "the lock's watch has stopped",
            ));
        }
        Ok(())
    }

    /// A mutex's wait (a narrow watch): wait on the key ranked just before ours for its delete,
    /// on a watch that hears every delete of it since before that key was created (else, once
    /// the watch is in place, read the queue again: a key still there then is deleted later, so
    /// its delete reaches the watch); every turn is settled by such a read.
    async fn wait_narrow(&self, c: &mut Claim, r: &Request, notify: &Arc<Notify>) -> Result<Woken> {
        let nw = self.want.nw;
        loop {
            self.check_watch()?;
            if nw.standing(c.rev, Need::Exclusive) == Standing::Gone {
                c.seen = Standing::Gone;
                c.settled = true;
                return Ok(Woken::Look);
            }
            let Some((before, brev)) = c.before.clone() else {
                c.seen = Standing::Owner;
                c.settled = true;
                return Ok(Woken::Look);
            };
            let phase = c
                .watching
                .as_ref()
                .filter(|w| w.key == before && w.rev == brev)
                .map(|w| w.phase());
            match phase {
                Some(Phase::Created) => {
                    let w = c.watching.as_ref().expect("just seen");
                    if c.confirmed || nw.before_covers(w) {
                        c.confirmed = true;
                        c.rewatch = None;
                        if r.within(notify.notified()).await.is_none() {
                            // The deadline: the driver's last look settles it.
                            c.seen = Standing::Waiting;
                            return Ok(Woken::Look);
                        }
                        // Fired, broken, our key gone, or a stale wake-up: look again.
                        continue;
                    }
                    // Read below: the key is still there after the watch was in place.
                }
                Some(Phase::Pending) => {
                    let w = c.watching.as_mut().expect("just seen");
                    if r.within(or_woken(w.settled(), notify)).await.is_none() {
                        c.seen = Standing::Waiting;
                        return Ok(Woken::Look);
                    }
                    continue;
                }
                // Deleted: read again.
                Some(Phase::Fired) => {}
                // A new key before ours, or the watch broke: watch it anew.
                Some(Phase::Broken) | None => {
                    if phase == Some(Phase::Broken) {
                        let again = c.rewatch.is_some();
                        let pace = c.rewatch.get_or_insert_with(|| Backoff::WATCH.start());
                        if r.within(or_woken(pace.wait(), notify)).await.is_none() {
                            c.seen = Standing::Waiting;
                            return Ok(Woken::Look);
                        }
                        // A watch that broke again since the last confirmed one: read before
                        // watching anew, so a waiter whose watches keep breaking (a stream that
                        // keeps restarting) still learns its turn, at the pace. After a first
                        // break, the new watch's confirming read is enough.
                        if again {
                            if let Some(old) = c.watching.take() {
                                nw.end_before(&old);
                            }
                            self.read_turn(c).await?;
                            if c.seen != Standing::Waiting {
                                return Ok(Woken::Look);
                            }
                            continue;
                        }
                    }
                    if let Some(old) = c.watching.take() {
                        nw.end_before(&old);
                    }
                    c.watching = nw.watch_before(&before, brev, notify);
                    c.confirmed = false;
                    continue;
                }
            }
            let created = phase == Some(Phase::Created);
            self.read_turn(c).await?;
            if c.seen != Standing::Waiting {
                return Ok(Woken::Look);
            }
            // Still the same key before ours, read after its watch was in place.
            c.confirmed = created && c.before == Some((before, brev));
        }
    }

    /// One linearizable read of our key and the key ranked just before it: sets `c.seen`
    /// (settled) and `c.before`.
    async fn read_turn(&self, c: &mut Claim) -> Result<()> {
        let rev = c.rev;
        let resp = read_queue(
            self.inner,
            self.want.nw.prefix(),
            rev,
            SortOrder::Descend,
            2,
        )
        .await?;
        let kvs = resp.kvs();
        c.settled = true;
        let ours = kvs
            .first()
            .is_some_and(|kv| kv.create_revision() == rev && kv.key() == c.key);
        if !ours {
            c.seen = Standing::Gone;
            return Ok(());
        }
        c.before = kvs
            .get(1)
            .map(|kv| (kv.key().to_vec(), kv.create_revision()));
        c.seen = if c.before.is_some() {
            Standing::Waiting
        } else {
            Standing::Owner
        };
        Ok(())
    }
}

/// One linearizable read of the keys on `prefix` created up to `rev`, in create order `order`,
/// at most `limit` (0: all).
async fn read_queue(
    inner: &Inner,
    prefix: &[u8],
    rev: i64,
    order: SortOrder,
    limit: i64,
) -> Result<etcd_client::GetResponse> {
    let p = prefix.to_vec();
    inner
        .pool
        .run("read the lock queue", true, move |mut c| {
            let opts = GetOptions::new()
                .with_prefix()
                .with_max_create_revision(rev)
                .with_sort(SortTarget::Create, order)
                .with_limit(limit);
            let p = p.clone();
            async move { c.get(p, Some(opts)).await }
        })
        .await
}

/// A semaphore's size key as `kv` shows it: its mod revision (0 when absent) and size.
fn size_of(kv: Option<&etcd_client::KeyValue>) -> Result<(i64, Option<u32>)> {
    Ok((kv.map_or(0, |kv| kv.mod_revision()), stored_size(kv)?))
}

/// One linearizable read of a semaphore's size key.
pub(crate) async fn read_size(inner: &Inner, prefix: &[u8]) -> Result<(i64, Option<u32>)> {
    let key = size_key(prefix);
    let mut resp = inner
        .pool
        .run("read the semaphore's size", true, move |mut c| {
            let key = key.clone();
            async move { c.get(key, None).await }
        })
        .await?;
    size_of(resp.take_kvs().first())
}

/// One linearizable read of a semaphore's keys, oldest first, and of its size key (its mod
/// revision and size), in one transaction.
async fn read_queue_and_size(
    inner: &Inner,
    prefix: &[u8],
) -> Result<(etcd_client::GetResponse, (i64, Option<u32>))> {
    let (p, size) = (prefix.to_vec(), size_key(prefix));
    let resp = inner
        .pool
        .run("read the semaphore", true, move |mut c| {
            let opts = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend);
            let txn = Txn::new().and_then([
                TxnOp::get(p.clone(), Some(opts)),
                TxnOp::get(size.clone(), None),
            ]);
            async move { c.txn(txn).await }
        })
        .await?;
    let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
        TxnOpResponse::Get(g) => Some(g),
        _ => None,
    });
    let (Some(queue), Some(size)) = (gets.next(), gets.next()) else {
        return Err(Error::new(
            ErrorKind::Backend,
            "an etcd semaphore read without its ranges",
        ));
    };
    Ok((queue, size_of(size.kvs().first())?))
}

/// The driver's standing for what the watch or the server shows of our key.
fn turn(seen: Standing) -> Turn {
    match seen {
        Standing::Owner => Turn::Owner,
        Standing::Gone => Turn::Gone,
        _ => Turn::Waiting,
    }
}

/// Runs `fut` until it ends or `notify` wakes us (our own key's delete wakes a waiter whatever
/// it awaits).
async fn or_woken<F: std::future::Future>(fut: F, notify: &Notify) {
    tokio::select! {
        _ = fut => {}
        _ = notify.notified() => {}
    }
}

/// Where our key (create revision `rev`) stands on the server now: one linearizable read of
/// the keys created up to ours (a semaphore's: of every key and its size, in one transaction;
/// a size that refuses us now is an error, and a turn is ours once our key is marked as
/// holding under the size it was decided with: a size changed between the read and the mark
/// is read and decided again, so an operator's change does not cost a waiter its place; a key
/// the server shows marked holds). Also the mod revision of the size key it last read (0: none
/// read, or absent).
async fn turn_on_server(
    inner: &Inner,
    w: &Want<'_>,
    key: &[u8],
    rev: i64,
) -> Result<(Standing, i64)> {
    let (prefix, need, kind) = (w.nw.prefix(), w.need, w.kind);
    // A mutex or writer only needs to know whether ours is the first key.
    let limit = if need == Need::Exclusive { 1 } else { 0 };
    let mut size_read = 0;
    for _ in 0..3 {
        // A size that refuses us now, told once we know our key is not marked holding.
        let mut refused = None;
        let (resp, stored, size_rev) = if let Need::Permits { n, .. } = need {
            let (resp, (size_rev, stored)) = read_queue_and_size(inner, prefix).await?;
            // Our key was created with the size stored: a waiter counts against whatever
            // size is stored now.
            let size = stored.ok_or_else(|| no_size(w.name))?;
            if n > size {
                refused = Some(too_many(w.name, n, size));
            }
            size_read = size_rev;
            (resp, stored, size_rev)
        } else {
            let resp = read_queue(inner, prefix, rev, SortOrder::Ascend, limit).await?;
            (resp, None, 0)
        };
        let kvs = resp.kvs();
        let Some(ours) = kvs
            .iter()
            .find(|kv| kv.create_revision() == rev && kv.key() == key)
        else {
            // Ours is not among them: gone, unless a limited read stopped at an older key.
            let older = kvs.first().is_some_and(|kv| kv.create_revision() < rev);
            let standing = if older && limit > 0 {
                Standing::Waiting
            } else {
                Standing::Gone
            };
            return Ok((standing, size_read));
        };
        if kind.entry(ours.value()).held {
            // Marked by an earlier try whose answer was lost: we were let in then, and everyone
            // counts our permits as held, whatever the size has become since.
            return Ok((Standing::Owner, size_read));
        }
        if let Some(e) = refused {
            return Err(e);
        }
        let (before, held_after) = ranked(kvs, rev, kind);
        if !need.holds(before.iter(), held_after, stored) {
            return Ok((Standing::Waiting, size_read));
        }
        if !matches!(need, Need::Permits { .. })
            || mark_held(inner, prefix, key, rev, size_rev, &w.value).await?
        {
            return Ok((Standing::Owner, size_read));
        }
        // The size changed since the read (or our key went): read and decide again.
    }
    Ok((Standing::Waiting, size_read))
}

/// The entries of the keys ranked before `rev` (the size key left out), and the permits held
/// by the keys ranked after it.
fn ranked(kvs: &[etcd_client::KeyValue], rev: i64, kind: Kind) -> (Vec<Entry>, u64) {
    let keys = kvs.iter().filter(|kv| !is_size_key(kv.key()));
    let before = keys
        .clone()
        .filter(|kv| kv.create_revision() < rev)
        .map(|kv| kind.entry(kv.value()))
        .collect();
    let after: Vec<Entry> = keys
        .filter(|kv| kv.create_revision() > rev)
        .map(|kv| kind.entry(kv.value()))
        .collect();
    (before, held_weight(after.iter()))
}

/// Marks our semaphore key (`key`, created at `rev`, asking for `value` permits) as holding,
/// while the size key's mod revision is still `size_rev` (0: absent), the one the decision was
/// made under. Whether it did.
async fn mark_held(
    inner: &Inner,
    prefix: &[u8],
    key: &[u8],
    rev: i64,
    size_rev: i64,
    value: &[u8],
) -> Result<bool> {
    let held = [value, HELD.as_bytes()].concat();
    let size = Compare::mod_revision(size_key(prefix), CompareOp::Equal, size_rev);
    set_value_if_ours(inner, "mark the permits held", key, rev, held, &[size]).await
}

impl Claim {
    /// Creates our key (deleting a stale key of ours in the slot first), records our create
    /// revision and tells whether we hold at once.
    ///
    /// A semaphore's size is settled in the same transaction: it creates our key only while
    /// the size key's mod revision is the one whose size we settled on (as the name's watch
    /// last saw it), and stores the size we ask for when none is stored; another size, or a
    /// size key changed since, comes back and is settled again.
    async fn create(&mut self, inner: &Inner, w: &Want<'_>, adopt: bool) -> Result<bool> {
        let (nw, value, kind) = (w.nw, &w.value, w.kind);
        let need = match w.need {
            Need::Permits { n, .. } if adopt => Need::Permits { n, asked: None },
            need => need,
        };
        let prefix = nw.prefix();
        // The size as the watch saw it; what refuses us is read again from the server first.
        let mut size_seen = nw.size_seen();
        let mut size_read = false;
        if let KeyLease::Session(s) = &self.lease {
            // A create that gets no answer may land late: a stray, whatever the slot.
            nw.watch_strays(s.id());
        }
        // A narrow watch (a mutex) needs the key ranked just before ours, read newest first
        // (ours, then that one); a writer only needs the first key; the others need everyone
        // ranked before them.
        let narrow = nw.is_narrow();
        let (limit, order) = match need {
            Need::Exclusive if narrow => (2, SortOrder::Descend),
            Need::Exclusive => (1, SortOrder::Ascend),
            _ => (0, SortOrder::Ascend),
        };
        let mut tries = 0;
        while tries < 3 {
            // A semaphore: the size it counts against, and whether to store it.
            let sized = match need {
                Need::Permits { n, asked } => {
                    let settled =
                        settle_size(w.name, asked, size_seen.1).and_then(|(size, store)| {
                            if n > size {
                                Err(too_many(w.name, n, size))
                            } else {
                                Ok((size, store, size_seen.0))
                            }
                        });
                    match settled {
                        Err(_) if !size_read => {
                            size_seen = read_size(inner, prefix).await?;
                            size_read = true;
                            continue;
                        }
                        settled => Some(settled?),
                    }
                }
                _ => None,
            };
            tries += 1;
            let (pool, key, lease, prefix, value) = (
                inner.pool.clone(),
                self.key.clone(),
                self.lease.id(),
                prefix.to_vec(),
                value.to_vec(),
            );
            // Owned by the claim, so that a cancelled acquire cannot cut the request and leave
            // us unsure whether the key exists: an abandoned claim hands the unfinished request
            // to its cleanup task, which drives it to the end before deleting the key.
            let fut: InFlight = Box::pin(async move {
                pool.run("acquire", true, move |mut c| {
                    let owner = TxnOp::get(
                        prefix.clone(),
                        Some(
                            GetOptions::new()
                                .with_prefix()
                                .with_sort(SortTarget::Create, order)
                                .with_limit(limit),
                        ),
                    );
                    let mut when = vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)];
                    let mut then = vec![
                        TxnOp::put(
                            key.clone(),
                            value.clone(),
                            Some(PutOptions::new().with_lease(lease)),
                        ),
                        owner.clone(),
                    ];
                    let mut or_else = vec![TxnOp::get(key.clone(), None), owner];
                    if let Some((size, store, size_rev)) = sized {
                        let size_key = size_key(&prefix);
                        when.push(Compare::mod_revision(
                            size_key.clone(),
                            CompareOp::Equal,
                            size_rev,
                        ));
                        if store {
                            then.push(TxnOp::put(size_key.clone(), size.to_string(), None));
                        }
                        or_else.push(TxnOp::get(size_key, None));
                    }
                    let txn = Txn::new().when(when).and_then(then).or_else(or_else);
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
                self.rev = rev;
                nw.watch_own(&self.key, rev);
                let Some(TxnOpResponse::Get(g)) = ops.get(1) else {
                    return Err(Error::new(
                        ErrorKind::Backend,
                        "an etcd acquire answer without its range",
                    ));
                };
                self.before = g
                    .kvs()
                    .iter()
                    .find(|kv| kv.create_revision() < rev && !is_size_key(kv.key()))
                    .filter(|_| narrow)
                    .map(|kv| (kv.key().to_vec(), kv.create_revision()));
                let (before, held_after) = ranked(g.kvs(), rev, kind);
                let holds = need.holds(before.iter(), held_after, sized.map(|(size, ..)| size));
                let Some((_, store, size_rev)) = sized.filter(|_| holds) else {
                    return Ok(holds);
                };
                // A semaphore's turn is ours once marked, under the size this transaction saw
                // (one it stored has this transaction's revision).
                let size_rev = if store { rev } else { size_rev };
                return mark_held(inner, nw.prefix(), &self.key, rev, size_rev, &w.value).await;
            }
            // A semaphore's size key changed since the watch saw it: settle again on what it
            // holds now.
            if sized.is_some() {
                if let Some(TxnOpResponse::Get(g)) = ops.get(2) {
                    size_seen = size_of(g.kvs().first())?;
                    size_read = true;
                }
            }
            // Our slot's key exists: left over from an earlier acquisition whose delete failed,
            // or from a retried request. Never adopt it (its token would repeat): delete it.
            let stale = match ops.first() {
                Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| kv.create_revision()),
                _ => None,
            };
            if let Some(stale) = stale {
                delete_if_ours(inner, &self.key, stale).await?;
            }
        }
        Err(Error::new(
            ErrorKind::Backend,
            "could not create the lock key (it, or the semaphore's size, kept changing)",
        ))
    }

    /// Whether a fixed-lease claim's key moved (or may have moved: the move's answer was lost)
    /// onto the session lease to wait: it moves onto a fixed lease again before it holds.
    fn parked(&self, r: &Request) -> bool {
        self.parking.is_some()
            || (!r.lease().is_watchdog() && matches!(self.lease, KeyLease::Session(_)))
    }

    /// Moves our key from its fixed lease onto the handle's session lease, keeping its value,
    /// and revokes the fixed lease: a waiter's key then lives as long as we wait. The session
    /// lease the key is on; `None` when the key is gone.
    ///
    /// Parked from the moment the move is sent: if its answer is lost, the move is sent again
    /// (by the next wait, or before the key moves onto its hold lease) to the same session while
    /// it lives (the key may be there already), and its compare on the fixed lease keeps one
    /// delivered late from putting the key back on the session.
    async fn park(&mut self, inner: &Arc<Inner>) -> Result<Option<i64>> {
        let fixed = match &self.lease {
            KeyLease::Session(s) => return Ok(Some(s.id())),
            KeyLease::Fixed(id) => *id,
        };
        let mut renewed = false;
        let (s, id) = loop {
            let s = match self.parking.clone().filter(|s| s.is_alive()) {
                Some(s) => s,
                None => inner.session(inner.lease).await?,
            };
            self.parking = Some(s.clone());
            let id = s.id();
            match move_to_lease(inner, &self.key, self.rev, Some(fixed), id).await {
                Ok(true) => break (s, id),
                Ok(false) => return Ok(None),
                // The session lease is unknown to the server (revoked before its keepalive
                // noticed; the move's compare found our key on the fixed lease): nothing moved.
                // It is replaced once, as a create on it is; a new one unknown too is the
                // acquire's error.
                Err(e) if is_lease_not_found(&e) => {
                    self.parking = None;
                    inner.drop_session(&s).await;
                    if renewed {
                        return Err(e);
                    }
                    renewed = true;
                }
                Err(e) => return Err(e),
            }
        };
        self.parking = None;
        self.lease = KeyLease::Session(s);
        // Nothing is on it any more.
        reap_lease(inner, fixed);
        Ok(Some(id))
    }

    /// Grants the fixed lease of `d` now that we hold, and moves our key onto it: its clock
    /// starts at the grant. `None` when the key is gone. A move whose answer was lost may have
    /// landed: the lease is kept for the next try (moving onto it again changes nothing)
    /// rather than revoked under the key.
    ///
    /// A kept lease that ran out (the move never landed, or the key would be gone with it), or
    /// that has less than half its length left (the hold would start half spent), is given up
    /// for a new one. The latter is revoked first, so that a move onto it delivered late can
    /// never land after the move onto the new one; if our key was on it, the key goes with it
    /// and the next look starts over.
    async fn unpark(&mut self, inner: &Arc<Inner>, d: Duration) -> Result<Option<Arc<LeaseClock>>> {
        // After a park whose answer was lost, park again first, so that the key is known to be
        // on the session lease, which the move below compares.
        let Some(parked_on) = self.park(inner).await? else {
            return Ok(None);
        };
        if let Some((id, sent)) = self.granted {
            if LeaseClock::starting(sent, d).remaining() < Some(d / 2) {
                inner.pool.revoke_lease(id).await?;
                self.granted = None;
            }
        }
        loop {
            let kept = self.granted.is_some();
            let (id, sent) = match self.granted {
                Some(granted) => granted,
                None => *self.granted.insert(grant_exact(&inner.pool, d).await?),
            };
            let moved = match move_to_lease(inner, &self.key, self.rev, Some(parked_on), id).await {
                Ok(moved) => moved,
                // Expired: nothing of ours is on it, and nothing can land on it any more.
                Err(e) if kept && is_lease_not_found(&e) => {
                    self.granted = None;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.granted = None;
            if !moved {
                // Our key is gone, from this lease too.
                reap_lease(inner, id);
                return Ok(None);
            }
            self.lease = KeyLease::Fixed(id);
            return Ok(Some(LeaseClock::starting(sent, d)));
        }
    }

    /// Ends our registration with the name's watch (and a narrow watch's watch of the key
    /// before ours).
    fn unregister(&mut self, nw: &NameWatch) {
        if self.waiter.take().is_some() {
            nw.remove_waiter(self.rev);
        }
        if let Some(w) = self.watching.take() {
            nw.end_before(&w);
        }
    }

    /// Hands the key, its lease and its slot to the hold; the claim keeps nothing to leave.
    fn take_held(
        &mut self,
        inner: &Arc<Inner>,
        guard_lease: Lease,
        name: Arc<str>,
        nw: Arc<NameWatch>,
        state: StateCell,
    ) -> EtcdHeld {
        let shared = Arc::new(HeldShared {
            inner: inner.clone(),
            name,
            nw,
            key: std::mem::take(&mut self.key),
            rev: self.rev,
            lease: Mutex::new(self.lease.clone()),
            slot: Mutex::new(self.slot.take()),
            state,
            guard_lease: Mutex::new(guard_lease),
        });
        EtcdHeld::new(shared)
    }
}
