//! One long-lived watch stream per lock name per client: for a RW lock, a semaphore or an
//! election, a prefix watch and the local mirror of the prefix it maintains; for a mutex, a
//! narrow stream of single-key watches (see `key_watch.rs`), since a prefix watch in every client
//! sends every change to every client (2·C messages per hand-off among C clients).
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
//! the mirror (or creates the narrow stream's key watches again).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions};
use lockkit_core::spi::{LeaderFeed, StateCell};
use lockkit_core::{
    Backoff, Error, ErrorKind, FencingToken, Leader, LeaderChanges, LostReason, Result,
};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::Pool;
use crate::key_watch::{BeforeWatch, Cmd, KeyWatches};

/// Aborts the background task kept in `slot` (a name's watch), if it is still there.
fn abort_task(slot: &Mutex<Option<JoinHandle<()>>>) {
    if let Some(t) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
        t.abort();
    }
}
use crate::strays::Strays;

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
    /// Value: the number of permits the key holds.
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
}

impl Kind {
    pub(crate) fn entry(self, value: &[u8]) -> Entry {
        match self {
            Kind::Mutex | Kind::Election => Entry {
                exclusive: true,
                weight: 1,
            },
            Kind::RwLock => Entry {
                exclusive: value != b"r",
                weight: 1,
            },
            Kind::Semaphore => Entry {
                exclusive: false,
                weight: std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1),
            },
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
    /// The permits of everyone before us plus ours fit in `total`.
    Permits { n: u32, total: u32 },
}

impl Need {
    /// Whether an acquirer with these keys ranked before it holds (FIFO by create revision).
    pub(crate) fn holds<'a>(self, before: impl Iterator<Item = &'a Entry>) -> bool {
        match self {
            Need::Exclusive => before.count() == 0,
            Need::Shared => !before.into_iter().any(|e| e.exclusive),
            Need::Permits { n, total } => {
                let mut sum = u64::from(n);
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
}

#[derive(Debug)]
pub(crate) struct Mirror {
    kind: Kind,
    synced: bool,
    seen_rev: i64,
    keys: HashMap<Vec<u8>, i64>,
    order: BTreeMap<i64, Entry>,
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
        if !self.order.contains_key(&rev) {
            return Standing::Gone;
        }
        if need.holds(self.order.range(..rev).map(|(_, e)| e)) {
            Standing::Owner
        } else {
            Standing::Waiting
        }
    }

    fn reset(&mut self, rev: i64, kvs: Vec<etcd_client::KeyValue>) {
        self.keys.clear();
        self.order.clear();
        self.values.clear();
        for kv in kvs {
            self.put(kv.key(), kv.create_revision(), kv.value());
        }
        self.seen_rev = rev;
        self.synced = true;
    }

    fn put(&mut self, key: &[u8], create_rev: i64, value: &[u8]) {
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
/// client. The task stops when the last user drops it. A mutex's is narrow (see
/// `key_watch.rs`): it watches a few keys, not the prefix, and keeps no mirror.
#[derive(Debug)]
pub(crate) struct NameWatch {
    prefix: Vec<u8>,
    mirror: Mutex<Mirror>,
    /// A narrow watch's registrations (a mutex's); `None` for a prefix watch.
    keys: Option<Mutex<KeyWatches>>,
    ready: watch::Sender<Readiness>,
    slots: Mutex<BTreeSet<u32>>,
    strays: Strays,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for NameWatch {
    fn drop(&mut self) {
        abort_task(&self.task);
    }
}

impl NameWatch {
    /// Creates the watch of `prefix` (which ends with `/`) and starts its task; stray keys of
    /// the handle's sessions (see `strays.rs`) go to `strays`.
    pub(crate) fn start(
        pool: Arc<Pool>,
        prefix: Vec<u8>,
        kind: Kind,
        strays: Strays,
    ) -> Arc<NameWatch> {
        let (ready, _) = watch::channel(Readiness::Pending);
        let (cmds, rx) = mpsc::unbounded_channel();
        let nw = Arc::new(NameWatch {
            prefix,
            mirror: Mutex::new(Mirror::new(kind)),
            keys: (kind == Kind::Mutex).then(|| Mutex::new(KeyWatches::new(cmds))),
            ready,
            slots: Mutex::new(BTreeSet::new()),
            strays,
            task: Mutex::new(None),
        });
        let task = tokio::spawn(run(Arc::downgrade(&nw), pool, rx));
        *nw.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        nw
    }

    /// Stops the watch (the handle was closed): holders turn Lost, waiters are woken and find
    /// the handle closed.
    pub(crate) fn stop(&self) {
        abort_task(&self.task);
        if let Some(mut k) = self.keys() {
            k.stop();
        }
        let mut m = self.mirror();
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
        self.task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// The watched prefix.
    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// Whether `kv` is a key of one of our sessions in a slot no acquisition of ours holds.
    fn is_stray(&self, kv: &etcd_client::KeyValue) -> bool {
        self.strays
            .slot_of(&self.prefix, kv.key(), kv.lease())
            .is_some_and(|slot| {
                !self
                    .slots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&slot)
            })
    }

    /// Waits until the watch is in place and the mirror is built.
    pub(crate) async fn ready(&self, limit: Duration) -> Result<()> {
        let mut rx = self.ready.subscribe();
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
        self.mirror.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A narrow watch's registrations; `None` for a prefix watch.
    pub(crate) fn keys(&self) -> Option<MutexGuard<'_, KeyWatches>> {
        self.keys
            .as_ref()
            .map(|k| k.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether this is a narrow watch (a mutex's): waiters watch the key before theirs.
    pub(crate) fn is_narrow(&self) -> bool {
        self.keys.is_some()
    }

    /// Where our key of create revision `rev` stands. A narrow watch knows only whether the
    /// key is gone.
    pub(crate) fn standing(&self, rev: i64, need: Need) -> Standing {
        if let Some(k) = self.keys() {
            return if k.is_gone(rev) {
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
            k.own(key, rev);
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
        self.keys().map(|mut k| k.before(key, rev, waiter.clone()))
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
    /// watch sees every key): `<prefix><lease hex>` and its slots `…_<n>` (the range up to
    /// `` ` ``, the byte after `_`; another lease's keys in it are not ours).
    pub(crate) fn watch_strays(&self, lease: i64) {
        if let Some(mut k) = self.keys() {
            let range = || {
                let mut start = self.prefix.clone();
                start.extend_from_slice(format!("{lease:x}").as_bytes());
                let mut end = start.clone();
                end.push(b'`');
                (start, end)
            };
            k.strays(lease, range, |l| self.strays.owns(l));
        }
    }

    /// Our key of create revision `rev` is done with (deleted, or handed to the reaper).
    pub(crate) fn forget(&self, rev: i64) {
        if let Some(mut k) = self.keys() {
            k.forget(rev);
        }
    }

    /// Registers a waiter for `rev`; it is notified when it became owner or lost its key (on a
    /// narrow watch: when its key, or the key before it, is deleted).
    pub(crate) fn add_waiter(&self, rev: i64, need: Need) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        if let Some(mut k) = self.keys() {
            k.set_waiter(rev, Some(n.clone()));
            return n;
        }
        self.mirror().waiters.insert(rev, (n.clone(), need));
        n
    }

    pub(crate) fn remove_waiter(&self, rev: i64) {
        if let Some(mut k) = self.keys() {
            k.set_waiter(rev, None);
            return;
        }
        self.mirror().waiters.remove(&rev);
    }

    /// Registers a holder: its state turns Lost when its key disappears.
    pub(crate) fn add_holder(&self, rev: i64, cell: &StateCell) {
        if let Some(mut k) = self.keys() {
            k.set_holder(rev, cell);
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
        self.mirror().holders.remove(&rev);
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
        let mut k = self.nw.prefix.clone();
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

async fn run(
    nw: std::sync::Weak<NameWatch>,
    pool: Arc<Pool>,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
) {
    let mut retry = Backoff::WATCH.start();
    loop {
        let Some(prefix) = nw.upgrade().map(|n| n.prefix.clone()) else {
            return;
        };
        let key = String::from_utf8_lossy(&prefix).into_owned();
        let ended = session_of_watch(&nw, &pool, prefix, &mut cmds).await;
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
                        n.ready.send_replace(Readiness::Refused(e.to_string()));
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

/// One life of the watch stream: create, wait for `created`, range (or, on a narrow watch, create
/// its key watches), then apply events until the stream ends.
async fn session_of_watch(
    nw: &std::sync::Weak<NameWatch>,
    pool: &Arc<Pool>,
    prefix: Vec<u8>,
    cmds: &mut mpsc::UnboundedReceiver<Cmd>,
) -> Result<()> {
    let narrow = nw.upgrade().is_some_and(|n| n.is_narrow());
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
    // A narrow stream is anchored by a watch of the prefix itself, a key no lock writes; its
    // key watches come and go on it.
    let opts = if narrow {
        WatchOptions::new()
    } else {
        WatchOptions::new().with_prefix()
    };
    let opened = tokio::time::timeout(limit, client.watch(prefix.clone(), Some(opts))).await;
    let mut stream = match opened {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            pool.failed(idx);
            return Err(crate::client::map_err(e, "watch"));
        }
        Err(_) => {
            pool.failed(idx);
            return Err(Error::new(ErrorKind::Timeout, "etcd watch did not open"));
        }
    };
    // The `created` answer: from here on every event on the prefix reaches us.
    match tokio::time::timeout(limit, stream.message()).await {
        Ok(Ok(Some(r))) if r.created() && r.canceled() => {
            return Err(cancelled(r.cancel_reason()));
        }
        Ok(Ok(Some(r))) if r.created() => {}
        _ => {
            pool.failed(idx);
            return Err(Error::new(
                ErrorKind::Connection,
                "etcd watch was not created",
            ));
        }
    }
    // The narrow watch's key watches in place of the mirror: created again (a create still
    // queued for one of them finds it live on this stream and is skipped).
    let mut live = std::collections::HashSet::new();
    if narrow {
        let Some(n) = nw.upgrade() else { return Ok(()) };
        let ids = n.keys().map(|mut k| k.restart()).unwrap_or_default();
        for id in ids {
            create_key_watch(&n, pool, &mut stream, &mut live, id).await?;
        }
        n.ready.send_replace(Readiness::Ready);
        drop(n);
        return narrow_stream(nw, pool, idx, stream, cmds, live, moves).await;
    }
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
        let strays: Vec<_> = kvs.iter().filter(|kv| n.is_stray(kv)).map(stray).collect();
        let mut m = n.mirror();
        m.reset(base, kvs);
        m.settle();
        m.announce();
        drop(m);
        n.ready.send_replace(Readiness::Ready);
        for (key, rev) in strays {
            n.strays.reap(pool, key, rev);
        }
    }
    // When the stream last said something, and whether a progress report was asked for since.
    let mut listen = Listen::new(pool, idx, moves);
    loop {
        let r = match listen.next(&mut stream, None).await? {
            Heard::Message(r) => r,
            Heard::Moved => return Ok(()),
            Heard::Command(_) => continue,
        };
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
                    m.put(kv.key(), kv.create_revision(), kv.value());
                    if n.is_stray(kv) {
                        strays.push(stray(kv));
                    }
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

/// What a watch stream's listener heard.
enum Heard {
    Message(etcd_client::WatchResponse),
    /// A narrow watch's registry asks for a create or cancel.
    Command(Cmd),
    /// The pool moved to another endpoint: the stream follows.
    Moved,
}

/// Listens to one life of a watch stream: a stream that says nothing for a command timeout is
/// asked for a progress report and given up (and the pool fails over) when none comes within
/// another; a stream that broke or ended (a member that lost its leader ends it) is resumed on
/// the next endpoint.
struct Listen<'a> {
    pool: &'a Arc<Pool>,
    idx: usize,
    moves: watch::Receiver<u64>,
    heard: Instant,
    asked: bool,
}

impl<'a> Listen<'a> {
    fn new(pool: &'a Arc<Pool>, idx: usize, moves: watch::Receiver<u64>) -> Listen<'a> {
        Listen {
            pool,
            idx,
            moves,
            heard: Instant::now(),
            asked: false,
        }
    }

    async fn next(
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
                    // Every sender gone: the name's watch was dropped.
                    return Ok(cmd.map_or(Heard::Moved, Heard::Command));
                }
                _ = tokio::time::sleep_until(quiet_until) => {
                    if self.asked {
                        pool.failed(idx);
                        return Err(Error::new(
                            ErrorKind::Timeout,
                            format!("the etcd watch stayed silent for {:?}", limit * 2),
                        ));
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

/// Sends the create of a narrow watch's key watch `id`, unless it is in place on this stream or
/// was cancelled. A stray watch's keys are read first: the strays among them are reaped, and the
/// watch starts after that read.
async fn create_key_watch(
    n: &NameWatch,
    pool: &Arc<Pool>,
    stream: &mut etcd_client::WatchStream,
    live: &mut std::collections::HashSet<i64>,
    id: i64,
) -> Result<()> {
    if live.contains(&id) {
        return Ok(());
    }
    let range = n.keys().and_then(|k| k.stray_range(id));
    if let Some((start, end)) = range {
        let mut resp = pool
            .run("range", true, move |mut c| {
                let (start, end) = (start.clone(), end.clone());
                async move { c.get(start, Some(GetOptions::new().with_range(end))).await }
            })
            .await?;
        let rev = resp.take_header().map(|h| h.revision()).ok_or_else(|| {
            Error::new(
                ErrorKind::Connection,
                "an etcd range answer without a header",
            )
        })?;
        for kv in resp.kvs().iter().filter(|kv| n.is_stray(kv)) {
            let (key, created) = stray(kv);
            n.strays.reap(pool, key, created);
        }
        if let Some(mut k) = n.keys() {
            k.start_at(id, rev + 1);
        }
    }
    let Some((key, opts)) = n.keys().and_then(|k| k.create_request(id)) else {
        return Ok(());
    };
    live.insert(id);
    match tokio::time::timeout(pool.timeout(), stream.watch(key, Some(opts))).await {
        Ok(sent) => sent.map_err(|e| crate::client::map_err(e, "watch")),
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            "a watch request could not be sent",
        )),
    }
}

/// The rest of one life of a narrow watch's stream: sends its registry's creates and cancels
/// and routes what comes back.
async fn narrow_stream(
    nw: &std::sync::Weak<NameWatch>,
    pool: &Arc<Pool>,
    idx: usize,
    mut stream: etcd_client::WatchStream,
    cmds: &mut mpsc::UnboundedReceiver<Cmd>,
    mut live: std::collections::HashSet<i64>,
    moves: watch::Receiver<u64>,
) -> Result<()> {
    let mut listen = Listen::new(pool, idx, moves);
    loop {
        let heard = listen.next(&mut stream, Some(cmds)).await?;
        let Some(n) = nw.upgrade() else { return Ok(()) };
        let r = match heard {
            Heard::Moved => return Ok(()),
            Heard::Command(Cmd::Create(id)) => {
                create_key_watch(&n, pool, &mut stream, &mut live, id).await?;
                continue;
            }
            Heard::Command(Cmd::Cancel(id)) => {
                if live.remove(&id) {
                    match tokio::time::timeout(pool.timeout(), stream.cancel(id)).await {
                        Ok(sent) => sent.map_err(|e| crate::client::map_err(e, "watch cancel"))?,
                        Err(_) => {
                            return Err(Error::new(
                                ErrorKind::Timeout,
                                "a watch cancel could not be sent",
                            ))
                        }
                    }
                }
                continue;
            }
            Heard::Message(r) => r,
        };
        let id = r.watch_id();
        // The anchor (0), or a create etcd refused without taking its id (-1: a duplicate id).
        if id <= 0 {
            if r.canceled() {
                return Err(cancelled(r.cancel_reason()));
            }
            continue;
        }
        let mut strays = Vec::new();
        {
            let Some(mut k) = n.keys() else { return Ok(()) };
            if r.canceled() {
                if k.cancelled(id, r.compact_revision()) {
                    return Err(cancelled(r.cancel_reason()));
                }
                if r.compact_revision() <= 0 {
                    live.remove(&id);
                }
                continue;
            }
            if r.created() {
                k.created(id, r.header().map_or(0, |h| h.revision()));
            }
            for ev in r.events() {
                let deleted = ev.event_type() == EventType::Delete;
                let rev = ev.kv().map_or(0, |kv| kv.mod_revision());
                if k.event(id, deleted, rev) {
                    if let Some(kv) = ev.kv().filter(|kv| n.is_stray(kv)) {
                        strays.push(stray(kv));
                    }
                }
            }
        }
        for (key, rev) in strays {
            n.strays.reap(pool, key, rev);
        }
    }
}

/// A stray key's name and create revision.
fn stray(kv: &etcd_client::KeyValue) -> (Vec<u8>, i64) {
    (kv.key().to_vec(), kv.create_revision())
}

/// The error for a watch etcd cancelled: `Auth` when the user may not read the prefix.
fn cancelled(reason: &str) -> Error {
    if reason.contains("permission denied") {
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
