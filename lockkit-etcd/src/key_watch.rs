//! The narrow watches of the mutex names of one client: a few single keys per name instead of
//! each name's whole prefix, all on one stream (`key_stream.rs`).
//!
//! Why: a prefix watch in every client sends every put and delete on a lock to every client, so
//! one hand-off among C contending clients costs the server 2·C watch messages (measured: at 256
//! clients etcd spent six times the CPU per acquisition it spends at 8, and the rate fell to a
//! third of Go's). A mutex needs less: a waiter needs to hear of one delete, the key ranked just
//! before its own (as Go's `concurrency.Mutex` waits), and a holder or waiter of one delete, its
//! own key's. So a mutex name registers, on its client's one key stream:
//! - **own key** watches (deletes only), from the revision after the key's create: a waiter whose
//!   key vanished (etcd issue 11456) is woken, a holder whose key was deleted by someone else
//!   (`force_unlock`, lease expiry) turns Lost at once;
//! - **before** watches (deletes only) of the keys ranked just before a waiter's: a key's watch
//!   is kept after its waiter is done (up to [`CACHE`] keys per name), because the same few key
//!   names come back as the waiters' predecessors (a session's key is `<prefix><lease hex>`
//!   every time it locks). A watch created from "now" is not always served at once: etcd 3.4
//!   takes "now" before it takes the store's lock, so when a write commits in between, the
//!   watch is "unsynced" and hears nothing until etcd's catch-up loop runs (every 100 ms). At 8
//!   contending clients that stalled one wait in twenty by ~90 ms and cost 45 % of the rate;
//!   with the watches kept, a predecessor's key is nearly always watched already. A watch covers
//!   every delete from the revision after the one its `created` answer reports; a waiter whose
//!   predecessor was created before that reads the queue again once the watch is in place (a
//!   key still there in that read is deleted later, so its delete reaches the watch);
//! - **stray** watches (puts only) on the keys named by one of our session leases (the range
//!   `<prefix><lease hex>` to that plus `` ` ``, the byte after `_`): a put there on our lease in
//!   a slot no acquisition of ours holds is one of our strays (see `strays.rs`). Our own
//!   acquisitions' puts come through, one per acquisition (and those of a lease whose hex
//!   extends ours, which are not on our lease). Each life of the stream reads the range before
//!   it watches it, so a stray that landed while no watch was there is found too.
//!
//! Why one stream for every name: a gRPC stream and its buffers cost about 30 KiB, so a stream
//! per name made a held lock cost 35 KiB of the process; the registrations are a few hundred
//! bytes. Watch ids are chosen by the client, unique on the client's stream (behind a gRPC
//! proxy, which numbers watches itself, `watch_ids.rs` maps its ids to ours). The stream's task
//! (`key_stream.rs`) sends what this registry asks for and routes what comes back; a new life of
//! the stream creates the own-key watches again from their keys' revisions, reads and watches
//! the stray ranges again, and breaks the before watches, whose waiters read again and watch
//! anew.

use std::collections::HashMap;
use std::sync::Arc;

use etcd_client::{WatchFilterType, WatchOptions};
use lockkit_core::spi::StateCell;
use lockkit_core::{Backoff, LostReason, Retry};
use tokio::sync::{mpsc, watch, Notify};

use crate::strays::Slots;

/// Where a waiter's before watch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Asked for, not yet in place.
    Pending,
    /// In place: a delete of the key from now on reaches us.
    Created,
    /// The key was deleted.
    Fired,
    /// The watch is gone (the stream restarted, or etcd refused or cancelled it): read again
    /// and watch anew.
    Broken,
}

/// What the stream's task is asked to do.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cmd {
    Create(i64),
    Cancel(i64),
    /// A create whose read before it failed, tried again.
    Retry(i64),
}

#[derive(Debug)]
enum What {
    Own {
        /// The key's create revision.
        rev: i64,
        gone: bool,
        /// Its watch's start was compacted away: a delete may have been missed, so the key is
        /// read before the watch is created again.
        check: bool,
        waiter: Option<Arc<Notify>>,
        holder: Option<StateCell>,
    },
    Before {
        /// Every delete of the key from this revision on reaches us (once created).
        covers: Option<i64>,
        /// The latest delete of the key heard.
        last_delete: i64,
        subs: Vec<BeforeSub>,
        /// When a waiter last asked for it (for the cache's eviction).
        used: u64,
    },
    /// The keys named by session lease `lease` (see [`lease_range`]); `slots` are the name's
    /// slots our acquisitions hold.
    Stray { lease: i64, slots: Slots },
}

/// A waiter on a before watch: woken by a delete of the key's incarnation created at `rev`.
#[derive(Debug)]
struct BeforeSub {
    sub: u64,
    rev: i64,
    phase: watch::Sender<Phase>,
    waiter: Arc<Notify>,
}

impl BeforeSub {
    fn fire(&self, to: Phase) {
        self.phase.send_replace(to);
        self.waiter.notify_one();
    }
}

/// The most before watches a name keeps without waiters.
pub(crate) const CACHE: usize = 32;

#[derive(Debug)]
struct Reg {
    /// The lock's prefix (its name).
    name: Arc<[u8]>,
    /// The key; empty for a stray watch, whose range its name and lease give.
    key: Box<[u8]>,
    /// The revision a (re)created watch starts at; 0 is "now".
    from: i64,
    what: What,
}

impl Reg {
    /// The watched key, or the start of a stray watch's range.
    fn watched_key(&self) -> Vec<u8> {
        match &self.what {
            What::Stray { lease, .. } => lease_range(&self.name, *lease).0,
            _ => self.key.to_vec(),
        }
    }
}

/// The keys named by session lease `lease` under lock `name`: `<name><lease hex>` and its slots
/// `…_<n>`, so the range up to `` ` ``, the byte after `_` (another lease's keys in it, whose hex
/// extends ours, are not ours). Made when asked for: a stray watch keeps neither end.
fn lease_range(name: &[u8], lease: i64) -> (Vec<u8>, Vec<u8>) {
    let mut start = name.to_vec();
    start.extend_from_slice(format!("{lease:x}").as_bytes());
    let mut end = start.clone();
    end.push(b'`');
    (start, end)
}

/// The registrations of one name, by what they are.
#[derive(Debug, Default)]
struct Name {
    own: Vec<i64>,
    /// Before watches, by key; boxed, and only while there are some (a name that is only held,
    /// as most of 10 000 held locks are, keeps 8 bytes for it instead of 48).
    #[allow(clippy::box_collection)] // The box is the point: 8 bytes in place of 48.
    befores: Option<Box<HashMap<Vec<u8>, i64>>>,
    /// Stray watches, by lease.
    strays: Vec<(i64, i64)>,
}

impl Name {
    fn is_empty(&self) -> bool {
        self.own.is_empty() && self.befores.is_none() && self.strays.is_empty()
    }

    fn ids(&self) -> impl Iterator<Item = i64> + '_ {
        let strays = self.strays.iter().map(|(_, id)| *id);
        let befores = self.befores.iter().flat_map(|b| b.values().copied());
        self.own.iter().copied().chain(befores).chain(strays)
    }

    fn before(&self, key: &[u8]) -> Option<i64> {
        self.befores.as_ref()?.get(key).copied()
    }

    fn befores_len(&self) -> usize {
        self.befores.as_ref().map_or(0, |b| b.len())
    }

    fn set_before(&mut self, key: &[u8], id: i64) {
        self.befores
            .get_or_insert_with(Default::default)
            .insert(key.to_vec(), id);
    }

    /// Forgets before watch `id` of `key` (unless another took its place).
    fn unset_before(&mut self, key: &[u8], id: i64) {
        if let Some(b) = &mut self.befores {
            if b.get(key) == Some(&id) {
                b.remove(key);
            }
            if b.is_empty() {
                self.befores = None;
            }
        }
    }
}

/// A waiter's place on a before watch (ended by `KeyWatches::end_before`).
#[derive(Debug)]
pub(crate) struct BeforeWatch {
    name: Arc<[u8]>,
    pub(crate) key: Vec<u8>,
    /// The create revision of the key's incarnation waited on.
    pub(crate) rev: i64,
    sub: u64,
    phase: watch::Receiver<Phase>,
}

impl BeforeWatch {
    /// The watch's phase now; a watch dropped before it was created is `Broken`.
    pub(crate) fn phase(&self) -> Phase {
        match *self.phase.borrow() {
            Phase::Pending if self.phase.has_changed().is_err() => Phase::Broken,
            p => p,
        }
    }

    /// Waits until the watch is past `Pending`.
    pub(crate) async fn settled(&mut self) -> Phase {
        match self.phase.wait_for(|p| *p != Phase::Pending).await {
            Ok(p) => *p,
            Err(_) => Phase::Broken,
        }
    }
}

/// Which name a put on a stray watch is under, and the slots its acquisitions hold: what
/// telling a stray of ours needs.
#[derive(Debug, Clone)]
pub(crate) struct StrayScope {
    pub(crate) name: Arc<[u8]>,
    pub(crate) slots: Slots,
}

/// The registrations of a client's key stream.
#[derive(Debug)]
pub(crate) struct KeyWatches {
    /// Client-chosen watch ids, never reused on a stream.
    next_id: i64,
    /// Boxed: a table of 10 000 held locks' registrations keeps room for many more than it
    /// holds, and 16 bytes of it a slot cost less than a whole registration.
    regs: HashMap<i64, Box<Reg>>,
    names: HashMap<Arc<[u8]>, Name>,
    next_sub: u64,
    tick: u64,
    cmds: mpsc::UnboundedSender<Cmd>,
    /// Watches whose read before their create failed, with the pace of their retries.
    retrying: HashMap<i64, Retry>,
}

impl KeyWatches {
    pub(crate) fn new(cmds: mpsc::UnboundedSender<Cmd>) -> KeyWatches {
        KeyWatches {
            next_id: 1,
            regs: HashMap::new(),
            names: HashMap::new(),
            next_sub: 0,
            tick: 0,
            cmds,
            retrying: HashMap::new(),
        }
    }

    /// Whether nothing is left to watch: nothing registered but our keys known to be gone
    /// (whose creates are skipped), so a stream would carry nothing.
    pub(crate) fn is_idle(&self) -> bool {
        self.regs
            .values()
            .all(|r| matches!(r.what, What::Own { gone: true, .. }))
    }

    /// Files `reg` under `id` (and in its name's and our keys' indexes).
    fn insert(&mut self, id: i64, reg: Reg) {
        let name = self.names.entry(reg.name.clone()).or_default();
        // A name has one or two of each as a rule: room for exactly those (a first push would
        // make room for four, 32 and 64 bytes where 8 and 16 are used, for every held lock).
        match &reg.what {
            What::Own { .. } => {
                if name.own.len() < 2 {
                    name.own.reserve_exact(1);
                }
                name.own.push(id);
            }
            What::Before { .. } => {
                name.set_before(&reg.key, id);
            }
            What::Stray { lease, .. } => {
                if name.strays.len() < 2 {
                    name.strays.reserve_exact(1);
                }
                name.strays.push((*lease, id));
            }
        }
        self.regs.insert(id, Box::new(reg));
    }

    /// Takes registration `id` out of every index.
    fn remove(&mut self, id: i64) -> Option<Reg> {
        self.retrying.remove(&id);
        let reg = *self.regs.remove(&id)?;
        if let Some(name) = self.names.get_mut(&reg.name) {
            match &reg.what {
                What::Own { .. } => name.own.retain(|i| *i != id),
                What::Before { .. } => name.unset_before(&reg.key, id),
                What::Stray { .. } => name.strays.retain(|(_, i)| *i != id),
            }
            if name.is_empty() {
                self.names.remove(&reg.name);
            }
        }
        Some(reg)
    }

    fn add(&mut self, name: &Arc<[u8]>, key: Vec<u8>, what: What) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        let from = match what {
            What::Own { rev, .. } => rev + 1,
            _ => 0,
        };
        let reg = Reg {
            name: name.clone(),
            key: key.into_boxed_slice(),
            from,
            what,
        };
        self.insert(id, reg);
        let _ = self.cmds.send(Cmd::Create(id));
        id
    }

    /// A new watch id and one of our keys (it need not exist), for a watch that probes a
    /// silent stream.
    pub(crate) fn probe(&mut self) -> Option<(i64, Vec<u8>)> {
        let key = self.regs.values().next()?.watched_key();
        let id = self.next_id;
        self.next_id += 1;
        Some((id, key))
    }

    /// The read before watch `id`'s create failed: it is tried again after a pause that
    /// grows while it keeps failing, and meanwhile other creates of it wait for that.
    pub(crate) fn create_later(&mut self, id: i64) {
        let pause = self
            .retrying
            .entry(id)
            .or_insert_with(|| Backoff::WATCH.start())
            .next_pause();
        let cmds = self.cmds.clone();
        tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            let _ = cmds.send(Cmd::Retry(id));
        });
    }

    /// Whether watch `id`'s read is to be tried again (its retry creates it).
    pub(crate) fn is_retrying(&self, id: i64) -> bool {
        self.retrying.contains_key(&id)
    }

    /// The read before watch `id`'s create went through.
    pub(crate) fn read_done(&mut self, id: i64) {
        self.retrying.remove(&id);
    }

    fn cancel(&mut self, id: i64) -> Option<Reg> {
        let reg = self.remove(id)?;
        let _ = self.cmds.send(Cmd::Cancel(id));
        Some(reg)
    }

    /// Watches our key `key` of lock `name` (created at `rev`) for its delete.
    pub(crate) fn own(&mut self, name: &Arc<[u8]>, key: &[u8], rev: i64) {
        if self.own_id(name, rev).is_some() {
            return;
        }
        let what = What::Own {
            rev,
            gone: false,
            check: false,
            waiter: None,
            holder: None,
        };
        self.add(name, key.to_vec(), what);
    }

    /// The registration of our key of lock `name` created at `rev`. By name and revision: one
    /// transaction creates keys of several locks at one revision (a multi-lock's).
    fn own_id(&self, name: &[u8], rev: i64) -> Option<i64> {
        self.names.get(name)?.own.iter().copied().find(|id| {
            matches!(
                self.regs.get(id).map(|r| &r.what),
                Some(What::Own { rev: r, .. }) if *r == rev
            )
        })
    }

    fn own_mut(&mut self, name: &[u8], rev: i64) -> Option<&mut What> {
        let id = self.own_id(name, rev)?;
        self.regs.get_mut(&id).map(Box::as_mut).map(|r| &mut r.what)
    }

    /// Whether our key of lock `name` created at `rev` was seen deleted.
    pub(crate) fn is_gone(&self, name: &[u8], rev: i64) -> bool {
        let reg = self
            .own_id(name, rev)
            .and_then(|id| self.regs.get(&id).map(Box::as_ref));
        matches!(
            reg,
            Some(Reg {
                what: What::Own { gone: true, .. },
                ..
            })
        )
    }

    /// The waiter of our key `rev` of lock `name` is woken by `n` when the key is deleted.
    pub(crate) fn set_waiter(&mut self, name: &[u8], rev: i64, n: Option<Arc<Notify>>) {
        if let Some(What::Own { waiter, .. }) = self.own_mut(name, rev) {
            *waiter = n;
        }
    }

    /// Our key `rev` of lock `name` is held: its state turns Lost when the key is deleted.
    pub(crate) fn set_holder(&mut self, name: &[u8], rev: i64, cell: &StateCell) {
        match self.own_mut(name, rev) {
            Some(What::Own { gone: true, .. }) => {
                cell.mark_lost(LostReason::Deleted);
            }
            Some(What::Own { holder, .. }) => *holder = Some(cell.clone()),
            _ => {}
        }
    }

    /// Our key `rev` of lock `name` is done with: its watch is cancelled.
    pub(crate) fn forget(&mut self, name: &[u8], rev: i64) {
        if let Some(id) = self.own_id(name, rev) {
            self.cancel(id);
        }
    }

    /// Waits on `key` of lock `name` (its incarnation created at `rev`, ranked just before a
    /// waiter's) for its delete, which wakes `waiter`; the key's watch is created if the name
    /// keeps none.
    pub(crate) fn before(
        &mut self,
        name: &Arc<[u8]>,
        key: &[u8],
        rev: i64,
        waiter: Arc<Notify>,
    ) -> BeforeWatch {
        self.tick += 1;
        self.next_sub += 1;
        let (tick, sub) = (self.tick, self.next_sub);
        let (phase, rx) = watch::channel(Phase::Pending);
        let w = BeforeWatch {
            name: name.clone(),
            key: key.to_vec(),
            rev,
            sub,
            phase: rx,
        };
        let me = BeforeSub {
            sub,
            rev,
            phase,
            waiter,
        };
        let Some(id) = self.before_id(name, key) else {
            let what = What::Before {
                covers: None,
                last_delete: 0,
                subs: vec![me],
                used: tick,
            };
            self.add(name, key.to_vec(), what);
            // After the waiter is in: a watch with a waiter is never evicted.
            self.evict(name);
            return w;
        };
        if let Some(Reg {
            what:
                What::Before {
                    covers,
                    last_delete,
                    subs,
                    used,
                },
            ..
        }) = self.regs.get_mut(&id).map(Box::as_mut)
        {
            *used = tick;
            if *last_delete > rev {
                me.phase.send_replace(Phase::Fired);
            } else {
                if covers.is_some() {
                    me.phase.send_replace(Phase::Created);
                }
                subs.push(me);
            }
        }
        w
    }

    fn before_id(&self, name: &[u8], key: &[u8]) -> Option<i64> {
        self.names.get(name)?.before(key)
    }

    fn before_mut(&mut self, w: &BeforeWatch) -> Option<&mut What> {
        let id = self.before_id(&w.name, &w.key)?;
        self.regs.get_mut(&id).map(Box::as_mut).map(|r| &mut r.what)
    }

    /// Whether the watch of `w`'s key hears every delete of the incarnation `w` waits on: it
    /// was in place before that incarnation was created.
    pub(crate) fn covers(&self, w: &BeforeWatch) -> bool {
        let id = self.before_id(&w.name, &w.key);
        let covers = match id.and_then(|id| self.regs.get(&id).map(Box::as_ref)) {
            Some(Reg {
                what: What::Before { covers, .. },
                ..
            }) => *covers,
            _ => None,
        };
        covers.is_some_and(|from| from <= w.rev + 1)
    }

    /// Ends a waiter's place on a before watch; the watch is kept for the next waiter.
    pub(crate) fn end_before(&mut self, w: &BeforeWatch) {
        if let Some(What::Before { subs, .. }) = self.before_mut(w) {
            subs.retain(|s| s.sub != w.sub);
        }
    }

    /// Cancels `name`'s least recently used before watches without waiters beyond [`CACHE`].
    fn evict(&mut self, name: &[u8]) {
        loop {
            let Some(n) = self.names.get(name).filter(|n| n.befores_len() > CACHE) else {
                return;
            };
            let idle = n
                .befores
                .iter()
                .flat_map(|b| b.values())
                .filter_map(|id| match self.regs.get(id).map(Box::as_ref) {
                    Some(Reg {
                        what: What::Before { subs, used, .. },
                        ..
                    }) if subs.is_empty() => Some((*used, *id)),
                    _ => None,
                })
                .min();
            let Some((_, id)) = idle else { return };
            self.cancel(id);
        }
    }

    /// Removes before watch `id`; its waiters are told it broke, and read again.
    fn drop_before(&mut self, id: i64) {
        if let Some(Reg {
            what: What::Before { subs, .. },
            ..
        }) = self.remove(id)
        {
            for s in subs {
                s.fire(Phase::Broken);
            }
        }
    }

    /// Watches the keys named by our session lease `lease` under lock `name` (see
    /// [`lease_range`]), whose acquisitions hold `slots`, for puts, once per name and lease; the
    /// stream's task reads them first (see [`stray_range`](Self::stray_range)).
    /// The name's watches of leases `owned` says are no longer ours are cancelled.
    pub(crate) fn strays(
        &mut self,
        name: &Arc<[u8]>,
        slots: &Slots,
        lease: i64,
        owned: impl Fn(i64) -> bool,
    ) {
        let watched = self.names.get(&**name).map(|n| n.strays.as_slice());
        if watched.is_some_and(|s| s.iter().any(|(l, _)| *l == lease)) {
            return;
        }
        let gone: Vec<i64> = watched
            .unwrap_or_default()
            .iter()
            .filter(|(l, _)| !owned(*l))
            .map(|(_, id)| *id)
            .collect();
        for id in gone {
            self.cancel(id);
        }
        let what = What::Stray {
            lease,
            slots: slots.clone(),
        };
        self.add(name, Vec::new(), what);
    }

    /// The key range of stray watch `id` and whose strays it finds, which the stream's task
    /// reads (and reaps the strays it finds) before it creates the watch from the revision after
    /// that read: a stray that landed before the watch, or while the stream was down, is found
    /// too.
    pub(crate) fn stray_range(&self, id: i64) -> Option<(Vec<u8>, Vec<u8>, StrayScope)> {
        match self.regs.get(&id).map(Box::as_ref) {
            Some(Reg {
                name,
                what: What::Stray { slots, lease },
                ..
            }) => {
                let scope = StrayScope {
                    name: name.clone(),
                    slots: slots.clone(),
                };
                let (start, end) = lease_range(name, *lease);
                Some((start, end, scope))
            }
            _ => None,
        }
    }

    /// Watch `id` is to start at revision `from`.
    pub(crate) fn start_at(&mut self, id: i64, from: i64) {
        if let Some(reg) = self.regs.get_mut(&id).map(Box::as_mut) {
            reg.from = from;
        }
    }

    /// Our key of own-key watch `id` and its create revision, when the key is to be read before
    /// the watch is created again (its start was compacted away).
    pub(crate) fn own_to_check(&self, id: i64) -> Option<(Vec<u8>, i64)> {
        match self.regs.get(&id).map(Box::as_ref) {
            Some(Reg {
                key,
                what:
                    What::Own {
                        rev,
                        check: true,
                        gone: false,
                        ..
                    },
                ..
            }) => Some((key.to_vec(), *rev)),
            _ => None,
        }
    }

    /// Own-key watch `id`'s key was read at revision `at`: `there` when it was still our key.
    /// A key that is not is gone (its holder turns Lost, its waiter is woken); one that is is
    /// watched from after the read.
    pub(crate) fn own_checked(&mut self, id: i64, there: bool, at: i64) {
        let Some(reg) = self.regs.get_mut(&id).map(Box::as_mut) else {
            return;
        };
        if let What::Own { check, .. } = &mut reg.what {
            *check = false;
        }
        if there {
            reg.from = at + 1;
        } else {
            self.event(id, true, at);
        }
    }

    /// What to send for a create of `id`, unless it was cancelled meanwhile (or is our key,
    /// known to be gone: nothing is left to hear).
    pub(crate) fn create_request(&self, id: i64) -> Option<(Vec<u8>, WatchOptions)> {
        let reg = self.regs.get(&id).map(Box::as_ref)?;
        if matches!(reg.what, What::Own { gone: true, .. }) {
            return None;
        }
        let filter = match reg.what {
            What::Stray { .. } => WatchFilterType::NoDelete,
            _ => WatchFilterType::NoPut,
        };
        let mut opts = WatchOptions::new().with_watch_id(id).with_filters([filter]);
        if reg.from > 0 {
            opts = opts.with_start_revision(reg.from);
        }
        if let What::Stray { lease, .. } = &reg.what {
            let (start, end) = lease_range(&reg.name, *lease);
            return Some((start, opts.with_range(end)));
        }
        Some((reg.watched_key(), opts))
    }

    /// etcd created watch `id`, as of revision `rev` (`None` when the answer had no header: the
    /// watch then covers nothing, and its waiters read again once it is in place).
    pub(crate) fn created(&mut self, id: i64, rev: Option<i64>) {
        if let Some(Reg {
            what: What::Before { covers, subs, .. },
            from,
            ..
        }) = self.regs.get_mut(&id).map(Box::as_mut)
        {
            *covers = if *from > 0 {
                Some(*from)
            } else {
                rev.map(|r| r + 1)
            };
            for s in subs.iter() {
                s.phase.send_if_modified(|p| {
                    let pending = *p == Phase::Pending;
                    if pending {
                        *p = Phase::Created;
                    }
                    pending
                });
            }
        }
    }

    /// etcd cancelled (or refused) watch `id`.
    /// - A before watch breaks (its waiters read again).
    /// - A watch etcd `refused` (the user may not read its keys) is not on the stream any more,
    ///   but stays registered (the next stream life asks again): an own key's waiter is woken,
    ///   and its read meets the same refusal. The stream carries other names' watches and goes
    ///   on.
    /// - An own-key or stray watch whose start was compacted away is asked for again, under a
    ///   new id, from the compaction (`compacted`).
    ///
    /// `true` for any other cancel, which ends the stream (a new life, paced, creates the
    /// watches again).
    pub(crate) fn cancelled(&mut self, id: i64, compacted: i64, refused: bool) -> bool {
        let Some(reg) = self.regs.get(&id).map(Box::as_ref) else {
            return false;
        };
        if matches!(reg.what, What::Before { .. }) {
            self.drop_before(id);
            if compacted > 0 {
                // etcd keeps a compacted watch's id until the client cancels it.
                let _ = self.cmds.send(Cmd::Cancel(id));
            }
            return false;
        }
        if refused {
            // Kept: its holder still turns Lost on the key's delete should a later stream's
            // create of it be allowed, and its waiter forgets it when its read fails too.
            if let What::Own {
                waiter: Some(n), ..
            } = &reg.what
            {
                n.notify_one();
            }
            return false;
        }
        if compacted <= 0 {
            return true;
        }
        let Some(mut reg) = self.remove(id) else {
            return false;
        };
        reg.from = compacted;
        if let What::Own { check, .. } = &mut reg.what {
            *check = true;
        }
        let new = self.next_id;
        self.next_id += 1;
        self.insert(new, reg);
        // etcd keeps a compacted watch's id until the client cancels it.
        let _ = self.cmds.send(Cmd::Cancel(id));
        let _ = self.cmds.send(Cmd::Create(new));
        false
    }

    /// An event of watch `id` at revision `rev`; for a put on a stray watch, what the caller
    /// needs to check it as a stray.
    pub(crate) fn event(&mut self, id: i64, deleted: bool, rev: i64) -> Option<StrayScope> {
        let reg = self.regs.get_mut(&id).map(Box::as_mut)?;
        match &mut reg.what {
            What::Own {
                gone,
                waiter,
                holder,
                ..
            } if deleted => {
                *gone = true;
                if let Some(n) = waiter {
                    n.notify_one();
                }
                if let Some(cell) = holder.take() {
                    cell.mark_lost(LostReason::Deleted);
                }
                None
            }
            What::Before {
                last_delete, subs, ..
            } if deleted => {
                *last_delete = (*last_delete).max(rev);
                subs.retain(|s| {
                    let fired = s.rev < rev;
                    if fired {
                        s.fire(Phase::Fired);
                    }
                    !fired
                });
                None
            }
            What::Stray { slots, .. } if !deleted => Some(StrayScope {
                name: reg.name.clone(),
                slots: slots.clone(),
            }),
            _ => None,
        }
    }

    /// The stream is gone: every before watch breaks (its waiters read again and watch anew).
    pub(crate) fn restart(&mut self) {
        let broken: Vec<i64> = self
            .regs
            .iter()
            .filter(|(_, r)| matches!(r.what, What::Before { .. }))
            .map(|(id, _)| *id)
            .collect();
        for id in broken {
            self.drop_before(id);
        }
    }

    /// Every watch a new stream creates, oldest first.
    pub(crate) fn ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.regs.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Ends a registration: holders turn Lost (the handle closed), waiters are woken.
    fn close(reg: Reg) {
        match reg.what {
            What::Own { waiter, holder, .. } => {
                if let Some(n) = waiter {
                    n.notify_one();
                }
                if let Some(cell) = holder {
                    cell.mark_lost(LostReason::Closed);
                }
            }
            What::Before { subs, .. } => {
                for s in subs {
                    s.fire(Phase::Broken);
                }
            }
            What::Stray { .. } => {}
        }
    }

    /// Lock `name`'s watch stopped (its handle closed, or nothing used it for a while): its
    /// watches are cancelled, holders turn Lost, waiters are woken.
    pub(crate) fn drop_name(&mut self, name: &[u8]) {
        let ids: Vec<i64> = match self.names.get(name) {
            Some(n) => n.ids().collect(),
            None => return,
        };
        for id in ids {
            if let Some(reg) = self.cancel(id) {
                KeyWatches::close(reg);
            }
        }
    }

    /// The handle closed: holders turn Lost, waiters are woken.
    pub(crate) fn stop(&mut self) {
        for (_, reg) in self.regs.drain() {
            KeyWatches::close(*reg);
        }
        self.names.clear();
        self.retrying.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watches() -> (KeyWatches, mpsc::UnboundedReceiver<Cmd>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (KeyWatches::new(tx), rx)
    }

    fn name(n: &str) -> Arc<[u8]> {
        Arc::from(n.as_bytes())
    }

    fn sent(rx: &mut mpsc::UnboundedReceiver<Cmd>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(c) = rx.try_recv() {
            out.push(format!("{c:?}"));
        }
        out
    }

    fn cell() -> StateCell {
        StateCell::new(lockkit_core::spi::LeaseClock::starting(
            tokio::time::Instant::now(),
            std::time::Duration::from_secs(60),
        ))
    }

    /// A key's watch is created once and kept for the next waiter; it covers an incarnation
    /// only if it was in place before that incarnation was created.
    #[test]
    fn a_before_watch_is_kept_and_knows_what_it_covers() {
        let (mut k, mut rx) = watches();
        let p = name("p/");
        let n = Arc::new(Notify::new());
        let w = k.before(&p, b"p/a", 10, n.clone());
        assert_eq!(w.phase(), Phase::Pending);
        assert_eq!(sent(&mut rx), ["Create(1)"]);
        k.created(1, Some(20));
        assert_eq!(w.phase(), Phase::Created);
        assert!(!k.covers(&w), "created at 20, the key at 10: read again");
        // Its delete fires it, once.
        assert!(k.event(1, true, 30).is_none());
        assert_eq!(w.phase(), Phase::Fired);
        k.end_before(&w);
        // The key comes back (created at 40): the same watch, covering it, nothing sent.
        let w2 = k.before(&p, b"p/a", 40, n.clone());
        assert_eq!(w2.phase(), Phase::Created);
        assert!(k.covers(&w2));
        assert!(sent(&mut rx).is_empty());
        // A delete of an older incarnation does not fire a waiter on a newer one.
        k.event(1, true, 35);
        assert_eq!(w2.phase(), Phase::Created);
        k.event(1, true, 41);
        assert_eq!(w2.phase(), Phase::Fired);
    }

    /// Keys of two locks created by one transaction share a revision (a multi-lock taken in one
    /// step): each has its own watch and holder, and one's delete loses only its holder.
    #[test]
    fn keys_of_two_locks_at_one_revision_are_watched_apart() {
        let (mut k, mut rx) = watches();
        let (p, q) = (name("p/"), name("q/"));
        k.own(&p, b"p/a", 7);
        k.own(&q, b"q/a", 7);
        assert_eq!(sent(&mut rx), ["Create(1)", "Create(2)"]);
        let (cp, cq) = (cell(), cell());
        k.set_holder(&p, 7, &cp);
        k.set_holder(&q, 7, &cq);
        k.created(1, Some(7));
        k.created(2, Some(7));
        k.event(2, true, 9);
        assert!(k.is_gone(&q, 7) && !k.is_gone(&p, 7));
        assert_eq!(cq.get(), lockkit_core::LockState::Lost);
        assert_eq!(cp.get(), lockkit_core::LockState::Held);
        k.forget(&p, 7);
        assert!(!k.is_gone(&p, 7));
    }

    /// A created answer without a header covers nothing: the waiter reads again.
    #[test]
    fn a_watch_created_without_a_header_covers_nothing() {
        let (mut k, _rx) = watches();
        let n = Arc::new(Notify::new());
        let w = k.before(&name("p/"), b"p/a", 10, n);
        k.created(1, None);
        assert_eq!(w.phase(), Phase::Created);
        assert!(!k.covers(&w));
    }

    /// An own-key watch compacted away is read before it is watched again: a key deleted
    /// meanwhile turns its holder Lost; one still there is watched from after the read.
    #[test]
    fn a_compacted_own_watch_reads_its_key_first() {
        let (mut k, _rx) = watches();
        let p = name("p/");
        k.own(&p, b"p/a", 7);
        k.own(&p, b"p/b", 8);
        let c = cell();
        k.set_holder(&p, 7, &c);
        assert_eq!(k.own_to_check(1), None);
        k.cancelled(1, 50, false);
        k.cancelled(2, 50, false);
        assert_eq!(k.own_to_check(3), Some((b"p/a".to_vec(), 7)));
        k.own_checked(3, false, 60);
        assert_eq!(c.get(), lockkit_core::LockState::Lost);
        assert!(k.is_gone(&p, 7));
        assert!(k.create_request(3).is_none(), "nothing left to watch");
        k.own_checked(4, true, 60);
        assert_eq!(k.own_to_check(4), None);
        assert!(format!("{:?}", k.create_request(4)).contains("start_revision: 61"));
        assert!(!k.is_idle(), "the other key is still watched");
        k.forget(&p, 8);
        assert!(k.is_idle(), "a stream would carry nothing");
    }

    /// A waiter that comes after the delete was heard is told at once.
    #[test]
    fn a_delete_heard_before_the_waiter_came_fires_at_once() {
        let (mut k, _rx) = watches();
        let p = name("p/");
        let n = Arc::new(Notify::new());
        let w = k.before(&p, b"p/a", 10, n.clone());
        k.created(1, Some(5));
        k.end_before(&w);
        k.event(1, true, 12);
        let late = k.before(&p, b"p/a", 10, n);
        assert_eq!(late.phase(), Phase::Fired);
    }

    /// A new watch whose name's cache is full of watches with waiters is not evicted at once
    /// (its waiter is in before the cache is trimmed).
    #[test]
    fn a_new_watch_with_a_waiter_survives_a_full_cache() {
        let (mut k, mut rx) = watches();
        let p = name("p/");
        let n = Arc::new(Notify::new());
        let busy: Vec<_> = (0..=CACHE)
            .map(|i| k.before(&p, format!("p/{i}").as_bytes(), 1, n.clone()))
            .collect();
        let cmds = sent(&mut rx);
        assert!(cmds.iter().all(|c| c.starts_with("Create")), "{cmds:?}");
        assert!(busy.iter().all(|w| w.phase() == Phase::Pending));
    }

    /// An own-key watch whose start etcd compacted away is asked for again under a new id (etcd
    /// keeps the old one until it is cancelled); one etcd refused stays registered and wakes
    /// its waiter; any other cancel of it ends the stream.
    #[test]
    fn a_compacted_own_watch_comes_back_under_a_new_id() {
        let (mut k, mut rx) = watches();
        let p = name("p/");
        k.own(&p, b"p/mine", 7);
        assert_eq!(sent(&mut rx), ["Create(1)"]);
        assert!(!k.cancelled(1, 50, false));
        assert_eq!(sent(&mut rx), ["Cancel(1)", "Create(2)"]);
        let c = cell();
        k.set_holder(&p, 7, &c);
        k.event(2, true, 60);
        assert!(k.is_gone(&p, 7));
        assert_eq!(c.get(), lockkit_core::LockState::Lost);
        k.own(&p, b"p/other", 8);
        assert!(
            k.cancelled(3, 0, false),
            "a cancelled own-key watch ends the stream"
        );
        let n = Arc::new(Notify::new());
        k.own(&p, b"p/third", 9);
        k.set_waiter(&p, 9, Some(n.clone()));
        assert!(!k.cancelled(4, 0, true), "a refused one does not");
        assert!(
            k.ids().contains(&4),
            "and is asked for again by the next stream"
        );
        let woken = std::pin::pin!(n.notified());
        let cx = &mut std::task::Context::from_waker(std::task::Waker::noop());
        assert!(
            std::future::Future::poll(woken, cx).is_ready(),
            "its waiter reads again"
        );
    }

    /// Idle watches beyond a name's cache are cancelled, least recently used first; a watch
    /// with a waiter never is, and another name's watches do not count. A stream that ended
    /// breaks every before watch.
    #[test]
    fn idle_watches_are_evicted_and_a_restart_breaks_the_rest() {
        let (mut k, mut rx) = watches();
        let (p, q) = (name("p/"), name("q/"));
        let n = Arc::new(Notify::new());
        let busy = k.before(&p, b"p/busy", 1, n.clone());
        for i in 0..CACHE {
            let w = k.before(&q, format!("q/{i}").as_bytes(), 1, n.clone());
            k.end_before(&w);
        }
        for i in 0..CACHE {
            let w = k.before(&p, format!("p/{i}").as_bytes(), 1, n.clone());
            k.end_before(&w);
        }
        let cmds = sent(&mut rx);
        assert_eq!(cmds.len(), 2 * CACHE + 2, "{cmds:?}");
        assert_eq!(
            cmds.last().unwrap(),
            &format!("Cancel({})", CACHE + 2),
            "the oldest idle one of p"
        );
        assert_eq!(busy.phase(), Phase::Pending);
        k.own(&p, b"p/mine", 7);
        k.restart();
        assert_eq!(busy.phase(), Phase::Broken);
        assert_eq!(k.ids().len(), 1, "only the own-key watch is created again");
    }

    /// A name that stops takes its watches with it and leaves the others'; its holders turn
    /// Lost.
    #[test]
    fn a_stopped_name_cancels_only_its_watches() {
        let (mut k, mut rx) = watches();
        let (p, q) = (name("p/"), name("q/"));
        let slots = Slots::default();
        k.own(&p, b"p/mine", 7);
        let c = cell();
        k.set_holder(&p, 7, &c);
        k.strays(&p, &slots, 0x1f, |_| true);
        k.strays(&p, &slots, 0x1f, |_| true);
        // The stray range comes from the name and the lease.
        let (start, end, _) = k.stray_range(2).expect("stray watch 2");
        assert_eq!((&start[..], &end[..]), (&b"p/1f"[..], &b"p/1f`"[..]));
        assert_eq!(k.create_request(2).expect("create").0, b"p/1f");
        k.own(&q, b"q/mine", 8);
        assert_eq!(sent(&mut rx).len(), 3);
        k.drop_name(&p);
        assert_eq!(sent(&mut rx), ["Cancel(1)", "Cancel(2)"]);
        assert_eq!(c.get(), lockkit_core::LockState::Lost);
        assert_eq!(k.ids(), [3]);
        assert!(!k.names.contains_key(&*p));
        // A stray watch of a lease no longer ours is cancelled when another is added.
        k.strays(&q, &slots, 0x1, |_| true);
        k.strays(&q, &slots, 0x2, |l| l != 1);
        assert_eq!(sent(&mut rx), ["Create(4)", "Cancel(4)", "Create(5)"]);
        assert!(k.event(5, false, 9).is_some_and(|s| *s.name == *b"q/"));
    }
}
