//! The watch of one lock name in one client: for a RW lock, a semaphore or an election, a
//! long-lived prefix watch stream of its own and the local mirror of the prefix it maintains;
//! for a mutex, a few single-key watches on the client's one key stream (see `key_watch.rs` and
//! `key_stream.rs`), since a prefix watch in every client sends every change to every client
//! (2·C messages per hand-off among C clients).
//!
//! Why long-lived: a watch created for each wait lands in etcd's "unsynced" watcher group now and
//! then (and always when it starts at a past revision, as Go's `concurrency.Mutex` does), and
//! unsynced watchers are only served by etcd's 100 ms catch-up loop. A watch that is created once,
//! from the current revision, before any wait on the name begins, stays synced and gets every
//! event as the write commits. A narrow stream keeps its key watches for the same reason.
//!
//! The prefix watch's task keeps a mirror of the prefix: every key with its create revision,
//! built from one range read taken after the watch was created and then updated by the watch
//! events. A waiter owns the lock when the mirror (at or after the revision of its own put)
//! shows its own key with the lowest create revision: etcd serializes writes and the watch
//! delivers them in order, and a key created later can never rank lower. The same mirror tells
//! a waiter that its own key vanished (etcd issue 11456) and tells a holder that its key was
//! deleted by someone else (`force_unlock`, lease expiry), which makes the guard Lost at once.
//! Each waiter is woken only when it became the owner or lost its key, so there is no herd.
//!
//! A watch must never go silent unnoticed, or waiters would never wake. Its stream requires a
//! leader (a member cut off from the quorum ends it; only the watch streams do, through clients
//! of their own, so that other requests keep working through an election), a stream that says
//! nothing for a command timeout is asked for a progress report and is given up (and the pool
//! fails over) when none comes within another, and a failover of the pool, which other requests
//! notice first, moves the watch to the new endpoint too. Each new life of the watch rebuilds
//! the mirror.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions};
use lockkit_core::spi::{LeaderFeed, StateCell};
use lockkit_core::{
    Backoff, Error, ErrorKind, FencingToken, Leader, LeaderChanges, LostReason, Result,
};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::client::Pool;
use crate::key_stream::KeyStream;
use crate::key_watch::{BeforeWatch, KeyWatches};
use crate::sem_size::{is_size_key, parse_size};
use crate::strays::{Slots, Strays};
use crate::stream::{self, cancelled, Heard, Listen};

/// The id a prefix watch asks for on its own stream: an answer under another id is a gRPC
/// proxy's.
const PREFIX_WATCH: i64 = 1;

/// Aborts the background task kept in `slot` (a name's watch), if it is still there.
fn abort_task(slot: &Mutex<Option<JoinHandle<()>>>) {
    if let Some(t) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
        t.abort();
    }
}

/// What the mirror says about one of our keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// The mirror has not yet seen the revision of our put: ask again later.
    Unknown,
    /// Our key has the lowest create revision: we hold the lock.
    Owner,
    /// Someone created before us is still there.
    Waiting,
    /// Our key is gone.
    Gone,
}

/// What kind of primitive a prefix holds; it decides how a key's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Every key is exclusive (Go's `concurrency.Mutex` keys included, whatever their value).
    Mutex,
    /// Value `r`: a reader; anything else: a writer.
    RwLock,
    /// Value: the number of permits the key asks for, `+` after it once it holds them (see
    /// [`HELD`]).
    Semaphore,
    /// Every key is a candidate, the first one leads (Go's `concurrency.Election`); its value
    /// is what the candidate proclaims.
    Election,
}

/// What one key on a prefix stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Excludes everybody after it (mutex holders, writers).
    pub(crate) exclusive: bool,
    /// Permits it takes (semaphores; 1 otherwise).
    pub(crate) weight: u32,
    /// A semaphore key marked as holding its permits.
    pub(crate) held: bool,
}

/// What a semaphore key's value ends with once it holds: holding is written down, because a
/// holder keeps its permits when the size shrinks, and "the permits ranked before me fit" no
/// longer says who holds then. The mark is put by a transaction that compares the size key's
/// mod revision with the one the decision was made under.
pub(crate) const HELD: &str = "+";

/// The permits held by `entries` (semaphore keys marked as holding).
pub(crate) fn held_weight<'a>(entries: impl Iterator<Item = &'a Entry>) -> u64 {
    entries
        .filter(|e| e.held)
        .map(|e| u64::from(e.weight))
        .sum()
}

impl Kind {
    pub(crate) fn entry(self, value: &[u8]) -> Entry {
        match self {
            Kind::Mutex | Kind::Election => Entry {
                exclusive: true,
                weight: 1,
                held: false,
            },
            Kind::RwLock => Entry {
                exclusive: value != b"r",
                weight: 1,
                held: false,
            },
            Kind::Semaphore => {
                let text = std::str::from_utf8(value).unwrap_or("");
                let (count, held) = match text.strip_suffix(HELD) {
                    Some(count) => (count, true),
                    None => (text, false),
                };
                Entry {
                    exclusive: false,
                    weight: count.parse().unwrap_or(1),
                    held,
                }
            }
        }
    }
}

/// What an acquirer needs from the keys ranked before its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nobody before us (mutex, write lock).
    Exclusive,
    /// No exclusive key before us (read lock).
    Shared,
    /// The permits of everyone before us, plus those held by keys after us, plus our `n` fit
    /// in the semaphore's size: the size stored with it, else the size the handle asks for
    /// (`asked`, `None` for a handle that adopts the stored one).
    Permits { n: u32, asked: Option<u32> },
}

impl Need {
    /// Whether an acquirer with these keys ranked before it holds (FIFO by create revision),
    /// where the semaphore's stored size is `stored` and `held_after` permits are held by keys
    /// ranked after it (only after a shrink: they were let in under a larger size).
    pub(crate) fn holds<'a>(
        self,
        before: impl Iterator<Item = &'a Entry>,
        held_after: u64,
        stored: Option<u32>,
    ) -> bool {
        match self {
            Need::Exclusive => before.count() == 0,
            Need::Shared => !before.into_iter().any(|e| e.exclusive),
            Need::Permits { n, asked } => {
                let Some(total) = stored.or(asked) else {
                    return false;
                };
                let mut sum = u64::from(n) + held_after;
                for e in before {
                    sum += u64::from(e.weight);
                    if sum > u64::from(total) {
                        return false;
                    }
                }
                sum <= u64::from(total)
            }
        }
    }

    /// Whether a semaphore acquirer can never hold under the stored size `stored`: it asks for
    /// more permits than there are, or there is no size at all. It must be told.
    pub(crate) fn refused(self, stored: Option<u32>) -> bool {
        match self {
            Need::Permits { n, asked } => stored.or(asked).is_none_or(|total| n > total),
            _ => false,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Mirror {
    kind: Kind,
    synced: bool,
    seen_rev: i64,
    keys: HashMap<Vec<u8>, i64>,
    order: BTreeMap<i64, Entry>,
    /// A semaphore's size key: its mod revision and the size it holds (`sem_size.rs`).
    size: Option<(i64, u32)>,
    waiters: HashMap<i64, (Arc<Notify>, Need)>,
    holders: HashMap<i64, StateCell>,
    /// An election's candidates' values, by create revision.
    values: HashMap<i64, Vec<u8>>,
    /// An election's observers.
    observers: Vec<Observer>,
}

/// An election's observer: it is told the mirror's leader once the mirror has reached `from`,
/// the revision of the read that gave it its first state (the mirror may still be behind that
/// read: a campaign that returned has seen its own key, the local watch may not have yet).
#[derive(Debug)]
struct Observer {
    feed: LeaderFeed,
    from: i64,
}

impl Mirror {
    fn new(kind: Kind) -> Mirror {
        Mirror {
            kind,
            synced: false,
            seen_rev: 0,
            keys: HashMap::new(),
            order: BTreeMap::new(),
            size: None,
            waiters: HashMap::new(),
            holders: HashMap::new(),
            values: HashMap::new(),
            observers: Vec::new(),
        }
    }

    /// An election's leader as the mirror shows it: the first key, its value and its create
    /// revision as the term. `None` while the mirror is not in step with the server.
    fn leader(&self) -> Option<Option<Leader>> {
        if !self.synced {
            return None;
        }
        let first = self.order.keys().next().map(|rev| {
            let value = self.values.get(rev).cloned().unwrap_or_default();
            Leader::new(value, FencingToken(*rev as u64))
        });
        Some(first)
    }

    /// Tells an election's observers its leader, if it changed.
    fn announce(&mut self) {
        if self.observers.is_empty() {
            return;
        }
        let Some(leader) = self.leader() else { return };
        let seen = self.seen_rev;
        self.observers.retain_mut(|o| {
            if o.from > seen {
                !o.feed.is_closed()
            } else {
                o.feed.send(leader.clone())
            }
        });
    }

    fn standing(&self, rev: i64, need: Need) -> Standing {
        if !self.synced || self.seen_rev < rev {
            return Standing::Unknown;
        }
        match self.order.get(&rev) {
            None => return Standing::Gone,
            // Marked as holding (by a mark whose answer may have been lost): it holds.
            Some(e) if e.held => return Standing::Owner,
            Some(_) => {}
        }
        let stored = self.size.map(|(_, n)| n);
        // A waiter the size refuses is woken as if it held: the read that settles a turn
        // refuses it.
        let held_after = match need {
            Need::Permits { .. } => held_weight(self.order.range(rev + 1..).map(|(_, e)| e)),
            _ => 0,
        };
        let before = self.order.range(..rev).map(|(_, e)| e);
        if need.refused(stored) || need.holds(before, held_after, stored) {
            Standing::Owner
        } else {
            Standing::Waiting
        }
    }

    fn reset(&mut self, rev: i64, kvs: Vec<etcd_client::KeyValue>) {
        self.keys.clear();
        self.order.clear();
        self.values.clear();
        self.size = None;
        for kv in &kvs {
            self.put(kv);
        }
        self.seen_rev = rev;
        self.synced = true;
    }

    fn put(&mut self, kv: &etcd_client::KeyValue) {
        let (key, create_rev, value) = (kv.key(), kv.create_revision(), kv.value());
        if self.kind == Kind::Semaphore && is_size_key(key) {
            // A size that is no number is no size: the settling read reports it.
            self.size = parse_size(value).ok().map(|n| (kv.mod_revision(), n));
            return;
        }
        if let Some(old) = self.keys.insert(key.to_vec(), create_rev) {
            self.order.remove(&old);
            self.values.remove(&old);
        }
        self.order.insert(create_rev, self.kind.entry(value));
        if self.kind == Kind::Election {
            self.values.insert(create_rev, value.to_vec());
        }
    }

    fn delete(&mut self, key: &[u8]) {
        if self.kind == Kind::Semaphore && is_size_key(key) {
            self.size = None;
            return;
        }
        if let Some(old) = self.keys.remove(key) {
            self.order.remove(&old);
            self.values.remove(&old);
        }
    }

    /// Wakes the waiters whose standing is decided and marks holders whose key is gone Lost.
    fn settle(&mut self) {
        for (rev, (n, need)) in &self.waiters {
            if matches!(self.standing(*rev, *need), Standing::Owner | Standing::Gone) {
                n.notify_one();
            }
        }
        let gone: Vec<i64> = self
            .holders
            .keys()
            .copied()
            .filter(|r| self.standing(*r, Need::Shared) == Standing::Gone)
            .collect();
        for r in gone {
            if let Some(cell) = self.holders.remove(&r) {
                cell.mark_lost(LostReason::Deleted);
            }
        }
    }
}

/// Whether a watch is in place.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Readiness {
    Pending,
    Ready,
    /// etcd refused it (no read permission on the prefix): the message, for the acquirer.
    Refused(String),
}

/// The watch of one lock prefix, shared by every handle, acquire and guard of that lock in one
/// client. A prefix watch's task stops when the last user drops it. A mutex's is narrow (see
/// `key_watch.rs`): it watches a few keys on the client's key stream, not the prefix, and keeps
/// no mirror.
#[derive(Debug)]
pub(crate) struct NameWatch {
    prefix: Arc<[u8]>,
    kind: Kind,
    /// A prefix watch's mirror (boxed, and never made for a narrow watch: a held mutex costs a
    /// few hundred bytes less).
    mirror: OnceLock<Box<Mutex<Mirror>>>,
    /// A narrow watch's stream (a mutex's), which keeps its registrations; `None` for a prefix
    /// watch.
    keys: Option<Arc<KeyStream>>,
    /// A prefix watch's readiness (a narrow watch is ready at once: its stream creates its
    /// watches when it can).
    ready: Option<watch::Sender<Readiness>>,
    slots: Slots,
    strays: Strays,
    /// A prefix watch's task.
    task: Mutex<Option<JoinHandle<()>>>,
    stopped: AtomicBool,
}

impl Drop for NameWatch {
    fn drop(&mut self) {
        abort_task(&self.task);
    }
}

impl NameWatch {
    /// Creates the watch of `prefix` (which ends with `/`): a mutex's on the client's key
    /// stream `keys`, which it asks for, any other's on a stream of its own, whose task starts
    /// here. Stray keys of the handle's sessions (see `strays.rs`) go to `strays`.
    pub(crate) fn start(
        pool: Arc<Pool>,
        prefix: Arc<[u8]>,
        kind: Kind,
        strays: Strays,
        keys: impl FnOnce() -> Arc<KeyStream>,
    ) -> Arc<NameWatch> {
        let narrow = kind == Kind::Mutex;
        let ready = (!narrow).then(|| watch::channel(Readiness::Pending).0);
        let nw = Arc::new(NameWatch {
            prefix,
            kind,
            mirror: OnceLock::new(),
            keys: narrow.then(keys),
            ready,
            slots: Slots::default(),
            strays,
            task: Mutex::new(None),
            stopped: AtomicBool::new(false),
        });
        if !narrow {
            let task = tokio::spawn(run(Arc::downgrade(&nw), pool));
            *nw.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        }
        nw
    }

    /// Stops the watch (the handle was closed, or nothing used the name for a while): holders
    /// turn Lost, waiters are woken and find the handle closed.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        abort_task(&self.task);
        if let Some(mut k) = self.keys() {
            k.drop_name(&self.prefix);
        }
        let Some(m) = self.mirror.get() else { return };
        let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
        m.synced = false;
        for (_, cell) in m.holders.drain() {
            cell.mark_lost(LostReason::Closed);
        }
        // Their streams end.
        m.observers.clear();
        for (n, _) in m.waiters.values() {
            n.notify_one();
        }
    }

    /// Whether [`stop`](Self::stop) was called.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// The watched prefix.
    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// Whether `kv` is a key of one of our sessions in a slot no acquisition of ours holds:
    /// its name and create revision.
    fn stray(&self, kv: &etcd_client::KeyValue) -> Option<(Vec<u8>, i64)> {
        self.strays.stray(&self.prefix, &self.slots, kv)
    }

    /// Waits until the watch is in place and the mirror is built.
    pub(crate) async fn ready(&self, limit: Duration) -> Result<()> {
        let Some(ready) = &self.ready else {
            return Ok(());
        };
        let mut rx = ready.subscribe();
        let settled = tokio::time::timeout(limit, rx.wait_for(|r| *r != Readiness::Pending)).await;
        let settled = settled.ok().and_then(|r| r.ok()).map(|r| r.clone());
        match settled {
            Some(Readiness::Ready) => Ok(()),
            Some(Readiness::Refused(why)) => {
                Err(Error::new(ErrorKind::Auth, why).with_retryable(false))
            }
            _ => Err(Error::new(
                ErrorKind::Connection,
                "the etcd watch of the lock could not be established",
            )),
        }
    }

    pub(crate) fn mirror(&self) -> MutexGuard<'_, Mirror> {
        let m = self
            .mirror
            .get_or_init(|| Box::new(Mutex::new(Mirror::new(self.kind))));
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A narrow watch's registrations (those of every mutex name of the client); `None` for a
    /// prefix watch.
    fn keys(&self) -> Option<MutexGuard<'_, KeyWatches>> {
        self.keys.as_ref().map(|k| k.keys())
    }

    /// Whether this is a narrow watch (a mutex's): waiters watch the key before theirs.
    pub(crate) fn is_narrow(&self) -> bool {
        self.keys.is_some()
    }

    /// Where our key of create revision `rev` stands. A narrow watch knows only whether the
    /// key is gone.
    pub(crate) fn standing(&self, rev: i64, need: Need) -> Standing {
        if let Some(k) = self.keys() {
            return if k.is_gone(&self.prefix, rev) {
                Standing::Gone
            } else {
                Standing::Unknown
            };
        }
        self.mirror().standing(rev, need)
    }

    /// Our key `key` was created at `rev`: a narrow watch watches it for its delete (a prefix
    /// watch sees it anyway).
    pub(crate) fn watch_own(&self, key: &[u8], rev: i64) {
        if let Some(mut k) = self.keys() {
            k.own(&self.prefix, key, rev);
        }
    }

    /// A narrow watch on `key` (its incarnation created at `rev`, ranked just before a
    /// waiter's key), whose delete wakes `waiter`.
    pub(crate) fn watch_before(
        &self,
        key: &[u8],
        rev: i64,
        waiter: &Arc<Notify>,
    ) -> Option<BeforeWatch> {
        self.keys()
            .map(|mut k| k.before(&self.prefix, key, rev, waiter.clone()))
    }

    /// Whether `w`'s watch hears every delete of the incarnation it waits on.
    pub(crate) fn before_covers(&self, w: &BeforeWatch) -> bool {
        self.keys().is_some_and(|k| k.covers(w))
    }

    /// Ends a before watch.
    pub(crate) fn end_before(&self, w: &BeforeWatch) {
        if let Some(mut k) = self.keys() {
            k.end_before(w);
        }
    }

    /// A narrow watch watches the keys named by our session lease `lease` for strays (a prefix
    /// watch sees every key): `<prefix><lease hex>` and its slots `…_<n>`.
    pub(crate) fn watch_strays(&self, lease: i64) {
        if let Some(mut k) = self.keys() {
            k.strays(&self.prefix, &self.slots, lease, |l| self.strays.owns(l));
        }
    }

    /// Our key of create revision `rev` is done with (deleted, or handed to the reaper).
    pub(crate) fn forget(&self, rev: i64) {
        if let Some(mut k) = self.keys() {
            k.forget(&self.prefix, rev);
        }
    }

    /// A semaphore's size key as the mirror last saw it: its mod revision (0 when absent) and
    /// size. `(0, None)` before the mirror is in step with the server.
    pub(crate) fn size_seen(&self) -> (i64, Option<u32>) {
        if self.is_narrow() {
            return (0, None);
        }
        let m = self.mirror();
        match m.size {
            Some((rev, n)) if m.synced => (rev, Some(n)),
            _ => (0, None),
        }
    }

    /// Registers a waiter for `rev`; it is notified when it became owner or lost its key (on a
    /// narrow watch: when its key, or the key before it, is deleted).
    pub(crate) fn add_waiter(&self, rev: i64, need: Need) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        if let Some(mut k) = self.keys() {
            k.set_waiter(&self.prefix, rev, Some(n.clone()));
            return n;
        }
        self.mirror().waiters.insert(rev, (n.clone(), need));
        n
    }

    pub(crate) fn remove_waiter(&self, rev: i64) {
        if let Some(mut k) = self.keys() {
            k.set_waiter(&self.prefix, rev, None);
            return;
        }
        self.mirror().waiters.remove(&rev);
    }

    /// Registers a holder: its state turns Lost when its key disappears.
    pub(crate) fn add_holder(&self, rev: i64, cell: &StateCell) {
        if let Some(mut k) = self.keys() {
            k.set_holder(&self.prefix, rev, cell);
            return;
        }
        let mut m = self.mirror();
        if m.standing(rev, Need::Shared) == Standing::Gone {
            cell.mark_lost(LostReason::Deleted);
            return;
        }
        m.holders.insert(rev, cell.clone());
    }

    /// Every change of an election's leader from now on, starting with `first`, the leader
    /// a linearizable read at revision `rev` found. Later states come from the mirror once it
    /// has reached `rev`, so the stream never goes back to an older state than the read's; every
    /// new life of the watch sends the state it finds, so a stream survives a broken watch and
    /// ends on the current state.
    pub(crate) fn observe(&self, first: Option<Leader>, rev: i64) -> LeaderChanges {
        let (mut feed, changes) = LeaderFeed::channel();
        let mut m = self.mirror();
        if self.is_stopped() {
            // Closed while the caller read: the stream ends.
            return changes;
        }
        match m.leader() {
            Some(leader) if m.seen_rev >= rev => feed.send(leader),
            _ => feed.send(first),
        };
        m.observers.push(Observer { feed, from: rev });
        changes
    }

    pub(crate) fn remove_holder(&self, rev: i64) {
        self.forget(rev);
        if !self.is_narrow() {
            self.mirror().holders.remove(&rev);
        }
    }

    /// Reserves the lowest free key slot of this client for this lock (see `Slot`).
    pub(crate) fn take_slot(self: &Arc<Self>) -> Slot {
        let mut s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        while s.contains(&n) {
            n += 1;
        }
        s.insert(n);
        Slot {
            nw: self.clone(),
            n,
        }
    }
}

/// A key slot: several acquisitions of one lock through one client (one lease) need distinct
/// keys, so slot 0 is `<prefix><lease hex>` (the key Go's `concurrency.Mutex` uses) and slot n is
/// `<prefix><lease hex>_<n>`. A slot stays reserved until its key is known to be deleted (or its
/// deletion was tried), so a key is never shared by two live acquisitions.
#[derive(Debug)]
pub(crate) struct Slot {
    nw: Arc<NameWatch>,
    n: u32,
}

impl Slot {
    /// The key for this slot under lease `lease`.
    pub(crate) fn key(&self, lease: i64) -> Vec<u8> {
        let mut k = self.nw.prefix.to_vec();
        if self.n == 0 {
            k.extend_from_slice(format!("{lease:x}").as_bytes());
        } else {
            k.extend_from_slice(format!("{lease:x}_{}", self.n).as_bytes());
        }
        k
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.nw
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.n);
    }
}

async fn run(nw: std::sync::Weak<NameWatch>, pool: Arc<Pool>) {
    let mut retry = Backoff::WATCH.start();
    loop {
        let Some(prefix) = nw.upgrade().map(|n| n.prefix.to_vec()) else {
            return;
        };
        let key = String::from_utf8_lossy(&prefix).into_owned();
        let ended = session_of_watch(&nw, &pool, prefix).await;
        let why = match &ended {
            Ok(()) => "it moved to another endpoint".to_string(),
            Err(e) => e.to_string(),
        };
        match ended {
            Ok(()) => retry.reset(),
            Err(e) => {
                tracing::debug!(
                    backend = "etcd",
                    key,
                    error = %e,
                    "lockkit: lock watch broke; restarting it"
                );
                if e.kind() == ErrorKind::Auth {
                    if let Some(n) = nw.upgrade() {
                        if let Some(ready) = &n.ready {
                            ready.send_replace(Readiness::Refused(e.to_string()));
                        }
                    }
                }
            }
        }
        if let Some(n) = nw.upgrade() {
            let mut m = n.mirror();
            m.synced = false;
            // An election's observers learn that they may have missed changes; the next life
            // of the watch sends them the state it finds.
            m.observers.retain_mut(|o| {
                o.feed.fail(Error::new(
                    ErrorKind::Connection,
                    format!(
                        "the election's watch restarted ({why}); changes in between may be missed"
                    ),
                ))
            });
        } else {
            return;
        }
        retry.wait().await;
    }
}

/// One life of the watch stream: create, wait for `created`, range, then apply events until the
/// stream ends.
async fn session_of_watch(
    nw: &std::sync::Weak<NameWatch>,
    pool: &Arc<Pool>,
    prefix: Vec<u8>,
) -> Result<()> {
    let limit = pool.timeout();
    // Subscribed first, so a failover during the setup is seen too.
    let mut moves = pool.moves();
    moves.mark_unchanged();
    let (idx, mut client) = match pool.current_watcher().await {
        Ok(c) => c,
        Err(e) => {
            pool.failed(pool.current().0);
            return Err(e);
        }
    };
    // The login whose token the stream carries (noted before it opens).
    let login = pool.watcher_login(idx);
    let opts = WatchOptions::new()
        .with_prefix()
        .with_watch_id(PREFIX_WATCH);
    let mut stream = stream::open(pool, idx, &mut client, prefix.clone(), opts).await?;
    // The `created` answer: from here on every event on the prefix reaches us. A gRPC proxy
    // numbers watches itself (and answers no progress request: the stream is probed instead).
    let main = match tokio::time::timeout(limit, stream.message()).await {
        Ok(Ok(Some(r))) if r.created() && r.canceled() => {
            return Err(stream::refusal(pool, idx, login, r.cancel_reason()).await);
        }
        Ok(Ok(Some(r))) if r.created() => r.watch_id(),
        _ => {
            pool.failed(idx);
            return Err(Error::new(
                ErrorKind::Connection,
                "etcd watch was not created",
            ));
        }
    };
    let proxied = main != PREFIX_WATCH;
    let p2 = prefix.clone();
    let mut resp = pool
        .run("range", true, move |mut c| {
            let p = p2.clone();
            async move { c.get(p, Some(GetOptions::new().with_prefix())).await }
        })
        .await?;
    let base = resp.take_header().map(|h| h.revision()).unwrap_or(0);
    {
        let Some(n) = nw.upgrade() else { return Ok(()) };
        let kvs = resp.take_kvs();
        let strays: Vec<_> = kvs.iter().filter_map(|kv| n.stray(kv)).collect();
        let mut m = n.mirror();
        m.reset(base, kvs);
        m.settle();
        m.announce();
        drop(m);
        if let Some(ready) = &n.ready {
            ready.send_replace(Readiness::Ready);
        }
        for (key, rev) in strays {
            n.strays.reap(pool, key, rev);
        }
    }
    // When the stream last said something, and whether a progress report was asked for since.
    let mut listen = Listen::new(pool, idx, moves);
    if proxied {
        listen.probe();
    }
    let mut probing = false;
    loop {
        let r = match listen.next(&mut stream, None).await? {
            Heard::Message(r) => r,
            Heard::Moved => return Ok(()),
            Heard::Command(_) => continue,
            Heard::Quiet => {
                // Behind a gRPC proxy: a watch of the prefix key alone that hears nothing,
                // created and cancelled again, shows the stream is alive.
                if !probing {
                    let opts = stream::probe(PREFIX_WATCH + 1);
                    stream::create(&mut stream, prefix.clone(), opts, limit).await?;
                    probing = true;
                }
                continue;
            }
        };
        if proxied && r.watch_id() != main {
            // The probe's answers: cancelled once created.
            if r.created() {
                probing = false;
                if !r.canceled() {
                    stream::cancel(&mut stream, r.watch_id(), limit).await?;
                }
            }
            continue;
        }
        let Some(n) = nw.upgrade() else { return Ok(()) };
        if r.canceled() {
            return Err(cancelled(r.cancel_reason()));
        }
        let mut strays = Vec::new();
        let mut m = n.mirror();
        if r.events().is_empty() {
            // A progress report: every event up to its revision has been sent.
            if let Some(rev) = r.header().map(|h| h.revision()) {
                m.seen_rev = m.seen_rev.max(rev);
            }
        }
        let events = r.events();
        for (i, ev) in events.iter().enumerate() {
            let Some(kv) = ev.kv() else { continue };
            if kv.mod_revision() <= base {
                continue;
            }
            match ev.event_type() {
                EventType::Put => {
                    m.put(kv);
                    strays.extend(n.stray(kv));
                }
                EventType::Delete => m.delete(kv.key()),
            }
            if kv.mod_revision() > m.seen_rev {
                m.seen_rev = kv.mod_revision();
            }
            // Every change, in order, once its revision is complete: one response may carry
            // several revisions, and one revision several events (a revoked lease deletes all
            // its keys at once), whose states in between never existed.
            let next = events
                .get(i + 1)
                .and_then(|e| e.kv())
                .map(|kv| kv.mod_revision());
            if next != Some(kv.mod_revision()) {
                m.announce();
            }
        }
        m.settle();
        drop(m);
        for (key, rev) in strays {
            n.strays.reap(pool, key, rev);
        }
    }
}
