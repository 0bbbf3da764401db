//! The fast history checker: every operation with its invoke and complete times on one
//! monotonic clock, checked against what a lock promises, in O(n log n).
//!
//! - **Exclusion**: the holds a history shows never exceed the lock's capacity: an exclusive hold
//!   (a mutex, a writer, a leader) alone; shared holds (readers) only with each other; permits up
//!   to the semaphore's size. A hold counts from its acquire's return until its holder stopped
//!   believing in it: its `lost()` resolved or its release was called, whichever came first. So
//!   an overlap whose earlier holder was told `lost()` before the later one began is no overlap,
//!   and every overlap found is an unsignalled one. `margin` forgives overlaps that short (the
//!   documented slack of a backend's lost signal, zero by default).
//! - **Fencing**: a fenced grant that began after another fenced grant returned has a larger
//!   token (tokens increase in real-time order; concurrent grants are not ordered), and
//!   exclusive grants, which the lock makes one at a time, carry increasing tokens in the order
//!   they returned, even when their acquires were under way at once.
//! - **Stale writes**: a write the register accepted has a larger token than every accepted
//!   write that completed before it was invoked.
//! - **Unknown outcomes**: an acquire that never returned (its worker crashed, or it failed in a
//!   way that may have taken the lock) is counted, not checked here: it may or may not have
//!   happened, which only a linearizability check that forks the model can settle.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Micros;

/// What one hold claims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "n", rename_all = "lowercase")]
pub enum Claim {
    /// Alone: a mutex, an RW writer, a leader, a multi-lock member.
    #[default]
    Exclusive,
    /// With other shared holds only: an RW reader.
    Shared,
    /// This many of the semaphore's permits.
    Permits(u32),
}

/// One acquire and what became of it, as its worker saw it.
#[derive(Clone, Debug, Serialize)]
pub struct Hold {
    /// The lock: empty for the run's one lock, a member's name for a multi-lock's members
    /// (each member is a lock of its own, checked on its own).
    pub lock: String,
    /// Worker id.
    pub worker: u32,
    /// What it claims.
    pub claim: Claim,
    /// The guard's fencing token, for grants whose tokens must increase.
    pub token: Option<u64>,
    /// When the acquire was called.
    pub invoked: Micros,
    /// When it returned a guard; `None` when its outcome is unknown.
    pub granted: Option<Micros>,
    /// When `lost()` resolved, if it did.
    pub lost: Option<Micros>,
    /// When the release was called, if it was.
    pub released: Option<Micros>,
    /// By when the server had given the lock up: a release that answered `ok` (`None`: at a
    /// time nobody saw, when its lease ended). The linearizability check bounds the hold's end
    /// with it, which narrows its search; no verdict depends on it.
    pub freed_by: Option<Micros>,
}

impl Hold {
    /// When its holder stopped believing it held (`None`: never, up to the end of the history).
    fn end(&self) -> Option<Micros> {
        match (self.lost, self.released) {
            (Some(l), Some(r)) => Some(l.min(r)),
            (l, r) => l.or(r),
        }
    }
}

/// One write to the fenced register.
#[derive(Clone, Debug, Serialize)]
pub struct Write {
    /// The lock whose token it carried (see [`Hold::lock`]); the register fences each lock
    /// on its own.
    pub lock: String,
    /// Worker id.
    pub worker: u32,
    /// The token it carried.
    pub token: u64,
    /// When it was sent.
    pub invoked: Micros,
    /// When the register answered, and whether it accepted (`None`: no answer).
    pub completed: Option<(Micros, bool)>,
}

/// Two holds that were believed at once beyond what the lock allows.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// The lock (see [`Hold::lock`]).
    pub lock: String,
    /// The hold that began while the others were held: (worker, token).
    pub later: (u32, Option<u64>),
    /// Those others.
    pub held: Vec<(u32, Option<u64>)>,
    /// When it began.
    pub at: Micros,
}

/// The run's history (one lock, or a multi-lock's members): what [`check`] takes, and what `history.json` holds for the
/// linearizability check (`lockkit-faults/porcupine`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct History {
    /// The lock's capacity in permits (1 for a mutex, an RW lock or an election).
    pub permits: u32,
    /// Every acquire.
    pub holds: Vec<Hold>,
    /// Every write to the fenced register.
    pub writes: Vec<Write>,
}

impl History {
    /// Checks the history (see [`check`]).
    pub fn check(&self, margin: Micros) -> Findings {
        check(&self.holds, &self.writes, self.permits, margin)
    }
}

/// What the checker found; [`Findings::ok`] says whether the history is clean.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Findings {
    /// Holds beyond the capacity (each unsignalled: see the module docs).
    pub overlaps: Vec<Violation>,
    /// Fenced grants whose token was not above a grant that returned before they began:
    /// (earlier token, later token).
    pub token_regressions: Vec<(u64, u64)>,
    /// Accepted writes whose token was not above an accepted write completed before them:
    /// (earlier token, later token).
    pub stale_writes_accepted: Vec<(u64, u64)>,
    /// Acquires whose outcome is unknown.
    pub unknown_acquires: usize,
    /// Writes that got no answer.
    pub unknown_writes: usize,
}

impl Findings {
    /// No overlap, no regression, no stale write accepted.
    pub fn ok(&self) -> bool {
        self.overlaps.is_empty()
            && self.token_regressions.is_empty()
            && self.stale_writes_accepted.is_empty()
    }
}

/// Checks a history, each lock on its own: `permits` is a lock's capacity in permits (1 for a
/// mutex, an RW lock or an election), `margin` the overlap forgiven (see the module docs).
pub fn check(holds: &[Hold], writes: &[Write], permits: u32, margin: Micros) -> Findings {
    let locks: std::collections::BTreeSet<&str> = holds
        .iter()
        .map(|h| h.lock.as_str())
        .chain(writes.iter().map(|w| w.lock.as_str()))
        .collect();
    let mut found = Findings {
        unknown_acquires: holds.iter().filter(|h| h.granted.is_none()).count(),
        unknown_writes: writes.iter().filter(|w| w.completed.is_none()).count(),
        ..Findings::default()
    };
    for lock in locks {
        let holds: Vec<&Hold> = holds.iter().filter(|h| h.lock == lock).collect();
        found.overlaps.extend(overlaps(&holds, permits, margin));
        // One regression a later token, found by either rule.
        let mut regressions: std::collections::BTreeMap<u64, u64> = BTreeMap::new();
        for (earlier, later) in increasing(
            holds
                .iter()
                .filter_map(|h| Some((h.invoked, h.granted?, h.token?))),
        )
        .into_iter()
        .chain(in_grant_order(&holds))
        {
            let e = regressions.entry(later).or_insert(earlier);
            *e = (*e).max(earlier);
        }
        found.token_regressions.extend(
            regressions
                .into_iter()
                .map(|(later, earlier)| (earlier, later)),
        );
        found.stale_writes_accepted.extend(increasing(
            writes
                .iter()
                .filter(|w| w.lock == lock)
                .filter_map(|w| match w.completed {
                    Some((at, true)) => Some((w.invoked, at, w.token)),
                    _ => None,
                }),
        ));
    }
    found
}

/// A sweep over the holds' starts and ends: at every start, what is held must leave room.
fn overlaps(holds: &[&Hold], permits: u32, margin: Micros) -> Vec<Violation> {
    // (time, is_start, index); at one instant ends come before starts.
    // A hold that ended the instant it began (its holder was paused before its first look) is
    // checked at its start and then holds nothing.
    let mut events = Vec::with_capacity(holds.len() * 2);
    let mut instant = vec![false; holds.len()];
    for (i, h) in holds.iter().enumerate() {
        let Some(start) = h.granted else { continue };
        let end = h.end().map(|e| e.saturating_sub(margin).max(start));
        events.push((start, true, i));
        match end {
            Some(e) if e == start => instant[i] = true,
            Some(e) => events.push((e, false, i)),
            None => {}
        }
    }
    events.sort_by_key(|&(t, start, i)| (t, start, i));
    let mut active: Vec<usize> = Vec::new();
    let mut found = Vec::new();
    for (t, start, i) in events {
        if !start {
            active.retain(|&a| a != i);
            continue;
        }
        let h = &holds[i];
        let conflicting: Vec<usize> = active
            .iter()
            .copied()
            .filter(|&a| conflicts(holds[a].claim, h.claim))
            .collect();
        let used: u32 = active.iter().map(|&a| weight(holds[a].claim)).sum();
        let over = match h.claim {
            Claim::Permits(n) => used + n > permits,
            _ => !conflicting.is_empty(),
        };
        if over {
            let held = if matches!(h.claim, Claim::Permits(_)) {
                active.clone()
            } else {
                conflicting
            };
            found.push(Violation {
                lock: h.lock.clone(),
                later: (h.worker, h.token),
                held: held
                    .iter()
                    .map(|&a| (holds[a].worker, holds[a].token))
                    .collect(),
                at: t,
            });
        }
        if !instant[i] {
            active.push(i);
        }
    }
    found
}

/// Whether two claims may not be held at once.
fn conflicts(a: Claim, b: Claim) -> bool {
    !matches!((a, b), (Claim::Shared, Claim::Shared))
        && !matches!((a, b), (Claim::Permits(_), Claim::Permits(_)))
}

fn weight(c: Claim) -> u32 {
    match c {
        Claim::Permits(n) => n,
        _ => 1,
    }
}

/// Exclusive holds exclude each other, so the lock granted them in the order their grants
/// returned (an overlap is reported on its own): their tokens must increase in that order,
/// even for acquires that were under way at once. Returns the pairs that do not, as (the
/// largest earlier token, the later token).
fn in_grant_order(holds: &[&Hold]) -> Vec<(u64, u64)> {
    let mut sole: Vec<(Micros, u64)> = holds
        .iter()
        .filter(|h| h.claim == Claim::Exclusive)
        .filter_map(|h| Some((h.granted?, h.token?)))
        .collect();
    sole.sort_unstable();
    let mut max = None::<u64>;
    let mut bad = Vec::new();
    for (_, token) in sole {
        if let Some(m) = max.filter(|m| token <= *m) {
            bad.push((m, token));
        }
        max = max.max(Some(token));
    }
    bad
}

/// Operations `(invoked, completed, value)`: every one must carry a larger value than every
/// one that completed before it was invoked. Returns the pairs that do not, as (the largest
/// earlier value, the later value).
fn increasing(ops: impl Iterator<Item = (Micros, Micros, u64)>) -> Vec<(u64, u64)> {
    let ops: Vec<_> = ops.collect();
    let mut by_completion: Vec<(Micros, u64)> = ops.iter().map(|&(_, c, v)| (c, v)).collect();
    by_completion.sort_unstable();
    let mut by_invocation: Vec<(Micros, u64)> = ops.iter().map(|&(i, _, v)| (i, v)).collect();
    by_invocation.sort_unstable();
    let (mut next, mut max) = (0, None::<u64>);
    let mut bad = Vec::new();
    for (invoked, value) in by_invocation {
        while next < by_completion.len() && by_completion[next].0 < invoked {
            max = max.max(Some(by_completion[next].1));
            next += 1;
        }
        if let Some(m) = max.filter(|m| value <= *m) {
            bad.push((m, value));
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(worker: u32, claim: Claim, token: u64, granted: Micros, released: Micros) -> Hold {
        Hold {
            lock: String::new(),
            worker,
            claim,
            token: Some(token),
            invoked: granted.saturating_sub(5),
            granted: Some(granted),
            lost: None,
            released: Some(released),
            freed_by: Some(released + 1),
        }
    }

    fn write(token: u64, invoked: Micros, accepted: bool) -> Write {
        Write {
            lock: String::new(),
            worker: 0,
            token,
            invoked,
            completed: Some((invoked + 2, accepted)),
        }
    }

    const X: Claim = Claim::Exclusive;

    fn mutex_history() -> (Vec<Hold>, Vec<Write>) {
        let holds = vec![
            hold(1, X, 1, 10, 20),
            hold(2, X, 2, 25, 40),
            hold(3, X, 3, 40, 60),
        ];
        let writes = vec![write(1, 12, true), write(2, 30, true), write(3, 45, true)];
        (holds, writes)
    }

    #[test]
    fn a_correct_history_passes() {
        let (holds, writes) = mutex_history();
        let f = check(&holds, &writes, 1, 0);
        assert!(f.ok(), "{f:?}");
        assert_eq!((f.unknown_acquires, f.unknown_writes), (0, 0));
    }

    #[test]
    fn an_unsignalled_overlap_is_found_and_a_signalled_one_is_not() {
        let (mut holds, writes) = mutex_history();
        holds[1].released = Some(45); // still held when worker 3 got the lock at 40
        let f = check(&holds, &writes, 1, 0);
        assert_eq!(f.overlaps.len(), 1, "{f:?}");
        assert_eq!(f.overlaps[0].later, (3, Some(3)));
        assert_eq!(f.overlaps[0].held, vec![(2, Some(2))]);
        // Told lost() before the next grant: no overlap.
        holds[1].lost = Some(39);
        assert!(check(&holds, &writes, 1, 0).ok());
        // Told 3 us late: an overlap, unless the margin forgives it.
        holds[1].lost = Some(43);
        assert_eq!(check(&holds, &writes, 1, 0).overlaps.len(), 1);
        assert!(check(&holds, &writes, 1, 3).ok());
    }

    #[test]
    fn a_hold_that_ended_as_it_began_is_still_checked_at_its_start() {
        let (mut holds, writes) = mutex_history();
        // Worker 3 was granted at 40 while worker 2 still believed until 45, and stopped
        // believing at once (paused before its first look).
        holds[1].released = Some(45);
        holds[2].released = Some(40);
        let f = check(&holds, &writes, 1, 0);
        assert_eq!(f.overlaps.len(), 1, "{f:?}");
        assert_eq!(f.overlaps[0].later, (3, Some(3)));
        // And it holds nothing afterwards.
        holds[1].released = Some(40);
        holds.push(hold(4, X, 4, 40, 50));
        assert!(check(&holds, &writes, 1, 0).ok());
    }

    #[test]
    fn a_token_regression_is_found_but_concurrent_grants_are_not_ordered() {
        let (mut holds, writes) = mutex_history();
        holds[2].token = Some(2);
        let f = check(&holds, &writes, 1, 0);
        assert_eq!(f.token_regressions, vec![(2, 2)], "{f:?}");
        // Two acquires under way at once may return in either token order.
        let concurrent = |claim| {
            vec![
                Hold {
                    invoked: 0,
                    ..hold(1, claim, 5, 10, 12)
                },
                Hold {
                    invoked: 0,
                    ..hold(2, claim, 4, 13, 15)
                },
            ]
        };
        let permits = concurrent(Claim::Permits(1));
        assert!(check(&permits, &[], 3, 0).token_regressions.is_empty());
        // Exclusive grants come one at a time: the later grant's lower token is a regression
        // even though both acquires were under way at once.
        let f = check(&concurrent(X), &[], 1, 0);
        assert_eq!(f.token_regressions, vec![(5, 4)], "{f:?}");
    }

    #[test]
    fn a_stale_write_accepted_is_found_and_a_rejected_one_is_fine() {
        let (holds, mut writes) = mutex_history();
        writes.push(write(2, 50, false));
        assert!(check(&holds, &writes, 1, 0).ok());
        writes.push(write(2, 55, true));
        let f = check(&holds, &writes, 1, 0);
        assert_eq!(f.stale_writes_accepted, vec![(3, 2)], "{f:?}");
    }

    #[test]
    fn readers_share_and_a_writer_overlapping_a_reader_is_found() {
        let readers = vec![
            hold(1, Claim::Shared, 1, 10, 30),
            hold(2, Claim::Shared, 1, 15, 35),
        ];
        assert!(check(&readers, &[], 1, 0).ok());
        let mut with_writer = readers.clone();
        with_writer.push(hold(3, X, 2, 32, 40));
        let f = check(&with_writer, &[], 1, 0);
        assert_eq!(f.overlaps.len(), 1, "{f:?}");
        assert_eq!(f.overlaps[0].held, vec![(2, Some(1))]);
    }

    #[test]
    fn a_semaphore_over_its_size_is_found() {
        let p = |w, n, from, to| Hold {
            token: None,
            ..hold(w, Claim::Permits(n), 0, from, to)
        };
        let holds = vec![p(1, 2, 10, 30), p(2, 1, 12, 20), p(3, 1, 20, 40)];
        assert!(check(&holds, &[], 3, 0).ok());
        let mut over = holds.clone();
        over.push(p(4, 1, 25, 28));
        let f = check(&over, &[], 3, 0);
        assert_eq!(f.overlaps.len(), 1, "{f:?}");
        assert_eq!(f.overlaps[0].later.0, 4);
    }

    #[test]
    fn the_history_json_is_what_the_linearizability_checker_reads() {
        let (holds, writes) = mutex_history();
        let mut holds = holds[..1].to_vec();
        holds.push(Hold {
            claim: Claim::Permits(2),
            token: None,
            granted: None,
            released: None,
            freed_by: None,
            ..holds[0].clone()
        });
        let h = History {
            permits: 1,
            holds,
            writes: writes[..1].to_vec(),
        };
        // The same shape as the fixtures of lockkit-faults/porcupine/main_test.go.
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            r#"{"permits":1,"holds":[{"lock":"","worker":1,"claim":{"kind":"exclusive"},"token":1,"invoked":5,"granted":10,"lost":null,"released":20,"freed_by":21},{"lock":"","worker":1,"claim":{"kind":"permits","n":2},"token":null,"invoked":5,"granted":null,"lost":null,"released":null,"freed_by":null}],"writes":[{"lock":"","worker":0,"token":1,"invoked":12,"completed":[14,true]}]}"#
        );
    }

    #[test]
    fn each_lock_of_a_history_is_checked_on_its_own() {
        let (holds, writes) = mutex_history();
        // The same holds and writes on a second lock, at the same times: no overlap across
        // locks, no regression across their tokens.
        let mut all_holds = Vec::new();
        let mut all_writes = Vec::new();
        for lock in ["a", "b"] {
            all_holds.extend(holds.iter().map(|h| Hold {
                lock: lock.into(),
                ..h.clone()
            }));
            all_writes.extend(writes.iter().map(|w| Write {
                lock: lock.into(),
                ..w.clone()
            }));
        }
        assert!(check(&all_holds, &all_writes, 1, 0).ok());
        // One lock's overlap is still found, and named.
        let mut bad = all_holds.clone();
        bad[4].released = Some(45);
        let f = check(&bad, &all_writes, 1, 0);
        assert_eq!(f.overlaps.len(), 1, "{f:?}");
        assert_eq!(f.overlaps[0].lock, "b");
    }

    #[test]
    fn unknown_outcomes_are_counted_not_checked() {
        let (mut holds, mut writes) = mutex_history();
        holds.push(Hold {
            granted: None,
            ..hold(4, X, 9, 22, 24)
        });
        writes.push(Write {
            completed: None,
            ..write(1, 70, true)
        });
        let f = check(&holds, &writes, 1, 0);
        assert!(f.ok(), "{f:?}");
        assert_eq!((f.unknown_acquires, f.unknown_writes), (1, 1));
    }
}
