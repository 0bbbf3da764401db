//! The checker: reads the run log and reports overlaps, unsignalled overlaps, stale writes the
//! register accepted, lost-signal latency, recovery after each fault, blocked hand-offs.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::clock::Micros;
use crate::handoff::{self, Handoffs};
use crate::history::{Claim, Findings, History, Hold, Write};
use crate::proto::{self, FaultRecord, HoldRecord, LogLine, Msg, RunInfo};

/// A paused holder must see `lost()` within this long after SIGCONT.
pub const RESUME_LOST_LIMIT_MS: f64 = 1000.0;

/// Summary statistics of a list of milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    /// How many samples.
    pub n: usize,
    /// Median (nearest rank).
    pub p50: Option<f64>,
    /// Largest.
    pub max: Option<f64>,
}

impl Stats {
    fn of(mut v: Vec<f64>) -> Stats {
        v.sort_by(f64::total_cmp);
        Stats {
            n: v.len(),
            p50: v.get(v.len().saturating_sub(1) / 2).copied(),
            max: v.last().copied(),
        }
    }
}

/// Two holds whose intervals intersect.
#[derive(Clone, Debug, Serialize)]
pub struct Overlap {
    /// Earlier holder (worker, token).
    pub earlier: (u32, u64),
    /// Later holder (worker, token).
    pub later: (u32, u64),
    /// Length of the intersection.
    pub ms: f64,
    /// The earlier holder's `lost()` resolved (before its release returned).
    pub signalled: bool,
    /// The earlier holder's release outcome.
    pub earlier_release: String,
}

/// What happened after one fault.
#[derive(Clone, Debug, Serialize)]
pub struct FaultOutcome {
    /// The fault.
    pub fault: FaultRecord,
    /// From the fault's start to the next successful acquire by anyone.
    pub recovery_ms: Option<f64>,
    /// For a paused holder: from SIGCONT to its `lost()` resolving (`None`: it never did).
    pub lost_after_resume_ms: Option<f64>,
    /// For a paused holder: whether it still held the lock when it was stopped.
    pub paused_mid_hold: Option<bool>,
    /// For a holder cut off by a partition or a half-open connection: whether it still held
    /// the lock when the fault began.
    pub cut_mid_hold: Option<bool>,
    /// For a holder cut off mid-hold: from the cut to its `lost()` resolving (`None`: it
    /// never did). Its lease clock bounds it by the lease.
    pub lost_after_cut_ms: Option<f64>,
    /// Acquires that timed out (see [`Report::acquire_timeouts`]) and were under way while the
    /// fault was in effect.
    pub acquire_timeouts: usize,
}

/// The checker's findings.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The run's parameters.
    pub run: Option<RunInfo>,
    /// Finished holds.
    pub holds: usize,
    /// Acquires reported.
    pub acquires: usize,
    /// Writes accepted by the register.
    pub writes_accepted: usize,
    /// Writes rejected by the register (stale tokens stopped by fencing).
    pub writes_rejected: usize,
    /// Accepted writes whose token was not above every token accepted before (replayed from the
    /// log independently of the register; must be 0).
    pub stale_writes_accepted: usize,
    /// Grants whose token was not above a token granted earlier (a fencing counter going back).
    pub token_regressions: usize,
    /// Pairs of holds whose intervals intersect (double grants).
    pub overlaps: Vec<Overlap>,
    /// Holds that overlapped a later hold (double-granted holds; the pairs are in `overlaps`).
    pub overlapping_holds: usize,
    /// Overlapping holds that never saw `lost()` resolve: nobody told the holder.
    pub unsignalled_overlaps: usize,
    /// `lost()` resolutions, measured from the next grant to someone else (when the lease had
    /// certainly ended); negative means the holder knew before anyone else got the lock.
    pub lost_latency_ms: Stats,
    /// From each fault to the next successful acquire.
    pub recovery_ms: Stats,
    /// Per fault.
    pub faults: Vec<FaultOutcome>,
    /// Free gaps after a hold and the blocked hand-offs among them (see [`handoff`]).
    pub handoffs: Handoffs,
    /// Acquires that timed out: the wait budget ran out, or a `Timeout` error.
    pub acquire_timeouts: usize,
    /// How long each timed-out acquire took, from the call to its return (compare with the wait
    /// budget).
    pub acquire_timeout_ms: Stats,
    /// Acquire / connect errors by kind.
    pub errors: BTreeMap<String, usize>,
    /// Release outcomes by kind.
    pub releases: BTreeMap<String, usize>,
    /// The history checker's findings over the same holds and writes (see
    /// [`crate::history`]): an overlap there is a hold granted while another holder still
    /// believed it held (its last look read it live) and had not been told `lost()`.
    pub history: Findings,
    /// The history those findings are about, for the linearizability check.
    #[serde(skip)]
    pub history_input: History,
}

fn ms(d: i64) -> f64 {
    d as f64 / 1000.0
}

/// Runs every check over a run log.
pub fn check(lines: &[LogLine]) -> Report {
    let mut run = None;
    let mut holds: Vec<HoldRecord> = Vec::new();
    let mut acquires: Vec<(Micros, u32, u64)> = Vec::new();
    let mut faults = Vec::new();
    let mut errors = BTreeMap::new();
    // Timed-out acquires: (called, returned).
    let mut timeouts: Vec<(Micros, Micros)> = Vec::new();
    let mut releases = BTreeMap::new();
    let (mut accepted, mut rejected, mut stale) = (0, 0, 0);
    let mut writes: Vec<Write> = Vec::new();
    // Acquires as the history checker takes them: granted (worker, claim, token, called,
    // returned), and (worker, claim, called) for those whose outcome is unknown.
    let mut grants: Vec<Grant> = Vec::new();
    let mut unknown: Vec<(u32, Claim, Micros)> = Vec::new();
    // The highest token accepted, per lock.
    let mut max_accepted: BTreeMap<String, u64> = BTreeMap::new();
    for line in lines {
        match line {
            LogLine::Run(r) => run = Some(r.clone()),
            LogLine::Fault(f) => faults.push(f.clone()),
            LogLine::Msg {
                msg,
                accepted: a,
                at,
            } => match msg {
                Msg::Write {
                    lock,
                    worker,
                    token,
                    ..
                } => {
                    // The register decides on receipt: invoked and completed at once.
                    writes.push(Write {
                        lock: lock.clone(),
                        worker: *worker,
                        token: *token,
                        invoked: *at,
                        completed: a.map(|a| (*at, a)),
                    });
                    if *a == Some(true) {
                        accepted += 1;
                        match max_accepted.get_mut(lock) {
                            Some(max) => {
                                if *token <= *max {
                                    stale += 1;
                                }
                                *max = (*max).max(*token);
                            }
                            None => {
                                max_accepted.insert(lock.clone(), *token);
                            }
                        }
                    } else {
                        rejected += 1;
                    }
                }
                Msg::Acquired {
                    lock,
                    worker,
                    claim,
                    token,
                    sent,
                    at,
                } => {
                    acquires.push((*at, *worker, *token));
                    grants.push(Grant {
                        lock: lock.clone(),
                        worker: *worker,
                        claim: *claim,
                        token: *token,
                        sent: *sent,
                        at: *at,
                    });
                }
                Msg::Hold(h) => {
                    *releases.entry(h.release.clone()).or_insert(0) += 1;
                    holds.push(h.clone());
                }
                Msg::Error {
                    kind,
                    claim,
                    sent,
                    at,
                    worker,
                } => {
                    // A failed connect is no acquire: only a failed acquire may have taken
                    // the lock.
                    if let Some(claim) = claim {
                        unknown.push((*worker, *claim, *sent));
                    }
                    if kind == "Timeout" {
                        timeouts.push((*sent, *at));
                    }
                    *errors.entry(kind.clone()).or_insert(0) += 1;
                }
                Msg::NotGranted { sent, at, .. } => timeouts.push((*sent, *at)),
                Msg::Hello { .. } | Msg::Done { .. } => {}
            },
        }
    }
    acquires.sort();
    holds.sort_by_key(|h| h.start);

    // Exclusive grants follow one another, so their tokens must increase in the order they
    // returned; concurrent grants (readers, permits) are ordered by the history checker only.
    // Each lock on its own (a multi-lock's members are locks of their own).
    let mut exclusive: Vec<(&str, Micros, u64)> = grants
        .iter()
        .filter(|g| g.claim == Claim::Exclusive)
        .map(|g| (g.lock.as_str(), g.at, g.token))
        .collect();
    exclusive.sort();
    let mut token_regressions = 0;
    let mut max_token: BTreeMap<&str, u64> = BTreeMap::new();
    for &(lock, _, token) in &exclusive {
        match max_token.get_mut(lock) {
            Some(max) => {
                if token <= *max {
                    token_regressions += 1;
                }
                *max = (*max).max(token);
            }
            None => {
                max_token.insert(lock, token);
            }
        }
    }

    // Pairs of exclusive holds of one lock (the history checker weighs readers and permits
    // too).
    let mut sole: Vec<&HoldRecord> = holds
        .iter()
        .filter(|h| h.claim == Claim::Exclusive)
        .collect();
    sole.sort_by(|a, b| (&a.lock, a.start).cmp(&(&b.lock, b.start)));
    let mut overlaps = Vec::new();
    for (i, a) in sole.iter().enumerate() {
        for b in sole[i + 1..]
            .iter()
            .take_while(|b| b.lock == a.lock && b.start < a.end)
        {
            overlaps.push(Overlap {
                earlier: (a.worker, a.token),
                later: (b.worker, b.token),
                ms: ms(a.end.min(b.end) as i64 - b.start as i64),
                signalled: a.lost_at.is_some(),
                earlier_release: a.release.clone(),
            });
        }
    }
    let earlier: std::collections::BTreeSet<(u32, u64, bool)> = overlaps
        .iter()
        .map(|o| (o.earlier.0, o.earlier.1, o.signalled))
        .collect();
    let overlapping_holds = earlier.len();
    let unsignalled_overlaps = earlier.iter().filter(|e| !e.2).count();

    let next_grant = |after: Micros, worker: u32| {
        acquires
            .iter()
            .find(|(at, w, _)| *at > after && *w != worker)
            .map(|(at, _, _)| *at)
    };
    let lost_latency: Vec<f64> = holds
        .iter()
        .filter_map(|h| {
            let lost = h.lost_at?;
            let next = next_grant(h.start, h.worker)?;
            Some(ms(lost as i64 - next as i64))
        })
        .collect();

    let outcomes: Vec<FaultOutcome> = faults
        .iter()
        .map(|f| {
            let recovery = acquires
                .iter()
                .find(|(at, _, _)| *at > f.start)
                .map(|(at, _, _)| ms((at - f.start) as i64));
            // The holder a holder fault hit, and whether it hit it mid-hold.
            let hit = holds.iter().find(|h| {
                Some(h.worker) == f.worker && h.start <= f.start && h.released_at >= f.start
            });
            let mid_hold = hit.map(|h| h.end >= f.start);
            let lost_after = |from: Micros| {
                hit.and_then(|h| h.lost_at)
                    .map(|l| ms(l as i64 - from as i64))
            };
            let paused = f.kind == "pause-holder";
            let cut = f.kind == "partition-holder" || f.kind == "half-open-holder";
            FaultOutcome {
                fault: f.clone(),
                recovery_ms: recovery,
                lost_after_resume_ms: lost_after(f.end).filter(|_| paused),
                paused_mid_hold: mid_hold.filter(|_| paused),
                cut_mid_hold: mid_hold.filter(|_| cut),
                lost_after_cut_ms: lost_after(f.start).filter(|_| cut && mid_hold == Some(true)),
                acquire_timeouts: timeouts
                    .iter()
                    .filter(|(sent, at)| *sent <= f.end && *at >= f.start)
                    .count(),
            }
        })
        .collect();
    let recovery = Stats::of(outcomes.iter().filter_map(|o| o.recovery_ms).collect());
    // Each lock on its own: a multi-lock member that stays stuck while sets of the others keep
    // changing hands is a blocked hand-off too.
    let handoffs = run
        .as_ref()
        .map(|run| {
            let locks: std::collections::BTreeSet<&str> =
                grants.iter().map(|g| g.lock.as_str()).collect();
            let mut all = Handoffs::default();
            for lock in locks {
                let mut of_lock: Vec<(Micros, u32, u64)> = grants
                    .iter()
                    .filter(|g| g.lock == lock)
                    .map(|g| (g.at, g.worker, g.token))
                    .collect();
                of_lock.sort();
                let holds: Vec<HoldRecord> =
                    holds.iter().filter(|h| h.lock == lock).cloned().collect();
                all.merge(handoff::check(run, &of_lock, &holds, &faults));
            }
            all
        })
        .unwrap_or_default();

    let history_input = History {
        permits: run.as_ref().map_or(1, |r| r.permits),
        holds: history_holds(&holds, &writes, &grants, &unknown, &faults),
        writes,
    };
    Report {
        run,
        holds: holds.len(),
        acquires: acquires.len(),
        writes_accepted: accepted,
        writes_rejected: rejected,
        stale_writes_accepted: stale,
        token_regressions,
        overlapping_holds,
        unsignalled_overlaps,
        overlaps,
        lost_latency_ms: Stats::of(lost_latency),
        recovery_ms: recovery,
        faults: outcomes,
        handoffs,
        acquire_timeouts: timeouts.len(),
        acquire_timeout_ms: Stats::of(
            timeouts
                .iter()
                .map(|(sent, at)| ms(*at as i64 - *sent as i64))
                .collect(),
        ),
        errors,
        releases,
        history: history_input.check(0),
        history_input,
    }
}

/// The holds as the history checker takes them, each believed from its grant until the last
/// instant its holder read it live (or `lost()` resolved, if that was earlier):
/// - a finished hold is freed by its release's return when the release answered `ok`, and at an
///   unknown time otherwise;
/// - a hold whose worker was killed (no finished hold for its grant) ends at the kill, or when
///   it sent its write if that came first, freed at an unknown time (its lease ends it); one
///   whose worker the harness lost track of otherwise (a worker that failed, a straggler) never
///   ends, which the checkers report, on top of the run's failure for that worker;
/// - an acquire that failed has an unknown outcome.
fn history_holds(
    holds: &[HoldRecord],
    writes: &[Write],
    grants: &[Grant],
    unknown: &[(u32, Claim, Micros)],
    faults: &[FaultRecord],
) -> Vec<Hold> {
    let finished: std::collections::HashSet<(&str, u32, u64)> = holds
        .iter()
        .map(|h| (h.lock.as_str(), h.worker, h.token))
        .collect();
    // A holder that had finished its work before its kill stopped believing when it sent its
    // write.
    let wrote_at = |lock: &str, worker: u32, token: u64| {
        writes
            .iter()
            .find(|w| w.lock == lock && w.worker == worker && w.token == token)
            .map(|w| w.invoked)
    };
    let done = holds.iter().map(|h| Hold {
        lock: h.lock.clone(),
        worker: h.worker,
        claim: h.claim,
        token: fenced(h.claim, h.token),
        invoked: h.sent,
        granted: Some(h.start),
        lost: h.lost_at,
        released: Some(h.believed_until),
        freed_by: (h.release == "ok").then_some(h.released_at),
    });
    let killed = grants
        .iter()
        .filter(|g| !finished.contains(&(g.lock.as_str(), g.worker, g.token)))
        .map(|g| Hold {
            lock: g.lock.clone(),
            worker: g.worker,
            claim: g.claim,
            token: fenced(g.claim, g.token),
            invoked: g.sent,
            granted: Some(g.at),
            lost: None,
            released: match (
                proto::killed_at(faults, g.worker, g.at),
                wrote_at(&g.lock, g.worker, g.token),
            ) {
                (Some(k), Some(w)) => Some(k.min(w.max(g.at))),
                (k, _) => k,
            },
            freed_by: None,
        });
    let failed = unknown.iter().map(|&(worker, claim, sent)| Hold {
        lock: String::new(),
        worker,
        claim,
        token: None,
        invoked: sent,
        granted: None,
        lost: None,
        released: None,
        freed_by: None,
    });
    done.chain(killed).chain(failed).collect()
}

/// The token a hold is fenced with: every grant's but a reader's (lockkit promises increasing
/// tokens for locks, write locks, permits and terms; readers share theirs).
fn fenced(claim: Claim, token: u64) -> Option<u64> {
    (claim != Claim::Shared).then_some(token)
}

/// One acquire that returned a guard, as the run log has it.
struct Grant {
    lock: String,
    worker: u32,
    claim: Claim,
    token: u64,
    sent: Micros,
    at: Micros,
}

impl Report {
    /// Pause faults whose holder did not see `lost()` within the limit after SIGCONT.
    pub fn slow_pause_signals(&self) -> usize {
        self.faults
            .iter()
            .filter(|o| o.paused_mid_hold == Some(true))
            .filter(|o| {
                o.lost_after_resume_ms
                    .is_none_or(|l| l > RESUME_LOST_LIMIT_MS)
            })
            .count()
    }

    /// Holders cut off mid-hold that did not see `lost()` within `limit_ms` of the cut.
    pub fn slow_cut_signals(&self, limit_ms: f64) -> usize {
        self.faults
            .iter()
            .filter(|o| o.cut_mid_hold == Some(true))
            .filter(|o| o.lost_after_cut_ms.is_none_or(|l| l > limit_ms))
            .count()
    }

    /// Lost-after-resume statistics over the pause faults that hit a hold.
    pub fn resume_stats(&self) -> Stats {
        Stats::of(
            self.faults
                .iter()
                .filter_map(|o| o.lost_after_resume_ms)
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(worker: u32, token: u64, start: Micros, end: Micros, lost: bool) -> LogLine {
        LogLine::Msg {
            at: end,
            msg: Msg::Hold(HoldRecord {
                lock: String::new(),
                worker,
                claim: Claim::Exclusive,
                token,
                sent: start,
                start,
                end,
                believed_until: end,
                lost_at: lost.then_some(end),
                release: if lost { "LockLost" } else { "ok" }.into(),
                release_sent: end,
                released_at: end + 1,
                write_accepted: true,
            }),
            accepted: None,
        }
    }

    fn acquired(worker: u32, token: u64, at: Micros) -> LogLine {
        LogLine::Msg {
            at,
            msg: Msg::Acquired {
                lock: String::new(),
                worker,
                claim: Claim::Exclusive,
                token,
                sent: at,
                at,
            },
            accepted: None,
        }
    }

    fn write(token: u64, accepted: bool) -> LogLine {
        LogLine::Msg {
            at: 0,
            msg: Msg::Write {
                lock: String::new(),
                worker: 1,
                token,
                start: 0,
                end: 0,
            },
            accepted: Some(accepted),
        }
    }

    #[test]
    fn overlaps_are_signalled_only_when_the_earlier_holder_saw_lost() {
        let lines = vec![
            acquired(1, 10, 0),
            acquired(2, 11, 50),
            acquired(3, 12, 300),
            hold(1, 10, 0, 100, true),
            hold(2, 11, 50, 400, false),
            hold(3, 12, 300, 500, false),
        ];
        let r = check(&lines);
        assert_eq!(r.overlaps.len(), 2);
        assert_eq!(r.overlapping_holds, 2);
        assert_eq!(r.unsignalled_overlaps, 1);
        assert_eq!(r.token_regressions, 0);
        // Holder 1 was told at 100, 50 µs after holder 2 got the lock.
        assert_eq!(r.lost_latency_ms.max, Some(0.05));
    }

    #[test]
    fn timed_out_acquires_count_against_the_faults_they_spanned() {
        let msg = |msg| LogLine::Msg {
            at: 0,
            msg,
            accepted: None,
        };
        let lines = vec![
            LogLine::Fault(FaultRecord {
                kind: "pause-server".into(),
                target: "redis".into(),
                worker: None,
                start: 1000,
                end: 5000,
            }),
            // Called before the pause, returned after it: spans it.
            msg(Msg::NotGranted {
                worker: 1,
                sent: 500,
                at: 5200,
            }),
            msg(Msg::Error {
                worker: 2,
                claim: Some(Claim::Exclusive),
                sent: 2000,
                at: 3000,
                kind: "Timeout".into(),
            }),
            // Not a timeout, and a timeout after the pause.
            msg(Msg::Error {
                worker: 2,
                claim: Some(Claim::Exclusive),
                sent: 3000,
                at: 3100,
                kind: "Connection".into(),
            }),
            msg(Msg::NotGranted {
                worker: 3,
                sent: 6000,
                at: 7000,
            }),
        ];
        let r = check(&lines);
        assert_eq!(r.acquire_timeouts, 3);
        assert_eq!(r.faults[0].acquire_timeouts, 2);
        assert_eq!(r.acquire_timeout_ms.max, Some(4.7));
        assert_eq!(r.errors.get("Connection"), Some(&1));
    }

    #[test]
    fn a_failed_acquire_keeps_its_claim_and_a_failed_connect_is_no_acquire() {
        let error = |claim| LogLine::Msg {
            at: 0,
            msg: Msg::Error {
                worker: 1,
                claim,
                sent: 10,
                at: 20,
                kind: "Connection".into(),
            },
            accepted: None,
        };
        let r = check(&[error(None), error(Some(Claim::Shared))]);
        let unknown: Vec<Claim> = r.history_input.holds.iter().map(|h| h.claim).collect();
        assert_eq!(unknown, [Claim::Shared]);
        assert_eq!(r.errors.get("Connection"), Some(&2), "both are errors");
    }

    #[test]
    fn the_history_ends_a_hold_at_its_last_live_look_or_at_the_kill_of_its_holder() {
        // Worker 1 was paused right after its last look at 150 and told lost() at 5000, long
        // after worker 2's grant at 2500: to the history it believed only up to 150.
        let paused = LogLine::Msg {
            at: 5000,
            msg: Msg::Hold(HoldRecord {
                believed_until: 150,
                ..match hold(1, 10, 100, 5000, true) {
                    LogLine::Msg {
                        msg: Msg::Hold(h), ..
                    } => h,
                    _ => unreachable!(),
                }
            }),
            accepted: None,
        };
        let kill = |worker, at| {
            LogLine::Fault(FaultRecord {
                kind: "kill-holder".into(),
                target: format!("worker {worker}"),
                worker: Some(worker),
                start: at,
                end: at,
            })
        };
        let mut lines = vec![
            acquired(1, 10, 100),
            acquired(2, 11, 2500),
            paused,
            hold(2, 11, 2500, 2600, false),
            // Worker 3 got the lock and was killed before it reported the hold.
            acquired(3, 12, 3000),
            kill(3, 3100),
            acquired(4, 13, 6000),
            hold(4, 13, 6000, 6100, false),
        ];
        let r = check(&lines);
        assert!(r.history.ok(), "{:?}", r.history);
        assert_eq!(r.unsignalled_overlaps, 0);
        assert_eq!(r.history_input.holds.len(), 4);
        // Without the kill, worker 3 believed to the end: worker 4's grant overlaps it.
        lines.retain(|l| !matches!(l, LogLine::Fault(_)));
        let r = check(&lines);
        assert_eq!(r.history.overlaps.len(), 1, "{:?}", r.history);
        assert_eq!(r.history.overlaps[0].held, vec![(3, Some(12))]);
    }

    #[test]
    fn readers_share_and_a_writer_over_a_reader_is_a_history_overlap() {
        let with = |claim: Claim, line: LogLine| match line {
            LogLine::Msg {
                at,
                msg: Msg::Hold(h),
                accepted,
            } => LogLine::Msg {
                at,
                msg: Msg::Hold(HoldRecord { claim, ..h }),
                accepted,
            },
            LogLine::Msg {
                at,
                msg:
                    Msg::Acquired {
                        lock,
                        worker,
                        token,
                        sent,
                        ..
                    },
                accepted,
            } => LogLine::Msg {
                at,
                msg: Msg::Acquired {
                    lock,
                    worker,
                    claim,
                    token,
                    sent,
                    at,
                },
                accepted,
            },
            other => other,
        };
        let r = Claim::Shared;
        let mut lines = vec![
            with(r, acquired(1, 5, 100)),
            with(r, acquired(2, 4, 150)),
            with(r, hold(1, 5, 100, 300, false)),
            with(r, hold(2, 4, 150, 400, false)),
            acquired(3, 6, 500),
            hold(3, 6, 500, 600, false),
        ];
        let report = check(&lines);
        assert!(report.history.ok(), "{:?}", report.history);
        // Readers are not pairs of exclusive holds, and their tokens are not fenced.
        assert_eq!((report.overlaps.len(), report.token_regressions), (0, 0));
        // A writer granted while reader 2 still held.
        lines.push(acquired(4, 7, 350));
        lines.push(hold(4, 7, 350, 450, false));
        let report = check(&lines);
        assert_eq!(report.history.overlaps.len(), 1, "{:?}", report.history);
        assert_eq!(report.history.overlaps[0].held, vec![(2, None)]);
    }

    #[test]
    fn replay_counts_accepted_stale_writes_and_token_regressions() {
        let lines = vec![
            write(5, true),
            write(4, false),
            write(5, true),
            write(6, true),
            acquired(1, 7, 0),
            acquired(2, 3, 10),
        ];
        let r = check(&lines);
        assert_eq!(r.writes_accepted, 3);
        assert_eq!(r.writes_rejected, 1);
        assert_eq!(r.stale_writes_accepted, 1);
        assert_eq!(r.token_regressions, 1);
    }
}
