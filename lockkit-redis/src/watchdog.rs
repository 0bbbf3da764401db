//! The watchdog: one background task per client that renews every watchdog-leased lock every
//! third of its lease (up to 100 locks per script call) and turns guards Suspect or Lost. Fixed
//! leases are watched only for their deadline (the core releases them then).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lockkit_core::spi::StateCell;
use lockkit_core::LostReason;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use redis::cluster_routing::Slot;

use crate::conn::Conn;
use crate::replicas::Replicas;
use crate::script_set::Scripts;

/// The longest the watchdog task sleeps without being woken.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// A renewal result that the primary took but the replicas did not acknowledge: like a failed
/// renewal, it makes the guard Suspect and is tried again soon.
const UNSURE: i64 = -1;

/// Locks per renewal script call.
pub(crate) const BATCH: usize = 100;

/// One lock due for renewal: watchdog id, lock key, owner field, lease.
type Due = (u64, String, String, Duration);

/// How a watched ownership is renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenewKind {
    /// A field of a lock hash whose expiry is the lease (mutex, write lock).
    Hash,
    /// A member of a sorted set scored by its deadline (read lock, semaphore permits).
    Set,
}

#[derive(Debug)]
struct Entry {
    kind: RenewKind,
    /// The lock's name, for events.
    name: Arc<str>,
    key: String,
    owner: String,
    lease: Duration,
    renew: bool,
    /// The expiry the server set last: the lease, or the shorter one of a hand-off until the
    /// first renewal.
    window: Duration,
    next_due: Instant,
    in_flight: bool,
    state: StateCell,
}

/// What the watchdog watches, shared by the task and the guards.
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    entries: Mutex<HashMap<u64, Entry>>,
    next_id: std::sync::atomic::AtomicU64,
    wake: Notify,
    /// When the task will look again on its own (`None`: it has not looked yet).
    scheduled: Mutex<Option<Instant>>,
}

/// A watched ownership, as registered by an acquire.
pub(crate) struct Watched {
    pub(crate) kind: RenewKind,
    /// The lock's name, for events.
    pub(crate) name: Arc<str>,
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) lease: Duration,
    pub(crate) renew: bool,
    /// Taken before the request that set the lock's expiry was sent (for a hand-off: before the
    /// waiter's last attempt that found the lock busy; the hand-off came after it).
    pub(crate) sent_at: Instant,
    /// The expiry that request set: the lease, or for a hand-off the shorter grant expiry.
    pub(crate) expiry: Duration,
    pub(crate) state: StateCell,
}

impl Watchdog {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts watching an ownership; returns its id.
    pub(crate) fn register(&self, w: Watched) -> u64 {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Renew once a third of the expiry has passed; a hand-off's short expiry, whose first
        // third may be over by the time the waiter takes it up, once two thirds have passed.
        let next_due = if w.expiry < w.lease {
            w.sent_at + w.expiry * 2 / 3
        } else {
            w.sent_at + w.expiry / 3
        };
        let deadline = w.state.clock().deadline().unwrap_or(w.sent_at + w.expiry);
        let first_look = if w.renew { next_due } else { deadline };
        let entry = Entry {
            window: w.expiry,
            next_due,
            kind: w.kind,
            name: w.name,
            key: w.key,
            owner: w.owner,
            lease: w.lease,
            renew: w.renew,
            in_flight: false,
            state: w.state,
        };
        self.lock().insert(id, entry);
        // Wake the task only if it would otherwise look too late: a short acquire-release cycle
        // then costs no task switch.
        let scheduled = *self.scheduled.lock().unwrap_or_else(|e| e.into_inner());
        if scheduled.is_none_or(|at| first_look < at) {
            self.wake.notify_one();
        }
        id
    }

    /// Stops watching (the ownership is being released).
    pub(crate) fn unregister(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// A fixed lease was extended to `lease` by a command sent at `sent_at`: the guard's
    /// deadline moves there, shorter or longer, and the task looks again by then.
    pub(crate) fn extended(&self, id: u64, sent_at: Instant, lease: Duration) {
        if let Some(e) = self.lock().get_mut(&id) {
            e.state.clock().renewed(sent_at, lease);
            e.lease = lease;
            e.window = lease;
        }
        self.wake.notify_one();
    }

    /// The ownership is gone on the server.
    pub(crate) fn lost(&self, id: u64) {
        if let Some(e) = self.lock().remove(&id) {
            e.state.mark_lost(LostReason::Deleted);
        }
    }

    /// How many ownerships are watched.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// The client is going away: nobody renews any more.
    pub(crate) fn abandon_all(&self) {
        for (_, e) in self.lock().drain() {
            e.state.mark_lost(LostReason::Closed);
        }
    }

    /// Forgets what passed its deadline, takes what is due for renewal, and says when to look
    /// again.
    fn step(&self, now: Instant) -> (Vec<(RenewKind, Due)>, Instant) {
        let mut due = Vec::new();
        // An idle task still looks again after IDLE_LOOK, so registering a lock that is not due
        // before then needs no wake-up: a short acquire-release cycle costs no task switch.
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
            // The guard reads Lost from its deadline on; a fixed lease's end is released on the
            // server by the core (the guard's own release, which hands the lock over).
            if e.renew && e.state.mark_lost(LostReason::LeaseExpired) {
                tracing::warn!(
                    backend = "redis",
                    lock = &*e.name,
                    key = %e.key,
                    "lockkit: lease deadline passed without renewal"
                );
            }
            false
        });
        for (id, e) in entries.iter_mut() {
            // Renew a little early so locks due at nearby times share one call.
            if e.renew && !e.in_flight && e.next_due <= now + e.window / 6 {
                e.in_flight = true;
                due.push((e.kind, (*id, e.key.clone(), e.owner.clone(), e.lease)));
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

    fn apply(&self, sent_at: Instant, batch: &[Due], result: Option<Vec<i64>>) {
        let now = Instant::now();
        let mut entries = self.lock();
        for (i, (id, _, _, lease)) in batch.iter().enumerate() {
            let Some(e) = entries.get_mut(id) else {
                continue;
            };
            e.in_flight = false;
            match result.as_ref().map(|r| r.get(i).copied().unwrap_or(0)) {
                Some(1) => {
                    e.state.clock().renewed(sent_at, *lease);
                    e.window = *lease;
                    e.next_due = sent_at + *lease / 3;
                    e.state.mark_held();
                }
                // Renewed on the primary, not known on the replicas: as a failed renewal.
                None | Some(UNSURE) => {
                    e.state.mark_suspect();
                    let retry =
                        (*lease / 10).clamp(Duration::from_millis(20), Duration::from_secs(1));
                    e.next_due = now + retry;
                }
                Some(_) => {
                    e.state.mark_lost(LostReason::Deleted);
                    tracing::warn!(
                        backend = "redis",
                        lock = &*e.name,
                        key = %e.key,
                        "lockkit: lock gone or taken over at renewal"
                    );
                    entries.remove(id);
                }
            }
        }
        drop(entries);
        self.wake.notify_one();
    }
}

/// Splits due renewals into script calls of at most [`BATCH`] locks. In a cluster every call
/// must touch one slot, so locks are first grouped by their key's slot.
fn batches(group: Vec<Due>, cluster: bool) -> Vec<Vec<Due>> {
    if !cluster {
        return group.chunks(BATCH).map(<[Due]>::to_vec).collect();
    }
    let mut by_slot: HashMap<Slot, Vec<Due>> = HashMap::new();
    for due in group {
        by_slot.entry(Slot::for_key(&due.1)).or_default().push(due);
    }
    by_slot
        .into_values()
        .flat_map(|g| g.chunks(BATCH).map(<[Due]>::to_vec).collect::<Vec<_>>())
        .collect()
}

/// The watchdog task of one client (`cluster`: renewals are batched per slot). Runs until
/// aborted.
pub(crate) async fn run(
    wd: Arc<Watchdog>,
    conn: Conn,
    scripts: Arc<Scripts>,
    replicas: Arc<Replicas>,
    command_timeout: Duration,
    cluster: bool,
) {
    let mut renewals = JoinSet::new();
    loop {
        while renewals.try_join_next().is_some() {}
        let (due, wake) = wd.step(Instant::now());
        let (hashes, sets): (Vec<_>, Vec<_>) =
            due.into_iter().partition(|(k, _)| *k == RenewKind::Hash);
        let groups = [(RenewKind::Hash, hashes), (RenewKind::Set, sets)];
        for (kind, group) in groups {
            let group: Vec<Due> = group.into_iter().map(|(_, d)| d).collect();
            for chunk in batches(group, cluster) {
                let (wd, mut conn, scripts) = (wd.clone(), conn.clone(), scripts.clone());
                let replicas = replicas.clone();
                let min_lease = chunk.iter().map(|c| c.3).min().unwrap_or(command_timeout);
                let limit = command_timeout
                    .min(min_lease / 3)
                    .max(Duration::from_millis(10));
                renewals.spawn(async move {
                    let mut call = match kind {
                        RenewKind::Hash => scripts.renew.prepare_invoke(),
                        RenewKind::Set => scripts.renew_set.prepare_invoke(),
                    };
                    for (_, key, owner, lease) in &chunk {
                        call.key(key).arg(owner).arg(lease.as_millis() as u64);
                    }
                    let sent_at = Instant::now();
                    let epoch = replicas.ticket(&chunk[0].1);
                    let result =
                        tokio::time::timeout(limit, call.invoke_async::<Vec<i64>>(&mut conn)).await;
                    let result = match result {
                        Ok(Ok(r)) => Some(r),
                        Ok(Err(e)) => {
                            tracing::debug!(backend = "redis", error = %e, "lockkit: renewal failed");
                            None
                        }
                        Err(_) => None,
                    };
                    // A renewal counts once the replicas have it (a failover to a replica that
                    // missed it would end the lease early), within the renewal's own bound; a
                    // lock found gone is Lost at once either way.
                    let result = match result {
                        Some(r) if r.contains(&1) => {
                            let left = limit.saturating_sub(sent_at.elapsed());
                            let kept = tokio::time::timeout(left, replicas.kept("renewal", epoch));
                            match kept.await {
                                Ok(Ok(())) => Some(r),
                                _ => {
                                    tracing::debug!(
                                        backend = "redis",
                                        "lockkit: a renewal did not reach the replicas"
                                    );
                                    Some(
                                        r.into_iter()
                                            .map(|v| if v == 1 { UNSURE } else { v })
                                            .collect(),
                                    )
                                }
                            }
                        }
                        other => other,
                    };
                    let renewed = result.as_ref().is_some_and(|r| r.contains(&1));
                    lockkit_core::telemetry::renewal("redis", renewed, sent_at.elapsed());
                    wd.apply(sent_at, &chunk, result);
                });
            }
        }
        let sleep = tokio::time::sleep_until(wake);
        tokio::select! {
            _ = sleep => {}
            _ = wd.wake.notified() => {}
        }
    }
}
