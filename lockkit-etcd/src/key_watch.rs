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
//! - **before** watches (deletes only), created from "now" and awaited, after which the waiter
//!   reads the queue again (linearizably): a key still there in that read is deleted later, so
//!   its delete reaches the watch; that read also settles every turn, so the watch only wakes;
//! - **stray** watches (puts only) on the keys named by one of our session leases: a put there
//!   in a slot no acquisition of ours holds is one of our strays (see `strays.rs`); only our own
//!   acquisitions' puts come through, one per acquisition.
//!
//! The stream's task (`watch.rs`) sends what this registry asks for and routes what comes back;
//! a new life of the stream creates the own-key and stray watches again from their revisions
//! and breaks the before watches, whose waiters read again and watch anew.

use std::collections::{HashMap, HashSet};
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
        phase: watch::Sender<Phase>,
        waiter: Arc<Notify>,
    },
    Stray,
}

#[derive(Debug)]
struct Reg {
    key: Vec<u8>,
    /// The end of a range watch (exclusive); `None` for one key.
    end: Option<Vec<u8>>,
    /// The revision a (re)created watch starts at; 0 is "now".
    from: i64,
    what: What,
}

/// A waiter's before watch; dropping it cancels the watch.
#[derive(Debug)]
pub(crate) struct BeforeWatch {
    pub(crate) id: i64,
    pub(crate) key: Vec<u8>,
    phase: watch::Receiver<Phase>,
}

impl BeforeWatch {
    /// The watch's phase now.
    pub(crate) fn phase(&self) -> Phase {
        *self.phase.borrow()
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
    /// Key ranges already watched for strays, by their start.
    strays: HashSet<Vec<u8>>,
    cmds: mpsc::UnboundedSender<Cmd>,
    /// The highest revision the stream has reported.
    pub(crate) seen_rev: i64,
}

impl KeyWatches {
    pub(crate) fn new(cmds: mpsc::UnboundedSender<Cmd>) -> KeyWatches {
        KeyWatches {
            next_id: 1,
            regs: HashMap::new(),
            own: HashMap::new(),
            strays: HashSet::new(),
            cmds,
            seen_rev: 0,
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

    /// Watches `key`, ranked just before a waiter's, for its delete, which wakes `waiter`.
    pub(crate) fn before(&mut self, key: &[u8], waiter: Arc<Notify>) -> BeforeWatch {
        let (phase, rx) = watch::channel(Phase::Pending);
        let id = self.add(key.to_vec(), None, 0, What::Before { phase, waiter });
        BeforeWatch {
            id,
            key: key.to_vec(),
            phase: rx,
        }
    }

    /// Ends a waiter's before watch.
    pub(crate) fn end_before(&mut self, w: &BeforeWatch) {
        self.cancel(w.id);
    }

    /// Watches the keys from `start` up to `end` (those named by one of our session leases) for
    /// puts, once.
    pub(crate) fn strays(&mut self, start: Vec<u8>, end: Vec<u8>) {
        if self.strays.insert(start.clone()) {
            let from = if self.seen_rev > 0 {
                self.seen_rev + 1
            } else {
                0
            };
            self.add(start, Some(end), from, What::Stray);
        }
    }

    /// What to send for a create of `id`, unless it was cancelled meanwhile.
    pub(crate) fn create_request(&self, id: i64) -> Option<(Vec<u8>, WatchOptions)> {
        let reg = self.regs.get(&id)?;
        let filter = match reg.what {
            What::Stray => WatchFilterType::NoDelete,
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

    /// etcd created watch `id`.
    pub(crate) fn created(&mut self, id: i64) {
        if let Some(Reg {
            what: What::Before { phase, .. },
            ..
        }) = self.regs.get(&id)
        {
            phase.send_if_modified(|p| {
                let pending = *p == Phase::Pending;
                if pending {
                    *p = Phase::Created;
                }
                pending
            });
        }
    }

    /// etcd cancelled (or refused) watch `id`: a before watch breaks; an own-key or stray watch
    /// is asked for again from now (a compacted start revision is the only cause seen).
    pub(crate) fn cancelled(&mut self, id: i64) {
        let Some(reg) = self.regs.get_mut(&id) else {
            return;
        };
        match &reg.what {
            What::Before { .. } => {
                let reg = self.regs.remove(&id).expect("just found");
                break_before(reg);
            }
            _ => {
                reg.from = 0;
                let _ = self.cmds.send(Cmd::Create(id));
            }
        }
    }

    /// A delete of the key of watch `id`; `true` for a put the caller should check as a stray.
    pub(crate) fn event(&mut self, id: i64, deleted: bool) -> bool {
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
            What::Before { phase, waiter } if deleted => {
                phase.send_replace(Phase::Fired);
                waiter.notify_one();
                false
            }
            What::Stray => !deleted,
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
            let reg = self.regs.remove(&id).expect("listed");
            break_before(reg);
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
                What::Before { phase, waiter } => {
                    phase.send_replace(Phase::Broken);
                    waiter.notify_one();
                }
                What::Stray => {}
            }
        }
        self.own.clear();
    }
}

fn break_before(reg: Reg) {
    if let What::Before { phase, waiter } = reg.what {
        phase.send_replace(Phase::Broken);
        waiter.notify_one();
    }
}
