//! Blocked hand-offs: a holder let go of the lock, and nobody got it for longer than a liveness
//! bound although the workers were waiting and no fault was in effect.
//!
//! A **free gap** runs from the moment the lock was let go (the holder's release returned or its
//! `lost()` resolved, whichever came first, and no other hold was still going on) to the next
//! grant to anyone, or to the end of the run if none came. Workers loop on acquire with no pause
//! longer than 200 ms, so during a free gap every live worker that no fault stopped is waiting.
//!
//! A **fault window** runs from a fault's start to its end plus one lease plus one command
//! timeout: a lease granted before the fault may still run for one lease after it, and a request
//! sent during the fault may take one command timeout to fail before its retry.
//!
//! A free gap is a **blocked hand-off** when its longest stretch outside every fault window is
//! longer than `lease + wait budget + 1 s`. That bound is the worst healthy case: a release that
//! never reached the server leaves the lock to its lease (at most one lease), and a waiter that
//! missed its wake-up tries again when its wait budget runs out (at most one wait budget); the
//! second covers round trips and scheduling on a loaded machine. Only the stretch outside the
//! fault windows counts, so a gap that began during a fault still counts when the lock stays
//! stuck once the fault's effects are over (an entry left behind by an acquire that timed out).

use std::collections::HashMap;

use serde::Serialize;

use crate::clock::Micros;
use crate::proto::{FaultRecord, HoldRecord, RunInfo};

/// One blocked hand-off.
#[derive(Clone, Debug, Serialize)]
pub struct BlockedHandoff {
    /// The hold that let go last before the gap: (worker, token).
    pub after: (u32, u64),
    /// When the lock was let go.
    pub free_at: Micros,
    /// The next grant to anyone (`None`: none before the run's end).
    pub next_grant: Option<Micros>,
    /// The gap's longest stretch outside every fault window, in milliseconds.
    pub blocked_ms: f64,
}

/// The free gaps of a run, checked against the bound.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Handoffs {
    /// The bound: lease + wait budget + 1 s, in milliseconds.
    pub bound_ms: f64,
    /// The longest stretch outside the fault windows of any free gap, in milliseconds.
    pub longest_free_ms: Option<f64>,
    /// The gaps whose stretch outside the fault windows exceeds the bound.
    pub blocked: Vec<BlockedHandoff>,
}

impl Handoffs {
    /// Adds another lock's free gaps (a multi-lock's members are checked one by one).
    pub fn merge(&mut self, other: Handoffs) {
        self.bound_ms = self.bound_ms.max(other.bound_ms);
        self.longest_free_ms = match (self.longest_free_ms, other.longest_free_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.blocked.extend(other.blocked);
    }
}

/// Finds the blocked hand-offs of one lock among its `grants` (time, worker, token; sorted by time).
pub fn check(
    run: &RunInfo,
    grants: &[(Micros, u32, u64)],
    holds: &[HoldRecord],
    faults: &[FaultRecord],
) -> Handoffs {
    let ms = 1000;
    let after_fault = (run.lease_ms + run.command_timeout_ms) * ms;
    let mut windows: Vec<(Micros, Micros)> = faults
        .iter()
        .map(|f| (f.start, f.end + after_fault))
        .collect();
    windows.sort();
    let bound = (run.lease_ms + run.wait_ms + 1000) * ms;
    let end_of_run = run.start + run.duration_ms * ms;
    let let_go: HashMap<(u32, u64), Micros> = holds
        .iter()
        .map(|h| {
            let at = h.lost_at.map_or(h.released_at, |l| l.min(h.released_at));
            ((h.worker, h.token), at)
        })
        .collect();
    // A grant without a hold record is a holder that was killed: it held until its kill.
    let killed_at = |worker: u32, granted: Micros| {
        crate::proto::killed_at(faults, worker, granted).unwrap_or(end_of_run)
    };

    let mut out = Handoffs {
        bound_ms: (bound / ms) as f64,
        ..Handoffs::default()
    };
    let mut gap = |free_at: Micros, after: (u32, u64), next_grant: Option<Micros>| {
        let until = next_grant.unwrap_or(end_of_run).min(end_of_run);
        let stretch = longest_outside(free_at, until, &windows);
        let stretch_ms = stretch as f64 / 1000.0;
        out.longest_free_ms = Some(
            out.longest_free_ms
                .map_or(stretch_ms, |m| m.max(stretch_ms)),
        );
        if stretch > bound {
            out.blocked.push(BlockedHandoff {
                after,
                free_at,
                next_grant,
                blocked_ms: stretch_ms,
            });
        }
    };
    // The latest let-go so far, and whose it was.
    let mut held: Option<(Micros, (u32, u64))> = None;
    for &(at, worker, token) in grants {
        if let Some((free_at, after)) = held.filter(|(free_at, _)| at > *free_at) {
            gap(free_at, after, Some(at));
        }
        let ends = let_go
            .get(&(worker, token))
            .copied()
            .unwrap_or_else(|| killed_at(worker, at));
        if held.is_none_or(|(free_at, _)| ends > free_at) {
            held = Some((ends, (worker, token)));
        }
    }
    if let Some((free_at, after)) = held.filter(|(free_at, _)| *free_at < end_of_run) {
        gap(free_at, after, None);
    }
    out
}

/// The longest part of `[from, to)` outside every window (`windows` sorted by start).
fn longest_outside(from: Micros, to: Micros, windows: &[(Micros, Micros)]) -> Micros {
    let (mut at, mut longest) = (from, 0);
    for &(start, end) in windows {
        if start >= to {
            break;
        }
        if end <= at {
            continue;
        }
        longest = longest.max(start.saturating_sub(at));
        at = end;
        if at >= to {
            return longest;
        }
    }
    longest.max(to.saturating_sub(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    fn run() -> RunInfo {
        RunInfo {
            url: "mem://".into(),
            topology: "single".into(),
            seed: 1,
            workers: 2,
            primitive: "mutex".into(),
            permits: 1,
            lease_ms: 2000,
            wait_ms: 1000,
            command_timeout_ms: 1000,
            duration_ms: 60_000,
            name: "n".into(),
            start: 0,
        }
    }

    fn hold(worker: u32, token: u64, start: Micros, released_at: Micros) -> HoldRecord {
        HoldRecord {
            lock: String::new(),
            worker,
            claim: crate::history::Claim::Exclusive,
            token,
            sent: start,
            start,
            end: released_at,
            believed_until: released_at,
            lost_at: None,
            release: "ok".into(),
            release_sent: released_at,
            released_at,
            write_accepted: true,
        }
    }

    fn fault(kind: &str, worker: Option<u32>, start: Micros, end: Micros) -> FaultRecord {
        FaultRecord {
            kind: kind.into(),
            target: "x".into(),
            worker,
            start,
            end,
        }
    }

    /// Holds of worker 1 at each (start, release) and a last one running to the run's end.
    fn holds_at(times: &[(Micros, Micros)]) -> (Vec<(Micros, u32, u64)>, Vec<HoldRecord>) {
        let mut grants = Vec::new();
        let mut holds = Vec::new();
        for (i, &(start, end)) in times.iter().enumerate() {
            grants.push((start, 1, i as u64 + 1));
            holds.push(hold(1, i as u64 + 1, start, end));
        }
        (grants, holds)
    }

    #[test]
    fn a_gap_longer_than_the_bound_without_faults_is_blocked() {
        // Bound: 2 + 1 + 1 = 4 s. Gaps: 1 s, then 5 s, then to the end (hold runs past it).
        let (grants, holds) = holds_at(&[(0, S), (2 * S, 3 * S), (8 * S, 61 * S)]);
        let h = check(&run(), &grants, &holds, &[]);
        assert_eq!(h.bound_ms, 4000.0);
        assert_eq!(h.blocked.len(), 1);
        assert_eq!(h.blocked[0].after, (1, 2));
        assert_eq!(h.blocked[0].next_grant, Some(8 * S));
        assert_eq!(h.longest_free_ms, Some(5000.0));
    }

    #[test]
    fn only_the_stretch_outside_fault_windows_counts() {
        // Pause 10-14 s: window 10-17 s. The 9-20 s gap has 1 s before and 3 s after it.
        let faults = [fault("pause-server", None, 10 * S, 14 * S)];
        let (grants, holds) = holds_at(&[(0, 9 * S), (20 * S, 61 * S)]);
        let h = check(&run(), &grants, &holds, &faults);
        assert!(h.blocked.is_empty());
        assert_eq!(h.longest_free_ms, Some(3000.0));
        // Still stuck 5 s after the window: blocked.
        let (grants, holds) = holds_at(&[(0, 9 * S), (22 * S, 61 * S)]);
        let h = check(&run(), &grants, &holds, &faults);
        assert_eq!(h.blocked.len(), 1);
        assert_eq!(h.blocked[0].blocked_ms, 5000.0);
    }

    #[test]
    fn a_lock_never_granted_again_is_blocked_until_the_run_ends() {
        let (grants, holds) = holds_at(&[(0, 50 * S)]);
        let h = check(&run(), &grants, &holds, &[]);
        assert_eq!(h.blocked.len(), 1);
        assert_eq!(h.blocked[0].next_grant, None);
        assert_eq!(h.blocked[0].blocked_ms, 10_000.0);
    }

    #[test]
    fn overlapping_holds_and_killed_holders_keep_the_lock_busy() {
        // Worker 2 holds 1-30 s, across worker 1's hold ending at 3 s; worker 3 is killed at
        // 31 s, 1 s after its grant, and never reports a hold (window 31-34 s).
        let grants = [(0, 1, 1), (S, 2, 2), (30 * S, 3, 3), (34 * S, 1, 4)];
        let holds = [
            hold(1, 1, 0, 3 * S),
            hold(2, 2, S, 30 * S),
            hold(1, 4, 34 * S, 61 * S),
        ];
        let faults = [fault("kill-holder", Some(3), 31 * S, 31 * S)];
        let h = check(&run(), &grants, &holds, &faults);
        assert!(h.blocked.is_empty());
        assert_eq!(h.longest_free_ms, Some(0.0));
    }

    #[test]
    fn lost_counts_as_letting_go() {
        let (grants, mut holds) = holds_at(&[(0, 20 * S), (21 * S, 61 * S)]);
        holds[0].lost_at = Some(10 * S);
        let h = check(&run(), &grants, &holds, &[]);
        assert_eq!(h.blocked.len(), 1);
        assert_eq!(h.blocked[0].free_at, 10 * S);
    }
}
