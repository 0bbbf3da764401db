//! [`Watchdog`]: ownerships that each carry their own lease on the server (a Redis lock hash, a
//! member of a sorted set), renewed by one task per client every third of the lease, many in
//! one round trip, as Redisson's watchdog does. A fixed lease is watched only for its deadline
//! (the core releases it then), or until the backend hears that the server took it.
//!
//! The backend supplies the round trip ([`Renew`]): how ownerships group into one call, and
//! the call. The schedule, the batching, the Suspect/Held/Lost transitions, the deadline and
//! the metrics are decided here, once.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::clock::LeaseClock;
use crate::fencing::FencingToken;
use crate::options::Lease;
use crate::reason::LostReason;
use crate::spi::{GuardParts, Held};
use crate::state::StateCell;

/// The longest the task sleeps without being woken: registering an ownership that is not due
/// before then needs no wake-up, so a short acquire-release cycle costs no task switch.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// Ownerships per round trip.
pub const BATCH: usize = 100;

/// How long a force-unlock message is kept for an ownership not yet watched: its acquire's
/// answer (or its replicas' acknowledgement) may still be on its way when the message comes.
const HEARD_FOR: Duration = Duration::from_secs(60);

/// How many such messages are kept; the oldest goes first.
const HEARD_MOST: usize = 256;

/// Says whether a force-unlock message names an ownership.
type Names<E> = Arc<dyn Fn(&E) -> bool + Send + Sync>;

/// One force-unlock message, kept for ownerships registered after it came.
struct Heard<E> {
    at: Instant,
    names: Names<E>,
}

/// One ownership due for renewal, as handed to [`Renew::renew`].
#[derive(Clone, Debug)]
pub struct Due<E> {
    /// Its id in the watchdog.
    pub id: u64,
    /// The lease to renew it for.
    pub lease: Duration,
    /// What its backend keeps about it (key, owner field...).
    pub entry: E,
}

/// What the server answered for one ownership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewed {
    /// Renewed for its lease, counted from before the round trip was sent.
    Yes,
    /// Perhaps renewed (the primary took it, the replicas were not seen to): as a failure, the
    /// guard turns Suspect and the renewal is tried again soon.
    Unsure,
    /// Gone or taken over: the guard is Lost.
    Gone,
}

/// A backend's renewal round trip, driven by [`Watchdog::run`].
#[async_trait]
pub trait Renew<E>: Send + Sync + 'static {
    /// Ownerships of one group may share a round trip (say: one script, one cluster slot).
    type Group: Hash + Eq + Send;

    /// The group of one ownership.
    fn group(&self, entry: &E) -> Self::Group;

    /// Renews one batch (at most [`BATCH`] of one group) within `limit`: an answer per
    /// ownership in order (an ownership the reply has no answer for counts as
    /// [`Gone`](Renewed::Gone)), or `None` if the round trip failed or did not answer within
    /// `limit`.
    async fn renew(&self, batch: &[Due<E>], limit: Duration) -> Option<Vec<Renewed>>;

    /// The longest one request may take.
    fn request_timeout(&self) -> Duration;
}

/// A new ownership to watch.
#[derive(Debug)]
pub struct Watched<E> {
    /// The lock's name, for events.
    pub name: Arc<str>,
    /// Taken before the request that set its expiry on the server was sent (for a hand-off:
    /// before the waiter's last attempt that found the lock busy; the hand-off came after it).
    pub sent_at: Instant,
    /// The expiry that request set: the lease, or a shorter one (a hand-off's) until the first
    /// renewal.
    pub expiry: Duration,
    /// What its backend keeps about it.
    pub entry: E,
}

struct Entry<E> {
    name: Arc<str>,
    lease: Duration,
    renew: bool,
    /// The expiry the server set last.
    window: Duration,
    next_due: Instant,
    /// How early it may be renewed to share a call with others: a sixth of its window, none
    /// for a retry after a failure (which would otherwise be due again at once).
    early: Duration,
    in_flight: bool,
    /// The server may have taken it while a renewal was in flight: renewed again at once, even
    /// if that one says yes (it may have been run before the taking).
    check_again: bool,
    state: StateCell,
    entry: E,
}

/// The ownerships one client's watchdog task keeps alive, shared by the task and the guards.
pub struct Watchdog<E> {
    backend: &'static str,
    entries: Mutex<HashMap<u64, Entry<E>>>,
    next_id: AtomicU64,
    wake: Notify,
    /// When the task will look again on its own (`None`: it has not looked yet).
    scheduled: Mutex<Option<Instant>>,
    /// Recent force-unlock messages (see [`Watchdog::taken_where`]).
    heard: Mutex<VecDeque<Heard<E>>>,
}

impl<E> fmt::Debug for Watchdog<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watchdog")
            .field("backend", &self.backend)
            .field("watched", &self.entries.lock().map_or(0, |e| e.len()))
            .finish()
    }
}

impl<E: Clone + fmt::Debug + Send + 'static> Watchdog<E> {
    /// An empty watchdog; `backend` names it in events and metrics.
    pub fn new(backend: &'static str) -> Self {
        Watchdog {
            backend,
            entries: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            wake: Notify::new(),
            scheduled: Mutex::new(None),
            heard: Mutex::new(VecDeque::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Entry<E>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The guard parts of a new ownership with `token` on `lease`, watched from now on: its
    /// state runs from `w`'s expiry (a watchdog lease is renewed, a fixed one watched for its
    /// deadline), and `held` makes its backend's [`Held`] from its watchdog id and state.
    pub fn hold(
        &self,
        w: Watched<E>,
        token: u64,
        lease: Lease,
        held: impl FnOnce(u64, StateCell) -> Box<dyn Held>,
    ) -> GuardParts {
        let state = StateCell::new(LeaseClock::starting(w.sent_at, w.expiry));
        let id = self.register(w, lease, state.clone());
        GuardParts::new(FencingToken(token), lease, state.clone(), held(id, state))
    }

    /// Whether a force-unlock message heard since `since` names `entry`.
    fn heard_since(&self, since: Instant, entry: &E) -> bool {
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        if heard.is_empty() {
            return false;
        }
        let now = Instant::now();
        while heard
            .front()
            .is_some_and(|h| now.saturating_duration_since(h.at) > HEARD_FOR)
        {
            heard.pop_front();
        }
        heard.iter().any(|h| h.at >= since && (h.names)(entry))
    }

    /// Starts watching an ownership in `state`; returns its id. A force-unlock heard since its
    /// request was sent that names it counts as heard now (the message may beat the acquire's
    /// answer here), as a hint only: a renewed lease is renewed at once, a fixed one left to its
    /// deadline. The message may be about an ownership the same acquire held a moment earlier
    /// (a hand-off taken up by a fresh attempt, the lock force-unlocked between the two), which
    /// only the server's owner-checked answer can tell apart.
    fn register(&self, w: Watched<E>, lease: Lease, state: StateCell) -> u64 {
        let (renew, lease) = (lease.is_watchdog(), lease.duration());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Renew once a third of the expiry has passed; a hand-off's short expiry, whose first
        // third may be over by the time the waiter takes it up, once two thirds have passed.
        let next_due = if w.expiry < lease {
            w.sent_at + w.expiry * 2 / 3
        } else {
            w.sent_at + w.expiry / 3
        };
        let deadline = state.clock().deadline().unwrap_or(w.sent_at + w.expiry);
        let mut first_look = if renew { next_due } else { deadline };
        let entry = Entry {
            name: w.name,
            lease,
            renew,
            window: w.expiry,
            next_due,
            early: w.expiry / 6,
            in_flight: false,
            check_again: false,
            state,
            entry: w.entry,
        };
        {
            // Watched before the messages are read, as `taken_where` keeps its message before
            // it reads the ownerships: one of the two sees the other.
            let mut entries = self.lock();
            let e = entries.entry(id).or_insert(entry);
            if self.heard_since(w.sent_at, &e.entry) && e.renew {
                self.taken(e, Instant::now(), false);
                first_look = e.next_due;
            }
        }
        // Wake the task only if it would otherwise look too late.
        let scheduled = *self.scheduled.lock().unwrap_or_else(|e| e.into_inner());
        if scheduled.is_none_or(|at| first_look < at) {
            self.wake.notify_one();
        }
        id
    }

    /// Stops watching (the ownership is being released).
    pub fn unregister(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// A fixed lease was extended to `lease` by a command sent at `sent_at`: the guard's
    /// deadline moves there, shorter or longer, and the task looks again by then.
    pub fn extended(&self, id: u64, sent_at: Instant, lease: Duration) {
        if let Some(e) = self.lock().get_mut(&id) {
            e.state.clock().renewed(sent_at, lease);
            e.lease = lease;
            e.window = lease;
            e.early = lease / 6;
        }
        self.wake.notify_one();
    }

    /// The ownership is gone on the server: its guard is Lost.
    pub fn lost(&self, id: u64) {
        if let Some(e) = self.lock().remove(&id) {
            e.state.mark_lost(LostReason::Deleted);
        }
    }

    /// The server said these ownerships may have been taken from their owners (a force-unlock
    /// names each one it deleted, on a channel whose messages may arrive after a later
    /// acquisition of the same ownership): each renewed one is renewed now, and the owner-checked
    /// answer decides (Lost when gone, within one round trip instead of a third of its lease).
    /// A fixed lease, which a renewal would lengthen, is Lost at once when `fixed_lost` (the
    /// message is the whole server's word), and otherwise left to its deadline (the word of one
    /// of several servers, as a Redlock master's). Returns how many it found.
    ///
    /// The message is also kept for a while ([`HEARD_FOR`]) for the ownerships registered after
    /// it came whose request was sent before: their acquire's answer may come after the message
    /// (see `register`: a hint for a renewed lease only).
    pub fn taken_where(
        &self,
        taken: impl Fn(&E) -> bool + Send + Sync + 'static,
        fixed_lost: bool,
    ) -> usize {
        let names: Names<E> = Arc::new(taken);
        let now = {
            // Stamped under the lock, so the messages stay in the order of their stamps.
            let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            if heard.len() == HEARD_MOST {
                heard.pop_front();
            }
            heard.push_back(Heard {
                at: now,
                names: names.clone(),
            });
            now
        };
        let mut found = 0;
        self.lock().retain(|_, e| {
            if !names(&e.entry) {
                return true;
            }
            found += 1;
            self.taken(e, now, fixed_lost)
        });
        if found > 0 {
            self.wake.notify_one();
        }
        found
    }

    /// Ownership `e` may have been taken on the server: a renewed one is renewed at `now`, a
    /// fixed one Lost when `fixed_lost`. Whether it is still watched.
    fn taken(&self, e: &mut Entry<E>, now: Instant, fixed_lost: bool) -> bool {
        if e.renew {
            e.next_due = now;
            e.early = Duration::ZERO;
            e.check_again = e.in_flight;
            return true;
        }
        if !fixed_lost {
            return true;
        }
        if e.state.mark_lost(LostReason::Deleted) {
            tracing::warn!(
                backend = self.backend,
                lock = &*e.name,
                entry = ?e.entry,
                "lockkit: lock force-unlocked"
            );
        }
        false
    }

    /// How many ownerships are watched.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The client is going away: nobody renews any more, and every guard watched is Lost.
    pub fn abandon_all(&self) {
        for (_, e) in self.lock().drain() {
            e.state.mark_lost(LostReason::Closed);
        }
    }

    /// Forgets what passed its deadline, takes what is due for renewal, and says when to look
    /// again.
    fn step(&self, now: Instant) -> (Vec<Due<E>>, Instant) {
        let mut due = Vec::new();
        let mut wake = now + IDLE_LOOK;
        let mut entries = self.lock();
        entries.retain(|_, e| {
            // The guard's deadline: it reads Lost from then on, whatever happens here.
            let Some(deadline) = e.state.clock().deadline() else {
                return true;
            };
            if now < deadline && e.state.get().is_live() {
                return true;
            }
            // A fixed lease's end is released on the server by the core (the guard's own
            // release, which hands the lock over).
            if e.renew && e.state.mark_lost(LostReason::LeaseExpired) {
                tracing::warn!(
                    backend = self.backend,
                    lock = &*e.name,
                    entry = ?e.entry,
                    "lockkit: lease deadline passed without renewal"
                );
            }
            false
        });
        for (id, e) in entries.iter_mut() {
            // Renew a little early so ownerships due at nearby times share one call.
            if e.renew && !e.in_flight && e.next_due <= now + e.early {
                e.in_flight = true;
                due.push(Due {
                    id: *id,
                    lease: e.lease,
                    entry: e.entry.clone(),
                });
            }
            let mut at = e.state.clock().deadline().unwrap_or(wake);
            if e.renew && !e.in_flight {
                at = at.min(e.next_due);
            }
            wake = wake.min(at);
        }
        *self.scheduled.lock().unwrap_or_else(|e| e.into_inner()) = Some(wake);
        (due, wake)
    }

    fn apply(&self, sent_at: Instant, batch: &[Due<E>], result: Option<Vec<Renewed>>) {
        let now = Instant::now();
        let mut entries = self.lock();
        for (i, due) in batch.iter().enumerate() {
            let Some(e) = entries.get_mut(&due.id) else {
                continue;
            };
            e.in_flight = false;
            match result.as_ref().map(|r| r.get(i).copied()) {
                Some(Some(Renewed::Yes)) => {
                    e.state.clock().renewed(sent_at, due.lease);
                    e.window = due.lease;
                    e.next_due = sent_at + due.lease / 3;
                    e.early = due.lease / 6;
                    if std::mem::take(&mut e.check_again) {
                        (e.next_due, e.early) = (now, Duration::ZERO);
                    }
                    e.state.mark_held();
                }
                None | Some(Some(Renewed::Unsure)) => {
                    // It may have been applied: the deadline stays (it is earlier), and the
                    // clock keeps the lease for whoever must outlast it (`server_bound`).
                    e.state.clock().maybe_renewed(sent_at, due.lease);
                    // The retry is sent after whatever asked for a check again.
                    e.check_again = false;
                    e.state.mark_suspect();
                    // Paced by the window the server set last (a hand-off's is shorter than
                    // the lease), and always early enough for another try before the deadline.
                    let mut retry =
                        (e.window / 10).clamp(Duration::from_millis(20), Duration::from_secs(1));
                    if let Some(deadline) = e.state.clock().deadline() {
                        retry = retry.min(deadline.saturating_duration_since(now) / 2);
                    }
                    e.next_due = now + retry;
                    e.early = Duration::ZERO;
                }
                // No answer for it (a short reply) is as good as gone.
                Some(Some(Renewed::Gone) | None) => {
                    e.state.mark_lost(LostReason::Deleted);
                    tracing::warn!(
                        backend = self.backend,
                        lock = &*e.name,
                        entry = ?e.entry,
                        "lockkit: lock gone or taken over at renewal"
                    );
                    entries.remove(&due.id);
                }
            }
        }
        drop(entries);
        self.wake.notify_one();
    }

    /// Splits due renewals into round trips of at most [`BATCH`] ownerships of one group.
    fn batches<R: Renew<E>>(renew: &R, due: Vec<Due<E>>) -> Vec<Vec<Due<E>>> {
        let mut groups: HashMap<R::Group, Vec<Due<E>>> = HashMap::new();
        for d in due {
            groups.entry(renew.group(&d.entry)).or_default().push(d);
        }
        groups
            .into_values()
            .flat_map(|g| g.chunks(BATCH).map(<[Due<E>]>::to_vec).collect::<Vec<_>>())
            .collect()
    }

    /// The watchdog task of one client: renews what is due over `renew`, each round trip
    /// bounded by the request timeout and a third of the shortest lease in it. Runs until
    /// aborted.
    pub async fn run<R: Renew<E>>(self: Arc<Self>, renew: R)
    where
        E: Sync,
    {
        let renew = Arc::new(renew);
        let mut renewals = JoinSet::new();
        loop {
            while renewals.try_join_next().is_some() {}
            let (due, wake) = self.step(Instant::now());
            for batch in Self::batches(&*renew, due) {
                let (wd, renew) = (self.clone(), renew.clone());
                let timeout = renew.request_timeout();
                let shortest = batch.iter().map(|d| d.lease).min().unwrap_or(timeout);
                let limit = timeout.min(shortest / 3).max(Duration::from_millis(10));
                renewals.spawn(async move {
                    let sent_at = Instant::now();
                    // The backend keeps to `limit`; one that does not is cut off at twice it.
                    let result = tokio::time::timeout(limit * 2, renew.renew(&batch, limit))
                        .await
                        .ok()
                        .flatten();
                    let renewed = result.as_ref().is_some_and(|r| r.contains(&Renewed::Yes));
                    crate::telemetry::renewal(wd.backend, renewed, sent_at.elapsed());
                    wd.apply(sent_at, &batch, result);
                });
            }
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = self.wake.notified() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::LeaseClock;
    use crate::state::LockState;
    use std::sync::Mutex as StdMutex;

    /// Answers each ownership as `answer` said when the call came, `delay` later, and records
    /// each batch.
    struct Fake {
        answer: Arc<StdMutex<Option<Renewed>>>,
        calls: Arc<StdMutex<Vec<Vec<u8>>>>,
        delay: Arc<StdMutex<Duration>>,
    }

    #[async_trait]
    impl Renew<u8> for Fake {
        type Group = u8;
        fn group(&self, e: &u8) -> u8 {
            *e
        }
        async fn renew(&self, batch: &[Due<u8>], _: Duration) -> Option<Vec<Renewed>> {
            self.calls
                .lock()
                .unwrap()
                .push(batch.iter().map(|d| d.entry).collect());
            let answer = *self.answer.lock().unwrap();
            let delay = *self.delay.lock().unwrap();
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Some(vec![answer?; batch.len()])
        }
        fn request_timeout(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    struct Run {
        wd: Arc<Watchdog<u8>>,
        answer: Arc<StdMutex<Option<Renewed>>>,
        calls: Arc<StdMutex<Vec<Vec<u8>>>>,
        delay: Arc<StdMutex<Duration>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Run {
        fn start() -> Run {
            let wd = Arc::new(Watchdog::new("test"));
            let answer = Arc::new(StdMutex::new(Some(Renewed::Yes)));
            let calls = Arc::new(StdMutex::new(Vec::new()));
            let delay = Arc::new(StdMutex::new(Duration::ZERO));
            let fake = Fake {
                answer: answer.clone(),
                calls: calls.clone(),
                delay: delay.clone(),
            };
            let task = tokio::spawn(wd.clone().run(fake));
            Run {
                wd,
                answer,
                calls,
                delay,
                task,
            }
        }

        fn watch(&self, group: u8, lease: Duration, renew: bool) -> (u64, StateCell) {
            self.watch_sent(group, lease, renew, Instant::now())
        }

        /// Watches an ownership whose request was sent at `sent`.
        fn watch_sent(
            &self,
            group: u8,
            lease: Duration,
            renew: bool,
            sent: Instant,
        ) -> (u64, StateCell) {
            let state = StateCell::new(LeaseClock::starting(sent, lease));
            let w = Watched {
                name: "lock".into(),
                sent_at: sent,
                expiry: lease,
                entry: group,
            };
            let lease = match renew {
                true => Lease::Watchdog(lease),
                false => Lease::Fixed(lease),
            };
            (self.wd.register(w, lease, state.clone()), state)
        }

        fn calls(&self) -> Vec<Vec<u8>> {
            std::mem::take(&mut *self.calls.lock().unwrap())
        }
    }

    impl Drop for Run {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    const LEASE: Duration = Duration::from_secs(3);

    #[tokio::test(start_paused = true)]
    async fn renews_every_third_in_batches_per_group() {
        let run = Run::start();
        let states: Vec<_> = (0..250).map(|_| run.watch(0, LEASE, true).1).collect();
        let (_, other) = run.watch(1, LEASE, true);
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert!(run.calls().is_empty(), "nothing is due before a third");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut sizes: Vec<_> = run.calls().iter().map(|c| (c[0], c.len())).collect();
        sizes.sort();
        assert_eq!(sizes, [(0, 50), (0, 100), (0, 100), (1, 1)]);
        for s in states.iter().chain([&other]) {
            assert_eq!(s.get(), LockState::Held);
            let left = s.clock().remaining().unwrap();
            assert!(left > Duration::from_millis(2500), "renewed: {left:?}");
        }
        // Kept alive well past the first lease.
        tokio::time::sleep(LEASE * 3).await;
        assert_eq!(other.get(), LockState::Held);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_is_suspect_then_held_again() {
        let run = Run::start();
        let (_, state) = run.watch(0, LEASE, true);
        *run.answer.lock().unwrap() = None;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(state.get(), LockState::Suspect);
        assert_eq!(run.calls().len(), 1);
        tokio::time::sleep(Duration::from_millis(700)).await;
        // Retried every tenth of the lease: soon, and not at once (which, with a server that
        // refuses at once, was a tight loop).
        let retries = run.calls().len();
        assert!((2..=3).contains(&retries), "{retries} retries in 700 ms");
        *run.answer.lock().unwrap() = Some(Renewed::Yes);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(state.get(), LockState::Held);
    }

    /// A hand-off's short first window (3 s of a 30 s lease): a failed first renewal is tried
    /// again before the deadline, not a tenth of the lease later (past it).
    #[tokio::test(start_paused = true)]
    async fn a_handoff_whose_first_renewal_fails_is_retried_in_its_window() {
        let run = Run::start();
        let now = Instant::now();
        let (lease, window) = (Duration::from_secs(30), Duration::from_secs(3));
        let state = StateCell::new(LeaseClock::starting(now, window));
        let w = Watched {
            name: "lock".into(),
            sent_at: now,
            expiry: window,
            entry: 0,
        };
        run.wd.register(w, Lease::Watchdog(lease), state.clone());
        *run.answer.lock().unwrap() = None;
        tokio::time::sleep(Duration::from_millis(2100)).await;
        assert_eq!(
            run.calls().len(),
            1,
            "the first renewal, two thirds into the window"
        );
        assert_eq!(state.get(), LockState::Suspect);
        *run.answer.lock().unwrap() = Some(Renewed::Yes);
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(
            state.get(),
            LockState::Held,
            "retried and renewed before the deadline"
        );
        assert!(state.clock().remaining().unwrap() > Duration::from_secs(25));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unsure_renewal_is_suspect_and_a_gone_one_lost() {
        let run = Run::start();
        let (_, state) = run.watch(0, LEASE, true);
        *run.answer.lock().unwrap() = Some(Renewed::Unsure);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(state.get(), LockState::Suspect);
        *run.answer.lock().unwrap() = Some(Renewed::Gone);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(state.get(), LockState::Lost);
        assert_eq!(state.reason(), Some(LostReason::Deleted));
        assert_eq!(run.wd.len(), 0, "a lost ownership is no longer watched");
    }

    #[tokio::test(start_paused = true)]
    async fn no_renewal_by_the_deadline_is_lost_and_fixed_leases_are_not_renewed() {
        let run = Run::start();
        let (_, fixed) = run.watch(0, LEASE, false);
        *run.answer.lock().unwrap() = None;
        let (_, renewed) = run.watch(1, LEASE, true);
        tokio::time::sleep(LEASE).await;
        assert_eq!(renewed.get(), LockState::Lost);
        assert_eq!(renewed.reason(), Some(LostReason::LeaseExpired));
        assert!(
            run.calls().iter().all(|c| c == &[1]),
            "a fixed lease is never renewed"
        );
        assert!(!fixed.get().is_live(), "a fixed lease ends at its deadline");
        assert_eq!(run.wd.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn extend_unregister_and_abandon() {
        let run = Run::start();
        let (id, fixed) = run.watch(0, LEASE, false);
        let now = Instant::now();
        run.wd.extended(id, now, LEASE * 2);
        tokio::time::sleep(LEASE + Duration::from_millis(500)).await;
        assert!(fixed.get().is_live(), "extended to twice the lease");
        let (gone, _) = run.watch(0, LEASE, true);
        run.wd.unregister(gone);
        assert_eq!(run.wd.len(), 1);
        run.wd.abandon_all();
        assert_eq!(fixed.get(), LockState::Lost);
        assert_eq!(fixed.reason(), Some(LostReason::Closed));
        assert!(run.wd.is_empty());
    }

    /// What a force-unlock names is renewed at once, and Lost when the server says it is gone
    /// (a fixed lease, which a renewal would lengthen, Lost without asking); the rest wait for
    /// their time.
    #[tokio::test(start_paused = true)]
    async fn ownerships_taken_on_the_server_are_checked_at_once() {
        let run = Run::start();
        let (_, taken) = run.watch(1, LEASE, true);
        let (_, fixed) = run.watch(1, LEASE, false);
        let (_, kept) = run.watch(2, LEASE, true);
        *run.answer.lock().unwrap() = Some(Renewed::Gone);
        assert_eq!(run.wd.taken_where(|e| *e == 1, true), 2);
        assert_eq!(fixed.get(), LockState::Lost);
        assert_eq!(fixed.reason(), Some(LostReason::Deleted));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(run.calls(), vec![vec![1]], "only the taken one, at once");
        assert_eq!(taken.get(), LockState::Lost);
        assert_eq!(taken.reason(), Some(LostReason::Deleted));
        assert_eq!(kept.get(), LockState::Held);
        assert_eq!(run.wd.len(), 1);
        assert_eq!(run.wd.taken_where(|e| *e == 1, true), 0);
    }

    /// A message that came after the ownership was taken again (the same owner, acquired anew)
    /// costs one renewal, and the guard stays Held; one server's word (`fixed_lost` false)
    /// leaves a fixed lease to its deadline.
    #[tokio::test(start_paused = true)]
    async fn a_late_taken_message_costs_a_renewal_not_the_lock() {
        let run = Run::start();
        let (_, state) = run.watch(1, LEASE, true);
        let (_, fixed) = run.watch(1, LEASE, false);
        assert_eq!(run.wd.taken_where(|e| *e == 1, false), 2);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(run.calls(), vec![vec![1]]);
        assert_eq!(state.get(), LockState::Held);
        assert_eq!(fixed.get(), LockState::Held);
        assert_eq!(run.wd.len(), 2);
    }

    /// Taken while a renewal was in flight (its yes may predate the taking): renewed again as
    /// soon as that one answers, not a third of the lease later.
    #[tokio::test(start_paused = true)]
    async fn taken_during_a_renewal_is_checked_again_after_it() {
        let run = Run::start();
        *run.delay.lock().unwrap() = Duration::from_millis(300);
        let (_, state) = run.watch(1, LEASE, true);
        // The first renewal is sent a third into the lease (1 s).
        tokio::time::sleep(Duration::from_millis(1050)).await;
        assert_eq!(run.calls().len(), 1, "a renewal in flight");
        *run.answer.lock().unwrap() = Some(Renewed::Gone);
        assert_eq!(run.wd.taken_where(|e| *e == 1, true), 1);
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(
            run.calls().len(),
            1,
            "renewed again once the first answered"
        );
        assert_eq!(state.get(), LockState::Lost);
    }

    /// A message that beats the acquire's answer (it came after the request was sent, before
    /// the ownership was watched) is not lost: a renewed ownership is checked as it is watched.
    /// A fixed lease, which only the server's answer could tell from one the same acquire held
    /// a moment earlier, is left to its deadline.
    #[tokio::test(start_paused = true)]
    async fn a_taken_message_before_the_ownership_is_watched_counts() {
        let run = Run::start();
        let sent = Instant::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(run.wd.taken_where(|e| *e == 1, true), 0);
        *run.answer.lock().unwrap() = Some(Renewed::Gone);
        let (_, state) = run.watch_sent(1, LEASE, true, sent);
        let (_, fixed) = run.watch_sent(1, LEASE, false, sent);
        let (_, other) = run.watch_sent(2, LEASE, true, sent);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(run.calls(), vec![vec![1]], "checked at once");
        assert_eq!(state.get(), LockState::Lost);
        assert_eq!(fixed.get(), LockState::Held);
        assert_eq!(other.get(), LockState::Held);
        assert_eq!(run.wd.len(), 2);
    }

    /// A message heard before the request was sent is about an earlier ownership: it costs the
    /// new one nothing. Messages are kept for a while only.
    #[tokio::test(start_paused = true)]
    async fn a_taken_message_is_not_about_later_requests() {
        let run = Run::start();
        assert_eq!(run.wd.taken_where(|e| *e == 1, true), 0);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let (id, state) = run.watch(1, LEASE, true);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(run.calls(), Vec::<Vec<u8>>::new());
        assert_eq!(state.get(), LockState::Held);
        run.wd.unregister(id);
        // Sent before the message, watched after it was forgotten (a lease long enough that
        // its first renewal is not due yet).
        let sent = Instant::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        run.wd.taken_where(|e| *e == 3, true);
        tokio::time::sleep(HEARD_FOR + Duration::from_millis(1)).await;
        let (_, late) = run.watch_sent(3, HEARD_FOR * 6, true, sent);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            run.calls(),
            Vec::<Vec<u8>>::new(),
            "forgotten after HEARD_FOR"
        );
        assert_eq!(late.get(), LockState::Held);
        assert!(run.wd.heard.lock().unwrap().is_empty());
    }
}
