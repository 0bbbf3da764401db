//! What `lockkit top` shows, apart from drawing it: snapshots of the locks under a prefix, and
//! what can be told from successive snapshots (how long a holder has been seen, acquisitions
//! and losses per second), sorting and filtering.
//!
//! Everything is seen from outside, by polling: a lock taken and released between two refreshes
//! is not seen, and a holder that disappears is counted as lost only when its last seen lease
//! had run out by then (an expiry, not a release). Backends that tell no remaining lease
//! (ZooKeeper) count no losses.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use lockkit::{FencingToken, LockEntry, LockInfo, Locks};
use serde::Serialize;

/// How far back acquisitions and losses are counted for their rates.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// One lock as read by one refresh.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Lock {
    #[serde(flatten)]
    pub(crate) entry: LockEntry,
    #[serde(flatten)]
    pub(crate) info: LockInfo,
}

/// What one refresh read.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) locks: Vec<Lock>,
    /// How many locks the listing found (more than were inspected when `--limit` cut it).
    pub(crate) listed: usize,
}

/// Reads the locks under `prefix` (the first `limit` of them by name) with their holders and
/// waiters. A lock freed between the listing and its inspection is left out, and so is one that
/// cannot be inspected for a reason of its own (a key of another type under the prefix); an error
/// that says the backend is unreachable ends the refresh.
pub(crate) async fn snapshot(
    locks: &Locks,
    prefix: &str,
    limit: usize,
) -> lockkit::Result<Snapshot> {
    let listed = locks.list(prefix).await?;
    let mut out = Vec::new();
    for entry in listed.iter().take(limit) {
        let info = match locks.inspect(&entry.name, entry.primitive).await {
            Ok(info) => info,
            Err(e) if e.is_retryable() || e.kind() == lockkit::ErrorKind::Closed => return Err(e),
            Err(_) => continue,
        };
        if info.holders.is_empty() && info.waiters.is_empty() {
            continue;
        }
        out.push(Lock {
            entry: entry.clone(),
            info,
        });
    }
    Ok(Snapshot {
        locks: out,
        listed: listed.len(),
    })
}

/// One line of the table.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    pub(crate) entry: LockEntry,
    pub(crate) info: LockInfo,
    /// How long the longest-seen current holder has been seen holding; `true` when it already
    /// held at the first refresh (so it has held at least that long).
    pub(crate) held_for: Option<(Duration, bool)>,
    pub(crate) acquired_per_s: f64,
    pub(crate) lost_per_s: f64,
}

/// The sort orders, cycled by `s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sort {
    Name,
    Waiters,
    HeldFor,
    Acquisitions,
}

impl Sort {
    pub(crate) fn next(self) -> Sort {
        match self {
            Sort::Name => Sort::Waiters,
            Sort::Waiters => Sort::HeldFor,
            Sort::HeldFor => Sort::Acquisitions,
            Sort::Acquisitions => Sort::Name,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::Waiters => "waiters",
            Sort::HeldFor => "held for",
            Sort::Acquisitions => "acq/s",
        }
    }
}

type HolderKey = (LockEntry, String, Option<FencingToken>);

/// What successive snapshots tell.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    first: Option<Instant>,
    last: Option<(Instant, Vec<Lock>)>,
    seen_since: HashMap<HolderKey, Instant>,
    acquired: HashMap<LockEntry, VecDeque<Instant>>,
    lost: HashMap<LockEntry, VecDeque<Instant>>,
}

fn holder_keys(locks: &[Lock]) -> HashMap<HolderKey, Option<Duration>> {
    let mut out = HashMap::new();
    for l in locks {
        for h in &l.info.holders {
            out.insert(
                (l.entry.clone(), h.owner.clone(), h.token),
                h.remaining_lease,
            );
        }
    }
    out
}

impl Tracker {
    /// Takes the snapshot read at `now` and returns its rows (unsorted, unfiltered).
    pub(crate) fn update(&mut self, now: Instant, locks: Vec<Lock>) -> Vec<Row> {
        let first = *self.first.get_or_insert(now);
        let current = holder_keys(&locks);
        if let Some((then, prev)) = &self.last {
            let dt = now.saturating_duration_since(*then);
            for (key, lease) in holder_keys(prev) {
                if current.contains_key(&key) {
                    continue;
                }
                // Gone: an expiry when its lease had run out by now (with a little slack for
                // the time the refresh took), else a release.
                if lease.is_some_and(|l| l <= dt + Duration::from_millis(200)) {
                    self.lost.entry(key.0.clone()).or_default().push_back(now);
                }
            }
            for key in current.keys() {
                if !self.seen_since.contains_key(key) {
                    self.acquired
                        .entry(key.0.clone())
                        .or_default()
                        .push_back(now);
                }
            }
        }
        self.seen_since.retain(|k, _| current.contains_key(k));
        for key in current.keys() {
            self.seen_since.entry(key.clone()).or_insert(now);
        }
        for events in self.acquired.values_mut().chain(self.lost.values_mut()) {
            while events
                .front()
                .is_some_and(|t| now.saturating_duration_since(*t) > RATE_WINDOW)
            {
                events.pop_front();
            }
        }
        self.acquired.retain(|_, v| !v.is_empty());
        self.lost.retain(|_, v| !v.is_empty());
        let span = now
            .saturating_duration_since(first)
            .clamp(Duration::from_secs(1), RATE_WINDOW);
        let rate = |m: &HashMap<LockEntry, VecDeque<Instant>>, e: &LockEntry| {
            m.get(e)
                .map_or(0.0, |v| v.len() as f64 / span.as_secs_f64())
        };
        let rows = locks
            .iter()
            .map(|l| {
                let held_for = l
                    .info
                    .holders
                    .iter()
                    .filter_map(|h| {
                        self.seen_since
                            .get(&(l.entry.clone(), h.owner.clone(), h.token))
                    })
                    .min()
                    .map(|since| (now.saturating_duration_since(*since), *since == first));
                Row {
                    entry: l.entry.clone(),
                    info: l.info.clone(),
                    held_for,
                    acquired_per_s: rate(&self.acquired, &l.entry),
                    lost_per_s: rate(&self.lost, &l.entry),
                }
            })
            .collect();
        self.last = Some((now, locks));
        rows
    }
}

/// Keeps the rows whose name contains `filter`, sorted by `sort` (name as the tie-break).
pub(crate) fn arrange(mut rows: Vec<Row>, sort: Sort, filter: &str) -> Vec<Row> {
    rows.retain(|r| r.entry.name.contains(filter));
    rows.sort_by(|a, b| {
        let by = match sort {
            Sort::Name => std::cmp::Ordering::Equal,
            Sort::Waiters => b.info.waiters.len().cmp(&a.info.waiters.len()),
            Sort::HeldFor => b.held_for.map(|h| h.0).cmp(&a.held_for.map(|h| h.0)),
            Sort::Acquisitions => b.acquired_per_s.total_cmp(&a.acquired_per_s),
        };
        by.then_with(|| a.entry.cmp(&b.entry))
    });
    rows
}

/// The table's header.
pub(crate) const HEADER: [&str; COLUMNS] = [
    "KIND",
    "NAME",
    "HOLDERS",
    "FIRST HOLDER",
    "MODE",
    "TOKEN",
    "LEASE LEFT",
    "HELD FOR",
    "WAITERS",
    "ACQ/S",
    "LOST/S",
];

/// The number of columns.
pub(crate) const COLUMNS: usize = 11;

/// The cells of one row, as text.
pub(crate) fn cells(r: &Row) -> [String; COLUMNS] {
    let first = r.info.holders.first();
    [
        r.entry.primitive.as_str().to_string(),
        r.entry.name.clone(),
        r.info.holders.len().to_string(),
        first.map_or("-".into(), |h| h.owner.clone()),
        first.map_or("-".into(), |h| h.mode.to_string()),
        first
            .and_then(|h| h.token)
            .map_or("-".into(), |t| t.to_string()),
        first
            .and_then(|h| h.remaining_lease)
            .map_or("-".into(), short),
        match r.held_for {
            // Seen once, at the first refresh: nothing known yet.
            None | Some((Duration::ZERO, true)) => "-".into(),
            Some((d, at_least)) => format!("{}{}", if at_least { "≥" } else { "" }, short(d)),
        },
        r.info.waiters.len().to_string(),
        format!("{:.1}", r.acquired_per_s),
        format!("{:.1}", r.lost_per_s),
    ]
}

/// `1.2s`, `45s`, `3m05s`, `2h01m`.
pub(crate) fn short(d: Duration) -> String {
    let s = d.as_secs();
    if s < 10 {
        format!("{:.1}s", d.as_secs_f64())
    } else if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    }
}

/// The names of the locks in `rows`, for the tests.
#[cfg(test)]
fn names(rows: &[Row]) -> Vec<&str> {
    rows.iter().map(|r| r.entry.name.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockkit::{HoldMode, HolderInfo, Primitive, WaiterInfo};

    fn lock(name: &str, holders: &[(&str, u64, Option<u64>)], waiters: usize) -> Lock {
        Lock {
            entry: LockEntry::new(name, Primitive::Mutex),
            info: LockInfo::new(
                holders
                    .iter()
                    .map(|(o, t, lease)| {
                        let h =
                            HolderInfo::new(*o, HoldMode::Exclusive).with_token(FencingToken(*t));
                        match lease {
                            Some(ms) => h.with_remaining_lease(Duration::from_millis(*ms)),
                            None => h,
                        }
                    })
                    .collect(),
                (0..waiters)
                    .map(|i| WaiterInfo::new(format!("w{i}"), HoldMode::Exclusive))
                    .collect(),
            ),
        }
    }

    #[test]
    fn successive_snapshots_give_hold_times_acquisitions_and_losses() {
        let mut t = Tracker::default();
        let t0 = Instant::now();
        let rows = t.update(
            t0,
            vec![
                lock("a", &[("x", 1, Some(30_000))], 0),
                lock("b", &[("y", 5, Some(300))], 1),
            ],
        );
        assert_eq!(rows[0].held_for, Some((Duration::ZERO, true)));
        assert_eq!(
            rows[0].acquired_per_s, 0.0,
            "the first refresh sees no acquisitions"
        );
        // One second on: a released and retaken `a` (new token), an expired `b` taken by its waiter.
        let t1 = t0 + Duration::from_secs(1);
        let rows = t.update(
            t1,
            vec![
                lock("a", &[("x", 2, Some(30_000))], 0),
                lock("b", &[("z", 6, Some(30_000))], 0),
            ],
        );
        let a = &rows[0];
        assert_eq!(a.held_for, Some((Duration::ZERO, false)));
        assert_eq!(
            (a.acquired_per_s, a.lost_per_s),
            (1.0, 0.0),
            "a release is not a loss"
        );
        let b = &rows[1];
        assert_eq!(
            (b.acquired_per_s, b.lost_per_s),
            (1.0, 1.0),
            "b's holder expired"
        );
        let t2 = t1 + Duration::from_secs(2);
        let rows = t.update(t2, vec![lock("a", &[("x", 2, Some(30_000))], 0)]);
        assert_eq!(rows[0].held_for, Some((Duration::from_secs(2), false)));
        assert_eq!(rows.len(), 1);
    }

    #[test]
    fn rows_filter_and_sort() {
        let mut t = Tracker::default();
        let rows = t.update(
            Instant::now(),
            vec![
                lock("jobs/b", &[("x", 1, None)], 3),
                lock("jobs/a", &[("y", 2, None)], 1),
                lock("other", &[], 2),
            ],
        );
        assert_eq!(
            names(&arrange(rows.clone(), Sort::Name, "")),
            ["jobs/a", "jobs/b", "other"]
        );
        assert_eq!(
            names(&arrange(rows.clone(), Sort::Waiters, "")),
            ["jobs/b", "other", "jobs/a"]
        );
        assert_eq!(
            names(&arrange(rows, Sort::Name, "jobs")),
            ["jobs/a", "jobs/b"]
        );
        assert_eq!(Sort::Name.next().next().next().next(), Sort::Name);
    }

    #[test]
    fn cells_read_as_a_table() {
        let mut t = Tracker::default();
        let rows = t.update(
            Instant::now(),
            vec![lock("a", &[("x", 7, Some(1500)), ("y", 8, None)], 2)],
        );
        let c = cells(&rows[0]);
        assert_eq!(
            c[..7],
            ["mutex", "a", "2", "x", "exclusive", "7", "1.5s"].map(String::from)
        );
        assert_eq!(c[8], "2");
        assert_eq!(short(Duration::from_secs(185)), "3m05s");
    }
}
