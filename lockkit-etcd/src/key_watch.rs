//! The narrow watches of a mutex name: a few single keys instead of the whole prefix.
//!
//! Why: a prefix watch in every client sends every put and delete on a lock to every client, so
//! one hand-off among C contending clients costs the server 2·C watch messages (measured: at 256
//! clients etcd spent six times the CPU per acquisition it spends at 8, and the rate fell to a
//! third of Go's). A mutex needs less: a waiter needs to hear of one delete, the key ranked just
//! before its own (as Go's `concurrency.Mutex` waits), and a holder or waiter of one delete, its
//! own key's. So a mutex name's stream carries, on one gRPC stream per name per client:
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
//! Watch ids are chosen by the client (etcd 3.4 or later). The stream's task (`watch.rs`) sends
//! what this registry asks for and routes what comes back; a new life of the stream creates the
//! own-key watches again from their keys' revisions, reads and watches the stray ranges again,
//! and breaks the before watches, whose waiters read again and watch anew.

use std::collections::HashMap;
use std::sync::Arc;

use etcd_client::{WatchFilterType, WatchOptions};
use lockkit_core::spi::StateCell;
use lockkit_core::LostReason;
use tokio::sync::{mpsc, watch, Notify};

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
}

#[derive(Debug)]
enum What {
    Own {
        gone: bool,
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
    /// The keys named by session lease `lease`.
    Stray { lease: i64 },
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
    key: Vec<u8>,
    /// The end of a range watch (exclusive); `None` for one key.
    end: Option<Vec<u8>>,
    /// The revision a (re)created watch starts at; 0 is "now".
    from: i64,
    what: What,
}

/// A waiter's place on a before watch (ended by `KeyWatches::end_before`).
#[derive(Debug)]
pub(crate) struct BeforeWatch {
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

/// The registrations of one name's narrow stream.
#[derive(Debug)]
pub(crate) struct KeyWatches {
    /// Client-chosen watch ids, never reused on a stream; 0 is the stream's anchor.
    next_id: i64,
    regs: HashMap<i64, Reg>,
    /// Our keys' registrations, by create revision.
    own: HashMap<i64, i64>,
    /// Before watches, by key.
    befores: HashMap<Vec<u8>, i64>,
    next_sub: u64,
    tick: u64,
    cmds: mpsc::UnboundedSender<Cmd>,
}

impl KeyWatches {
    pub(crate) fn new(cmds: mpsc::UnboundedSender<Cmd>) -> KeyWatches {
        KeyWatches {
            next_id: 1,
            regs: HashMap::new(),
            own: HashMap::new(),
            befores: HashMap::new(),
            next_sub: 0,
            tick: 0,
            cmds,
        }
    }

    fn add(&mut self, key: Vec<u8>, end: Option<Vec<u8>>, from: i64, what: What) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.regs.insert(
            id,
            Reg {
                key,
                end,
                from,
                what,
            },
        );
        let _ = self.cmds.send(Cmd::Create(id));
        id
    }

    fn cancel(&mut self, id: i64) {
        if self.regs.remove(&id).is_some() {
            let _ = self.cmds.send(Cmd::Cancel(id));
        }
    }

    /// Watches our key `key` (created at `rev`) for its delete.
    pub(crate) fn own(&mut self, key: &[u8], rev: i64) {
        if self.own.contains_key(&rev) {
            return;
        }
        let what = What::Own {
            gone: false,
            waiter: None,
            holder: None,
        };
        let id = self.add(key.to_vec(), None, rev + 1, what);
        self.own.insert(rev, id);
    }

    fn own_mut(&mut self, rev: i64) -> Option<&mut What> {
        let id = self.own.get(&rev)?;
        self.regs.get_mut(id).map(|r| &mut r.what)
    }

    /// Whether our key of create revision `rev` was seen deleted.
    pub(crate) fn is_gone(&self, rev: i64) -> bool {
        let reg = self.own.get(&rev).and_then(|id| self.regs.get(id));
        matches!(
            reg,
            Some(Reg {
                what: What::Own { gone: true, .. },
                ..
            })
        )
    }

    /// The waiter of our key `rev` is woken by `n` when the key is deleted.
    pub(crate) fn set_waiter(&mut self, rev: i64, n: Option<Arc<Notify>>) {
        if let Some(What::Own { waiter, .. }) = self.own_mut(rev) {
            *waiter = n;
        }
    }

    /// Our key `rev` is held: its state turns Lost when the key is deleted.
    pub(crate) fn set_holder(&mut self, rev: i64, cell: &StateCell) {
        match self.own_mut(rev) {
            Some(What::Own { gone: true, .. }) => {
                cell.mark_lost(LostReason::Deleted);
            }
            Some(What::Own { holder, .. }) => *holder = Some(cell.clone()),
            _ => {}
        }
    }

    /// Our key `rev` is done with: its watch is cancelled.
    pub(crate) fn forget(&mut self, rev: i64) {
        if let Some(id) = self.own.remove(&rev) {
            self.cancel(id);
        }
    }

    /// Waits on `key` (its incarnation created at `rev`, ranked just before a waiter's) for its
    /// delete, which wakes `waiter`; the key's watch is created if the name keeps none.
    pub(crate) fn before(&mut self, key: &[u8], rev: i64, waiter: Arc<Notify>) -> BeforeWatch {
        self.tick += 1;
        self.next_sub += 1;
        let (tick, sub) = (self.tick, self.next_sub);
        let (phase, rx) = watch::channel(Phase::Pending);
        let w = BeforeWatch {
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
        let Some(&id) = self.befores.get(key) else {
            let what = What::Before {
                covers: None,
                last_delete: 0,
                subs: vec![me],
                used: tick,
            };
            let id = self.add(key.to_vec(), None, 0, what);
            self.befores.insert(key.to_vec(), id);
            // After the waiter is in: a watch with a waiter is never evicted.
            self.evict();
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
        }) = self.regs.get_mut(&id)
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

    /// Whether the watch of `w`'s key hears every delete of the incarnation `w` waits on: it
    /// was in place before that incarnation was created.
    pub(crate) fn covers(&self, w: &BeforeWatch) -> bool {
        let reg = self.befores.get(&w.key).and_then(|id| self.regs.get(id));
        let covers = match reg {
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
        let reg = self
            .befores
            .get(&w.key)
            .and_then(|id| self.regs.get_mut(id));
        if let Some(Reg {
            what: What::Before { subs, .. },
            ..
        }) = reg
        {
            subs.retain(|s| s.sub != w.sub);
        }
    }

    /// Cancels the least recently used before watches without waiters beyond [`CACHE`].
    fn evict(&mut self) {
        while self.befores.len() > CACHE {
            let idle = self
                .befores
                .values()
                .filter_map(|id| match self.regs.get(id) {
                    Some(Reg {
                        what: What::Before { subs, used, .. },
                        ..
                    }) if subs.is_empty() => Some((*used, *id)),
                    _ => None,
                })
                .min();
            let Some((_, id)) = idle else { return };
            self.drop_before(id);
            let _ = self.cmds.send(Cmd::Cancel(id));
        }
    }

    /// Removes before watch `id`; its waiters are told it broke, and read again.
    fn drop_before(&mut self, id: i64) {
        if let Some(reg) = self.regs.remove(&id) {
            self.befores.remove(&reg.key);
            if let What::Before { subs, .. } = reg.what {
                for s in subs {
                    s.fire(Phase::Broken);
                }
            }
        }
    }

    /// Watches the keys `range` gives (from its start up to its end: those named by our session
    /// lease `lease`) for puts, once per lease; the stream's task reads them first (see
    /// [`stray_range`](Self::stray_range)). The watches of leases `owned` says are no longer
    /// ours are cancelled.
    pub(crate) fn strays(
        &mut self,
        lease: i64,
        range: impl FnOnce() -> (Vec<u8>, Vec<u8>),
        owned: impl Fn(i64) -> bool,
    ) {
        let watched = |r: &Reg| matches!(r.what, What::Stray { lease: l } if l == lease);
        if self.regs.values().any(watched) {
            return;
        }
        let gone: Vec<i64> = self
            .regs
            .iter()
            .filter(|(_, r)| matches!(r.what, What::Stray { lease } if !owned(lease)))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.cancel(id);
        }
        let (start, end) = range();
        self.add(start, Some(end), 0, What::Stray { lease });
    }

    /// The key range of stray watch `id`, which the stream's task reads (and reaps the strays it
    /// finds) before it creates the watch from the revision after that read: a stray that landed
    /// before the watch, or while the stream was down, is found too.
    pub(crate) fn stray_range(&self, id: i64) -> Option<(Vec<u8>, Vec<u8>)> {
        match self.regs.get(&id) {
            Some(Reg {
                key,
                end: Some(end),
                what: What::Stray { .. },
                ..
            }) => Some((key.clone(), end.clone())),
            _ => None,
        }
    }

    /// Watch `id` is to start at revision `from`.
    pub(crate) fn start_at(&mut self, id: i64, from: i64) {
        if let Some(reg) = self.regs.get_mut(&id) {
            reg.from = from;
        }
    }

    /// What to send for a create of `id`, unless it was cancelled meanwhile.
    pub(crate) fn create_request(&self, id: i64) -> Option<(Vec<u8>, WatchOptions)> {
        let reg = self.regs.get(&id)?;
        let filter = match reg.what {
            What::Stray { .. } => WatchFilterType::NoDelete,
            _ => WatchFilterType::NoPut,
        };
        let mut opts = WatchOptions::new().with_watch_id(id).with_filters([filter]);
        if reg.from > 0 {
            opts = opts.with_start_revision(reg.from);
        }
        if let Some(end) = &reg.end {
            opts = opts.with_range(end.clone());
        }
        Some((reg.key.clone(), opts))
    }

    /// etcd created watch `id`, as of revision `rev`.
    pub(crate) fn created(&mut self, id: i64, rev: i64) {
        if let Some(Reg {
            what: What::Before { covers, subs, .. },
            from,
            ..
        }) = self.regs.get_mut(&id)
        {
            *covers = Some(if *from > 0 { *from } else { rev + 1 });
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

    /// etcd cancelled (or refused) watch `id`: a before watch breaks (its waiters read again);
    /// an own-key or stray watch whose start was compacted away is asked for again, under a new
    /// id, from the compaction (`compacted`); `true` for any other cancel of those, which ends
    /// the stream (a new life, paced, creates them again).
    pub(crate) fn cancelled(&mut self, id: i64, compacted: i64) -> bool {
        let Some(reg) = self.regs.get(&id) else {
            return false;
        };
        if matches!(reg.what, What::Before { .. }) {
            self.drop_before(id);
            return false;
        }
        if compacted <= 0 {
            return true;
        }
        let mut reg = self.regs.remove(&id).expect("just found");
        reg.from = compacted;
        let new = self.next_id;
        self.next_id += 1;
        for v in self.own.values_mut() {
            if *v == id {
                *v = new;
            }
        }
        self.regs.insert(new, reg);
        // etcd keeps a compacted watch's id until the client cancels it.
        let _ = self.cmds.send(Cmd::Cancel(id));
        let _ = self.cmds.send(Cmd::Create(new));
        false
    }

    /// An event of watch `id` at revision `rev`; `true` for a put the caller should check as a
    /// stray.
    pub(crate) fn event(&mut self, id: i64, deleted: bool, rev: i64) -> bool {
        let Some(reg) = self.regs.get_mut(&id) else {
            return false;
        };
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
                false
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
                false
            }
            What::Stray { .. } => !deleted,
            _ => false,
        }
    }

    /// A new life of the stream: every watch to create again (before watches break instead).
    pub(crate) fn restart(&mut self) -> Vec<i64> {
        let broken: Vec<i64> = self
            .regs
            .iter()
            .filter(|(_, r)| matches!(r.what, What::Before { .. }))
            .map(|(id, _)| *id)
            .collect();
        for id in broken {
            self.drop_before(id);
        }
        let mut ids: Vec<i64> = self.regs.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The handle closed: holders turn Lost, waiters are woken.
    pub(crate) fn stop(&mut self) {
        for (_, reg) in self.regs.drain() {
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
        self.own.clear();
        self.befores.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watches() -> (KeyWatches, mpsc::UnboundedReceiver<Cmd>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (KeyWatches::new(tx), rx)
    }

    fn sent(rx: &mut mpsc::UnboundedReceiver<Cmd>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(c) = rx.try_recv() {
            out.push(format!("{c:?}"));
        }
        out
    }

    /// A key's watch is created once and kept for the next waiter; it covers an incarnation
    /// only if it was in place before that incarnation was created.
    #[test]
    fn a_before_watch_is_kept_and_knows_what_it_covers() {
        let (mut k, mut rx) = watches();
        let n = Arc::new(Notify::new());
        let w = k.before(b"p/a", 10, n.clone());
        assert_eq!(w.phase(), Phase::Pending);
        assert_eq!(sent(&mut rx), ["Create(1)"]);
        k.created(1, 20);
        assert_eq!(w.phase(), Phase::Created);
        assert!(!k.covers(&w), "created at 20, the key at 10: read again");
        // Its delete fires it, once.
        assert!(!k.event(1, true, 30));
        assert_eq!(w.phase(), Phase::Fired);
        k.end_before(&w);
        // The key comes back (created at 40): the same watch, covering it, nothing sent.
        let w2 = k.before(b"p/a", 40, n.clone());
        assert_eq!(w2.phase(), Phase::Created);
        assert!(k.covers(&w2));
        assert!(sent(&mut rx).is_empty());
        // A delete of an older incarnation does not fire a waiter on a newer one.
        k.event(1, true, 35);
        assert_eq!(w2.phase(), Phase::Created);
        k.event(1, true, 41);
        assert_eq!(w2.phase(), Phase::Fired);
    }

    /// A waiter that comes after the delete was heard is told at once.
    #[test]
    fn a_delete_heard_before_the_waiter_came_fires_at_once() {
        let (mut k, _rx) = watches();
        let n = Arc::new(Notify::new());
        let w = k.before(b"p/a", 10, n.clone());
        k.created(1, 5);
        k.end_before(&w);
        k.event(1, true, 12);
        let late = k.before(b"p/a", 10, n);
        assert_eq!(late.phase(), Phase::Fired);
    }

    /// A new watch whose name's cache is full of watches with waiters is not evicted at once
    /// (its waiter is in before the cache is trimmed).
    #[test]
    fn a_new_watch_with_a_waiter_survives_a_full_cache() {
        let (mut k, mut rx) = watches();
        let n = Arc::new(Notify::new());
        let busy: Vec<_> = (0..=CACHE)
            .map(|i| k.before(format!("p/{i}").as_bytes(), 1, n.clone()))
            .collect();
        let cmds = sent(&mut rx);
        assert!(cmds.iter().all(|c| c.starts_with("Create")), "{cmds:?}");
        assert!(busy.iter().all(|w| w.phase() == Phase::Pending));
    }

    /// An own-key watch whose start etcd compacted away is asked for again under a new id (etcd
    /// keeps the old one until it is cancelled); any other cancel of it ends the stream.
    #[test]
    fn a_compacted_own_watch_comes_back_under_a_new_id() {
        let (mut k, mut rx) = watches();
        k.own(b"p/mine", 7);
        assert_eq!(sent(&mut rx), ["Create(1)"]);
        assert!(!k.cancelled(1, 50));
        assert_eq!(sent(&mut rx), ["Cancel(1)", "Create(2)"]);
        let cell = StateCell::new(lockkit_core::spi::LeaseClock::starting(
            tokio::time::Instant::now(),
            std::time::Duration::from_secs(60),
        ));
        k.set_holder(7, &cell);
        k.event(2, true, 60);
        assert!(k.is_gone(7));
        assert_eq!(cell.get(), lockkit_core::LockState::Lost);
        k.own(b"p/other", 8);
        assert!(k.cancelled(3, 0), "a refused own-key watch ends the stream");
    }

    /// Idle watches beyond the cache are cancelled, least recently used first; a watch with a
    /// waiter never is. A new stream life breaks every before watch.
    #[test]
    fn idle_watches_are_evicted_and_a_restart_breaks_the_rest() {
        let (mut k, mut rx) = watches();
        let n = Arc::new(Notify::new());
        let busy = k.before(b"p/busy", 1, n.clone());
        for i in 0..CACHE {
            let w = k.before(format!("p/{i}").as_bytes(), 1, n.clone());
            k.end_before(&w);
        }
        let cmds = sent(&mut rx);
        assert_eq!(cmds.len(), CACHE + 2, "{cmds:?}");
        assert_eq!(cmds.last().unwrap(), "Cancel(2)", "the oldest idle one");
        assert_eq!(busy.phase(), Phase::Pending);
        k.own(b"p/mine", 7);
        let again = k.restart();
        assert_eq!(busy.phase(), Phase::Broken);
        assert_eq!(again.len(), 1, "only the own-key watch is created again");
    }
}
