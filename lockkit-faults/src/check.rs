//! The checker: reads the run log and reports overlaps, unsignalled overlaps, stale writes the
//! register accepted, lost-signal latency, recovery after each fault, blocked hand-offs.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::clock::Micros;
use crate::handoff::{self, Handoffs};
use crate::history::{self, Claim, Findings, Hold, Write};
use crate::proto::{FaultRecord, HoldRecord, LogLine, Msg, RunInfo};

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
    /// The history checker's findings over the same holds and writes (see [`history`]): an
    /// overlap there is one whose earlier holder was not told `lost()` before the later began.
    pub history: Findings,
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
    let mut max_accepted: Option<u64> = None;
    for line in lines {
        match line {
            LogLine::Run(r) => run = Some(r.clone()),
            LogLine::Fault(f) => faults.push(f.clone()),
            LogLine::Msg {
                msg,
                accepted: a,
                at,
            } => match msg {
                Msg::Write { worker, token, .. } => {
                    // The register decides on receipt: invoked and completed at once.
                    writes.push(Write {
                        worker: *worker,
                        token: *token,
                        invoked: *at,
                        completed: a.map(|a| (*at, a)),
                    });
                    if *a == Some(true) {
                        accepted += 1;
                        if max_accepted.is_some_and(|m| *token <= m) {
                            stale += 1;
                        }
                        max_accepted = Some(max_accepted.map_or(*token, |m| m.max(*token)));
                    } else {
                        rejected += 1;
                    }
                }
                Msg::Acquired { worker, token, at } => acquires.push((*at, *worker, *token)),
                Msg::Hold(h) => {
                    *releases.entry(h.release.clone()).or_insert(0) += 1;
                    holds.push(h.clone());
                }
                Msg::Error { kind, sent, at, .. } => {
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

    let mut token_regressions = 0;
    let mut max_token: Option<u64> = None;
    for &(_, _, token) in &acquires {
        if max_token.is_some_and(|m| token <= m) {
            token_regressions += 1;
        }
        max_token = Some(max_token.map_or(token, |m| m.max(token)));
    }

    let mut overlaps = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        for b in holds[i + 1..].iter().take_while(|b| b.start < a.end) {
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
            let (mut lost_after, mut mid_hold) = (None, None);
            if f.kind == "pause-holder" {
                let paused = holds.iter().find(|h| {
                    Some(h.worker) == f.worker && h.start <= f.start && h.released_at >= f.start
                });
                mid_hold = paused.map(|h| h.end >= f.start);
                lost_after = paused
                    .and_then(|h| h.lost_at)
                    .map(|l| ms(l as i64 - f.end as i64));
            }
            FaultOutcome {
                fault: f.clone(),
                recovery_ms: recovery,
                lost_after_resume_ms: lost_after,
                paused_mid_hold: mid_hold,
                acquire_timeouts: timeouts
                    .iter()
                    .filter(|(sent, at)| *sent <= f.end && *at >= f.start)
                    .count(),
            }
        })
        .collect();
    let recovery = Stats::of(outcomes.iter().filter_map(|o| o.recovery_ms).collect());
    let handoffs = run
        .as_ref()
        .map(|run| handoff::check(run, &acquires, &holds, &faults))
        .unwrap_or_default();

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
        history: history::check(&history_holds(&holds), &writes, 1, 0),
    }
}

/// The holds as the history checker takes them: each believed from its grant until its end
/// (work done or `lost()`). The run log has no acquire call times, so each grant is taken as
/// called when it returned.
fn history_holds(holds: &[HoldRecord]) -> Vec<Hold> {
    holds
        .iter()
        .map(|h| Hold {
            worker: h.worker,
            claim: Claim::Exclusive,
            token: Some(h.token),
            invoked: h.start,
            granted: Some(h.start),
            lost: h.lost_at,
            released: Some(h.end),
        })
        .collect()
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
                worker,
                token,
                start,
                end,
                lost_at: lost.then_some(end),
                release: if lost { "LockLost" } else { "ok" }.into(),
                released_at: end + 1,
                write_accepted: true,
            }),
            accepted: None,
        }
    }

    fn acquired(worker: u32, token: u64, at: Micros) -> LogLine {
        LogLine::Msg {
            at,
            msg: Msg::Acquired { worker, token, at },
            accepted: None,
        }
    }

    fn write(token: u64, accepted: bool) -> LogLine {
        LogLine::Msg {
            at: 0,
            msg: Msg::Write {
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
                sent: 2000,
                at: 3000,
                kind: "Timeout".into(),
            }),
            // Not a timeout, and a timeout after the pause.
            msg(Msg::Error {
                worker: 2,
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
