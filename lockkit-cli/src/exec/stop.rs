//! When `exec` stops its command: before the lock can be anyone else's.
//!
//! The guard's deadline (lockkit's `LeaseClock`: the last acquire's or renewal's send time plus
//! the lease, minus a margin) is the earliest moment, as this process sees it, at which the
//! server may end the lease; another holder can have the lock a moment later. The guard reads
//! Lost at that deadline, which is too late to start stopping the command, so the command is
//! stopped ahead of it: SIGTERM `--kill-after` + [`Stop::lead`] before the deadline, SIGKILL
//! `lead` before it (or `--kill-after` after the SIGTERM, if that comes first).
//!
//! A fixed lease's deadline does not move: the command gets its SIGTERM `--kill-after` + `lead`
//! before the lease ends. A watchdog lease's deadline moves on with every renewal, and can be
//! near while all is well (on Redis a hand-off's first expiry is short, and renewed from the
//! moment the waiter takes it up), so its command gets SIGTERM only once the lock is at risk:
//! the guard no longer reads Held (a renewal failed, the connection is down) and the deadline
//! is `--kill-after` + `lead` away or nearer. If the guard reads Held until the deadline's
//! SIGKILL time (a renewal still under way), SIGTERM and SIGKILL go out together then.
//! `--kill-after` is at most a third of the lease ([`Stop::new`] refuses more): renewals come
//! at least every third of the lease, so a healthy watchdog lease never gets that near.
//!
//! A lock lost before its deadline (force-unlock, an expired session) has the SIGTERM sent at
//! once, and the SIGKILL `--kill-after` later (or at the deadline's SIGKILL time, if that comes
//! first).

use std::time::Duration;

use crate::duration::human;

/// `--kill-after` when not given, unless a third of the lease is shorter.
pub(super) const DEFAULT_KILL_AFTER: Duration = Duration::from_secs(10);

/// SIGKILL's head start on the deadline (a tenth of the lease if that is shorter): time for
/// the supervisor to wake up and kill the group before the deadline.
const LEAD: Duration = Duration::from_millis(100);

/// The command's stop times, relative to the guard's deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stop {
    /// Between SIGTERM and SIGKILL.
    pub(super) kill_after: Duration,
    /// How long before the deadline SIGKILL goes out.
    pub(super) lead: Duration,
}

impl Stop {
    /// The stop times for a lease of `lease` and the `--kill-after` given, if any: that one,
    /// if it is at most a third of the lease (an error saying so if not); else
    /// [`DEFAULT_KILL_AFTER`] or a third of the lease, whichever is shorter.
    pub(super) fn new(kill_after: Option<Duration>, lease: Duration) -> Result<Self, String> {
        let most = lease / 3;
        let kill_after = match kill_after {
            None => DEFAULT_KILL_AFTER.min(most),
            Some(k) if k <= most => k,
            Some(k) => {
                return Err(format!(
                    "--kill-after {} does not fit a lease of {}: the command gets SIGTERM \
                     --kill-after before the lease's deadline and SIGKILL by it, so \
                     --kill-after is at most a third of the lease ({}); give a longer --lease \
                     or --fixed-lease, or a shorter --kill-after",
                    human(k),
                    human(lease),
                    human(most),
                ))
            }
        };
        Ok(Stop {
            kill_after,
            lead: (lease / 10).min(LEAD),
        })
    }

    /// How long from now SIGTERM is due, with `left` before the deadline: `--kill-after` before
    /// the SIGKILL time when the lock is `at_risk` (a fixed lease, or a watchdog lease whose
    /// guard no longer reads Held), else at the SIGKILL time.
    pub(super) fn term_in(&self, left: Duration, at_risk: bool) -> Duration {
        let kill_in = left.saturating_sub(self.lead);
        if at_risk {
            kill_in.saturating_sub(self.kill_after)
        } else {
            kill_in
        }
    }

    /// How long from now SIGKILL is due, `since_term` after the SIGTERM and with `left` before
    /// the deadline (`None`: no deadline, as on `file://` with a watchdog lease).
    pub(super) fn kill_in(&self, left: Option<Duration>, since_term: Duration) -> Duration {
        let after_term = self.kill_after.saturating_sub(since_term);
        match left {
            Some(left) => after_term.min(left.saturating_sub(self.lead)),
            None => after_term,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn kill_after_fits_a_third_of_the_lease() {
        // (--kill-after, lease) -> kill_after, or refused.
        let table: &[(Option<Duration>, Duration, Option<Duration>)] = &[
            (None, ms(30_000), Some(ms(10_000))),
            (None, ms(60_000), Some(ms(10_000))),
            (None, ms(3_000), Some(ms(1_000))),
            (None, ms(300), Some(ms(100))),
            (Some(ms(10_000)), ms(30_000), Some(ms(10_000))),
            (Some(ms(20_000)), ms(60_000), Some(ms(20_000))),
            (Some(ms(0)), ms(100), Some(ms(0))),
            (Some(ms(500)), ms(2_000), Some(ms(500))),
            (Some(ms(10_000)), ms(2_000), None),
            (Some(ms(10_001)), ms(30_000), None),
            (Some(ms(667)), ms(2_000), None),
        ];
        for (given, lease, want) in table {
            let got = Stop::new(*given, *lease);
            assert_eq!(
                got.as_ref().ok().map(|s| s.kill_after),
                *want,
                "{given:?} {lease:?}"
            );
            if let Err(e) = got {
                assert!(e.contains("at most a third of the lease"), "{e}");
            }
        }
        assert_eq!(Stop::new(None, ms(30_000)).unwrap().lead, ms(100));
        assert_eq!(Stop::new(None, ms(500)).unwrap().lead, ms(50));
        assert_eq!(
            Stop::new(None, ms(2_000)).unwrap().kill_after,
            ms(2_000) / 3
        );
    }

    #[test]
    fn sigterm_leaves_kill_after_before_the_sigkill_and_the_deadline() {
        let s = Stop::new(Some(ms(500)), ms(2_000)).unwrap();
        assert_eq!(s.term_in(ms(1_960), true), ms(1_360));
        assert_eq!(s.term_in(ms(600), true), ms(0));
        assert_eq!(s.term_in(ms(0), true), ms(0));
        // A watchdog lease whose guard reads Held: not before the SIGKILL time.
        assert_eq!(s.term_in(ms(1_960), false), ms(1_860));
        assert_eq!(s.term_in(ms(600), false), ms(500));
        assert_eq!(s.term_in(ms(100), false), ms(0));
        // SIGTERM on time: SIGKILL --kill-after later, which is `lead` before the deadline.
        assert_eq!(s.kill_in(Some(ms(600)), ms(0)), ms(500));
        assert_eq!(s.kill_in(Some(ms(100)), ms(500)), ms(0));
        // SIGTERM late (the deadline moved earlier): SIGKILL still by the deadline.
        assert_eq!(s.kill_in(Some(ms(300)), ms(0)), ms(200));
        assert_eq!(s.kill_in(Some(ms(0)), ms(0)), ms(0));
        // No deadline (a lock lost to force-unlock on file://): --kill-after after SIGTERM.
        assert_eq!(s.kill_in(None, ms(0)), ms(500));
        assert_eq!(s.kill_in(None, ms(200)), ms(300));
        assert_eq!(s.kill_in(None, ms(900)), ms(0));
        // A deadline far off (lost early): --kill-after after SIGTERM.
        assert_eq!(s.kill_in(Some(ms(60_000)), ms(100)), ms(400));
    }
}
