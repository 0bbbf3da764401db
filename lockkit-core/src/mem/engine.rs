//! The in-process lock engine: one table of resources, each with holders and a FIFO queue.
//!
//! Mutexes, read-write locks and semaphores are one algorithm with three compatibility rules.
//! Only the queue's front is ever granted, so order is strict FIFO and a waiting writer blocks
//! readers that arrive after it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use crate::armed::{Armed, Undo};
use crate::clock::LeaseClock;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::inspect::{HoldMode, HolderInfo, LockInfo, WaiterInfo};
use crate::leader::{Leader, LeaderChanges};
use crate::options::Lease;
use crate::reason::LostReason;
use crate::spi::LeaderFeed;
use crate::spi::StateCell;
use crate::spi::{settle_size, too_many};

/// Which primitive a resource is; each has its own name space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Prim {
    Mutex,
    RwLock,
    Semaphore,
    Election,
}

/// How a holder or waiter holds a resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Exclusive,
    Shared,
    Permits(u32),
}

impl From<Mode> for HoldMode {
    fn from(m: Mode) -> HoldMode {
        match m {
            Mode::Exclusive => HoldMode::Exclusive,
            Mode::Shared => HoldMode::Shared,
            Mode::Permits(k) => HoldMode::Permits(k),
        }
    }
}

/// One primitive in the table: its kind, the handle's `prefix` (`None`: none was set) and its
/// name. The prefix is kept apart from the name, so that no two prefixes share a lock (prefix
/// `a` with name `b/c`, and prefix `a/b` with name `c`).
pub(crate) type Key = (Prim, Option<String>, String);

#[derive(Debug)]
struct Holder {
    mode: Mode,
    token: FencingToken,
    lease: Lease,
    /// A fixed lease's end (the core releases the holder then; this is the backstop). A watchdog
    /// lease has none: holder and table live in one process and die together.
    expires_at: Option<Instant>,
    state: StateCell,
    /// What an election's leader proclaims (empty for locks).
    value: Vec<u8>,
}

impl Holder {
    fn live(&self, now: Instant) -> bool {
        self.expires_at.is_none_or(|at| at > now)
    }

    /// What is left of its lease: a watchdog lease is always whole.
    fn remaining(&self, now: Instant) -> Duration {
        match self.expires_at {
            Some(at) => at.saturating_duration_since(now),
            None => self.lease.duration(),
        }
    }
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    mode: Mode,
    lease: Lease,
    value: Vec<u8>,
    tx: oneshot::Sender<Result<Grant>>,
    /// Told, at the front of the queue, to look at the holders' lease ends again.
    ends: Arc<Notify>,
}

/// A resource's holders by owner id, oldest first. Usually one: a vector sized to fit (a
/// `BTreeMap`'s first node took 1 KiB of every held lock).
#[derive(Debug, Default)]
struct Holders(Vec<(u64, Holder)>);

impl Holders {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn iter(&self) -> impl Iterator<Item = (&u64, &Holder)> {
        self.0.iter().map(|(id, h)| (id, h))
    }

    fn values(&self) -> impl Iterator<Item = &Holder> {
        self.0.iter().map(|(_, h)| h)
    }

    /// Owner ids only grow, so pushing keeps the order.
    fn insert(&mut self, owner: u64, h: Holder) {
        if self.0.capacity() == 0 {
            self.0.reserve_exact(1);
        }
        self.0.push((owner, h));
    }

    fn remove(&mut self, owner: &u64) -> Option<Holder> {
        let at = self.0.iter().position(|(id, _)| id == owner)?;
        Some(self.0.remove(at).1)
    }

    fn get_mut(&mut self, owner: &u64) -> Option<&mut Holder> {
        self.0
            .iter_mut()
            .find(|(id, _)| id == owner)
            .map(|(_, h)| h)
    }

    fn retain(&mut self, mut keep: impl FnMut(&u64, &mut Holder) -> bool) {
        self.0.retain_mut(|(id, h)| keep(id, h));
    }
}

#[derive(Debug, Default)]
struct Resource {
    holders: Holders,
    queue: VecDeque<Waiter>,
}

impl Resource {
    /// The first end of a fixed lease among the holders.
    fn first_end(&self) -> Option<Instant> {
        self.holders.values().filter_map(|h| h.expires_at).min()
    }

    /// Tells the queue's front waiter to look at the holders' first lease end again, if there
    /// is one: any one waiter ends an expired lease for all, and no whole queue is woken.
    fn tell_front(&self) {
        if let (Some(w), Some(_)) = (self.queue.front(), self.first_end()) {
            w.ends.notify_one();
        }
    }

    fn compatible(&self, mode: Mode, capacity: u32) -> bool {
        match mode {
            Mode::Exclusive => self.holders.is_empty(),
            Mode::Shared => self.holders.values().all(|h| h.mode == Mode::Shared),
            Mode::Permits(k) => self.permits_in_use() + u64::from(k) <= u64::from(capacity),
        }
    }

    /// Counted in `u64`: sizes near `u32::MAX` (an "unbounded" semaphore) must not wrap.
    fn permits_in_use(&self) -> u64 {
        self.holders
            .values()
            .map(|h| match h.mode {
                Mode::Permits(k) => u64::from(k),
                _ => 1,
            })
            .sum()
    }

    fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty()
    }
}

#[derive(Debug, Default)]
struct Table {
    resources: HashMap<Key, Resource>,
    /// Each semaphore's size, stored by its first acquire or by `set_size`, for the table's
    /// life.
    sizes: HashMap<Key, u32>,
    /// The observers of each election, with the handle each came through.
    observers: HashMap<Key, Vec<(u64, LeaderFeed)>>,
    next_id: u64,
    next_token: u64,
}

/// The shared engine of one `mem://` backend.
#[derive(Debug, Default)]
pub(crate) struct Engine {
    table: Mutex<Table>,
}

/// A granted ownership on its way to the acquirer. If it is dropped before it is turned into a
/// guard (the acquirer went away), it releases itself.
pub(crate) type Grant = Armed<Granted>;

/// What a [`Grant`] holds.
#[derive(Debug)]
pub(crate) struct Granted {
    engine: Weak<Engine>,
    key: Key,
    owner: u64,
    token: FencingToken,
    lease: Lease,
    state: StateCell,
}

impl Granted {
    pub(crate) fn owner(&self) -> u64 {
        self.owner
    }
    pub(crate) fn token(&self) -> FencingToken {
        self.token
    }
    pub(crate) fn state(&self) -> StateCell {
        self.state.clone()
    }
    pub(crate) fn lease(&self) -> Lease {
        self.lease
    }
}

impl Undo for Granted {
    fn undo(self) {
        if let Some(engine) = self.engine.upgrade() {
            let _ = engine.release(&self.key, self.owner);
        }
    }
}

/// What [`Engine::try_or_queue`] did.
pub(crate) enum Step {
    Granted(Grant),
    /// Queued: the waiter's id, its grant to come, and what tells it to look at the holders'
    /// lease ends again.
    Queued(u64, oneshot::Receiver<Result<Grant>>, Arc<Notify>),
    Busy,
}

impl Engine {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Grants `key` in `mode` at once when the queue is empty and the holders allow it, else
    /// queues a waiter (when `may_wait`) whose grant arrives on the returned receiver. `size`
    /// is the size a semaphore handle asks for (`None`: the stored one), settled against the
    /// stored size under the table's lock.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn try_or_queue(
        self: &Arc<Self>,
        key: &Key,
        mode: Mode,
        size: Option<u32>,
        lease: Lease,
        may_wait: bool,
        value: &[u8],
    ) -> Result<Step> {
        let now = Instant::now();
        let mut t = self.lock();
        let capacity = match mode {
            Mode::Permits(k) => {
                let (size, store) = settle_size(&key.2, size, t.sizes.get(key).copied())?;
                if k > size {
                    return Err(too_many(&key.2, k, size));
                }
                if store {
                    t.sizes.insert(key.clone(), size);
                }
                size
            }
            _ => 1,
        };
        self.purge_expired(&mut t, key, now);
        let res = t.resources.entry(key.clone()).or_default();
        if res.queue.is_empty() && res.compatible(mode, capacity) {
            let g = self.grant(&mut t, key, mode, lease, now, value.to_vec());
            announce(&mut t, key);
            Ok(Step::Granted(g))
        } else if !may_wait {
            drop_if_idle(&mut t, key);
            Ok(Step::Busy)
        } else {
            t.next_id += 1;
            let id = t.next_id;
            let (tx, rx) = oneshot::channel();
            let ends = Arc::new(Notify::new());
            t.resources
                .entry(key.clone())
                .or_default()
                .queue
                .push_back(Waiter {
                    id,
                    mode,
                    lease,
                    value: value.to_vec(),
                    tx,
                    ends: ends.clone(),
                });
            Ok(Step::Queued(id, rx, ends))
        }
    }

    /// The earliest end of a fixed lease among `key`'s holders: a waiter looks again then, in
    /// case the holder's own expiry (a task in the holder's runtime) never runs.
    pub(crate) fn next_expiry(&self, key: &Key) -> Option<Instant> {
        self.lock().resources.get(key)?.first_end()
    }

    /// Ends the holders of `key` whose lease ran out, and lets the queue move.
    pub(crate) fn expire(self: &Arc<Self>, key: &Key) {
        let mut t = self.lock();
        self.purge_expired(&mut t, key, Instant::now());
    }

    /// Drops holders whose lease ran out (their guards turn Lost) and lets the queue move.
    fn purge_expired(self: &Arc<Self>, t: &mut Table, key: &Key, now: Instant) {
        let Some(res) = t.resources.get_mut(key) else {
            return;
        };
        let before = res.holders.len();
        res.holders.retain(|_, h| {
            let live = h.live(now);
            if !live {
                h.state.mark_lost(LostReason::LeaseExpired);
            }
            live
        });
        if res.holders.len() != before {
            self.drain(t, key);
        }
    }

    fn grant(
        self: &Arc<Self>,
        t: &mut Table,
        key: &Key,
        mode: Mode,
        lease: Lease,
        now: Instant,
        value: Vec<u8>,
    ) -> Grant {
        t.next_id += 1;
        t.next_token += 1;
        let (owner, token) = (t.next_id, FencingToken(t.next_token));
        let (clock, expires_at) = match lease {
            Lease::Fixed(d) => (LeaseClock::starting(now, d), Some(now + d)),
            Lease::Watchdog(_) => (LeaseClock::new(LostReason::LeaseExpired), None),
        };
        let state = StateCell::new(clock);
        let holder = Holder {
            mode,
            token,
            lease,
            expires_at,
            state: state.clone(),
            value,
        };
        t.resources
            .entry(key.clone())
            .or_default()
            .holders
            .insert(owner, holder);
        Armed::new(Granted {
            engine: Arc::downgrade(self),
            key: key.clone(),
            owner,
            token,
            lease,
            state,
        })
    }

    /// Grants the queue's front while it is compatible (a waiter that went away is skipped, its
    /// grant undone at once; one asking for more permits than a shrunk size is refused), then
    /// tells an election's observers.
    fn drain(self: &Arc<Self>, t: &mut Table, key: &Key) {
        let capacity = t.sizes.get(key).copied().unwrap_or(1);
        let now = Instant::now();
        loop {
            let Some(res) = t.resources.get_mut(key) else {
                return;
            };
            let Some(front) = res.queue.front() else {
                break;
            };
            if front.tx.is_closed() {
                res.queue.pop_front();
                continue;
            }
            if let Mode::Permits(k) = front.mode {
                if k > capacity {
                    let w = res.queue.pop_front().expect("front exists");
                    let _ = w.tx.send(Err(too_many(&key.2, k, capacity)));
                    continue;
                }
            }
            if !res.compatible(front.mode, capacity) {
                break;
            }
            let w = res.queue.pop_front().expect("front exists");
            let g = self.grant(t, key, w.mode, w.lease, now, w.value);
            if let Err(Ok(g)) = w.tx.send(Ok(g)) {
                // The waiter went away just now: its grant is undone here, under the lock, so
                // nobody (an election's observer included) ever sees it held.
                let owner = g.disarm().owner();
                if let Some(res) = t.resources.get_mut(key) {
                    res.holders.remove(&owner);
                }
            }
        }
        // A new holder's lease end, or a new front waiter: the front bounds its wait by it.
        if let Some(res) = t.resources.get(key) {
            res.tell_front();
        }
        drop_if_idle(t, key);
        announce(t, key);
    }

    /// An election's leader now, or `None`.
    pub(crate) fn leader(&self, key: &Key) -> Option<Leader> {
        leader_of(&self.lock(), key)
    }

    /// Every change of `key`'s leader from now on, the current one first, through `handle`.
    pub(crate) fn observe(&self, key: &Key, handle: u64) -> LeaderChanges {
        let (mut feed, changes) = LeaderFeed::channel();
        let mut t = self.lock();
        feed.send(leader_of(&t, key));
        let feeds = t.observers.entry(key.clone()).or_default();
        feeds.retain(|(_, f)| !f.is_closed());
        feeds.push((handle, feed));
        changes
    }

    /// Ends the observer streams that came through `handle` (it was closed).
    pub(crate) fn forget_observers(&self, handle: u64) {
        let mut t = self.lock();
        t.observers.retain(|_, feeds| {
            feeds.retain(|(h, _)| *h != handle);
            !feeds.is_empty()
        });
    }

    /// Replaces the value of an election's leader `owner`, if it still leads.
    pub(crate) fn proclaim(&self, key: &Key, owner: u64, value: &[u8]) -> Result<()> {
        let mut t = self.lock();
        live_holder(&mut t, key, owner)?.value = value.to_vec();
        announce(&mut t, key);
        Ok(())
    }

    /// Removes a queued waiter (its grant, if one was sent already, is released when its
    /// receiver drops).
    pub(crate) fn cancel(self: &Arc<Self>, key: &Key, id: u64) {
        let mut t = self.lock();
        if let Some(res) = t.resources.get_mut(key) {
            res.queue.retain(|w| w.id != id);
        }
        self.drain(&mut t, key);
    }

    /// Releases one ownership. `LockLost` if it is gone (expired, or force-unlocked).
    pub(crate) fn release(self: &Arc<Self>, key: &Key, owner: u64) -> Result<()> {
        let mut t = self.lock();
        let removed = t
            .resources
            .get_mut(key)
            .and_then(|r| r.holders.remove(&owner));
        self.drain(&mut t, key);
        match removed {
            Some(_) => Ok(()),
            None => Err(Error::lost(&key.2)),
        }
    }

    /// Moves a holder's expiry to now + `lease`, if it still holds.
    pub(crate) fn extend(self: &Arc<Self>, key: &Key, owner: u64, lease: Duration) -> Result<()> {
        let mut t = self.lock();
        let h = live_holder(&mut t, key, owner)?;
        h.expires_at = Some(Instant::now() + lease);
        h.lease = Lease::Fixed(lease);
        if let Some(res) = t.resources.get(key) {
            res.tell_front();
        }
        Ok(())
    }

    /// Turns an exclusive holder into a shared one with a fresh state; returns that state and
    /// the holder's lease (as the last `extend` set it).
    pub(crate) fn downgrade(self: &Arc<Self>, key: &Key, owner: u64) -> Result<(StateCell, Lease)> {
        let mut t = self.lock();
        let result = match t
            .resources
            .get_mut(key)
            .and_then(|r| r.holders.get_mut(&owner))
        {
            Some(h) if h.mode == Mode::Exclusive => {
                h.mode = Mode::Shared;
                // The read ownership keeps the write ownership's lease deadline.
                h.state = StateCell::new(h.state.clock().clone());
                Ok((h.state.clone(), h.lease))
            }
            _ => Err(Error::lost(&key.2)),
        };
        self.drain(&mut t, key);
        result
    }

    /// Removes every holder (they turn Lost). Returns whether there was one.
    pub(crate) fn force_unlock(self: &Arc<Self>, key: &Key) -> bool {
        let mut t = self.lock();
        let holders = t
            .resources
            .get_mut(key)
            .map(|r| std::mem::take(&mut r.holders))
            .unwrap_or_default();
        for h in holders.values() {
            h.state.mark_lost(LostReason::Deleted);
        }
        self.drain(&mut t, key);
        !holders.is_empty()
    }

    /// Whether anyone holds `key`.
    pub(crate) fn is_locked(self: &Arc<Self>, key: &Key) -> bool {
        let mut t = self.lock();
        self.purge_expired(&mut t, key, Instant::now());
        t.resources.get(key).is_some_and(|r| !r.holders.is_empty())
    }

    /// The longest remaining lease among holders of `key`.
    pub(crate) fn remaining_lease(&self, key: &Key) -> Option<Duration> {
        let now = Instant::now();
        let t = self.lock();
        t.resources
            .get(key)?
            .holders
            .values()
            .map(|h| h.remaining(now))
            .filter(|d| !d.is_zero())
            .max()
    }

    /// Holders and queued waiters of `key`, for operators.
    pub(crate) fn inspect(&self, key: &Key) -> LockInfo {
        let now = Instant::now();
        let t = self.lock();
        let Some(res) = t.resources.get(key) else {
            return LockInfo::default();
        };
        let holders = res
            .holders
            .iter()
            .filter(|(_, h)| h.live(now))
            .map(|(id, h)| {
                HolderInfo::new(format!("mem:{id}"), h.mode.into())
                    .with_token(h.token)
                    .with_remaining_lease(h.remaining(now))
            })
            .collect();
        let waiters = res
            .queue
            .iter()
            .filter(|w| !w.tx.is_closed())
            .map(|w| WaiterInfo::new(format!("mem-waiter:{}", w.id), w.mode.into()))
            .collect();
        LockInfo::new(holders, waiters)
    }

    /// The keys with a live holder or an open waiter, for operators.
    pub(crate) fn active(&self) -> Vec<Key> {
        let now = Instant::now();
        let t = self.lock();
        t.resources
            .iter()
            .filter(|(_, r)| {
                r.holders.iter().any(|(_, h)| h.live(now))
                    || r.queue.iter().any(|w| !w.tx.is_closed())
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Permits not in use, of the stored size (or the size asked for, before one is stored).
    pub(crate) fn available(&self, key: &Key, size: Option<u32>) -> Result<u32> {
        let t = self.lock();
        let (size, _) = settle_size(&key.2, size, t.sizes.get(key).copied())?;
        let used = t.resources.get(key).map_or(0, Resource::permits_in_use);
        // At most `size`, so it fits.
        Ok(u64::from(size).saturating_sub(used) as u32)
    }

    /// A semaphore's stored size.
    pub(crate) fn size(&self, key: &Key) -> Option<u32> {
        self.lock().sizes.get(key).copied()
    }

    /// Stores a semaphore's size, admitting the waiters that now fit; returns the size before.
    pub(crate) fn set_size(self: &Arc<Self>, key: &Key, size: u32) -> Option<u32> {
        let mut t = self.lock();
        let before = t.sizes.insert(key.clone(), size);
        // Waiters asking for more than the new size are told now, wherever they are queued.
        if let Some(res) = t.resources.get_mut(key) {
            let (refused, kept) = std::mem::take(&mut res.queue)
                .into_iter()
                .partition(|w| matches!(w.mode, Mode::Permits(k) if k > size));
            res.queue = kept;
            for w in refused {
                if let Mode::Permits(k) = w.mode {
                    let _ = w.tx.send(Err(too_many(&key.2, k, size)));
                }
            }
        }
        self.purge_expired(&mut t, key, Instant::now());
        self.drain(&mut t, key);
        before
    }
}

/// `owner`'s hold of `key` while its lease runs, else `LockLost`.
fn live_holder<'t>(t: &'t mut Table, key: &Key, owner: u64) -> Result<&'t mut Holder> {
    let now = Instant::now();
    match t
        .resources
        .get_mut(key)
        .and_then(|r| r.holders.get_mut(&owner))
    {
        Some(h) if h.live(now) => Ok(h),
        _ => Err(Error::lost(&key.2)),
    }
}

/// An election's leader: its one holder.
fn leader_of(t: &Table, key: &Key) -> Option<Leader> {
    let res = t.resources.get(key)?;
    let now = Instant::now();
    let (_, h) = res.holders.iter().find(|(_, h)| h.live(now))?;
    Some(Leader::new(h.value.clone(), h.token))
}

/// Tells an election's observers its leader, if it changed.
fn announce(t: &mut Table, key: &Key) {
    if key.0 != Prim::Election || !t.observers.contains_key(key) {
        return;
    }
    let leader = leader_of(t, key);
    if let Some(feeds) = t.observers.get_mut(key) {
        feeds.retain_mut(|(_, f)| f.send(leader.clone()));
        if feeds.is_empty() {
            t.observers.remove(key);
        }
    }
}

fn drop_if_idle(t: &mut Table, key: &Key) {
    if t.resources.get(key).is_some_and(Resource::is_idle) {
        t.resources.remove(key);
    }
}
