//! `LeaseClock`: the local deadline of a lease, on the monotonic clock.
//!
//! A lease is granted (or renewed) by a request sent at `sent_at`; the server starts counting
//! when it receives the request, so it cannot end the lease before `sent_at + lease` (by its
//! clock). The clock keeps `sent_at + lease - margin`, the margin covering clock-rate
//! differences between machines and a replica's wall clock. Every guard's state is derived from
//! its clock: once the deadline passes the guard reads `Lost`, whether or not the backend's
//! renewal task ran (a starved runtime, a paused process).
//!
//! One clock can be shared by many guards: every lock of an etcd or ZooKeeper session lives and
//! dies with the session's lease.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::reason::LostReason;
use crate::signal::Signal;

/// The local deadline of one lease (or one session). Backends renew it; guards read it.
#[derive(Debug)]
pub struct LeaseClock {
    deadline: Signal<Option<Instant>>,
    /// What a guard that outlives the deadline has lost its lock to.
    expiry: LostReason,
    /// The longest lease a grant or renewal of this clock asked for (ms).
    longest: AtomicU64,
}

impl LeaseClock {
    /// A clock with no deadline yet (`expiry`: the reason reported when one passes).
    pub fn new(expiry: LostReason) -> Arc<Self> {
        Arc::new(LeaseClock {
            deadline: Signal::new(None),
            expiry,
            longest: AtomicU64::new(0),
        })
    }

    /// A lease of `lease` granted by a request sent at `sent_at`.
    pub fn starting(sent_at: Instant, lease: Duration) -> Arc<Self> {
        let clock = LeaseClock::new(LostReason::LeaseExpired);
        clock.renewed(sent_at, lease);
        clock
    }

    /// The lease was granted or renewed for `lease` by a request sent at `sent_at`: the deadline
    /// becomes `sent_at + lease - margin`, shorter or longer than before.
    pub fn renewed(&self, sent_at: Instant, lease: Duration) {
        self.asked(lease);
        self.set_deadline(Some(sent_at + lease.saturating_sub(margin(lease))));
    }

    fn asked(&self, lease: Duration) {
        let ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        self.longest.fetch_max(ms, Ordering::Relaxed);
    }

    /// How long from now the lease may still live on the server, for a cleanup that must be
    /// tried until it is certainly moot: a renewal or extend whose answer was lost may have
    /// been applied just now, for the longest lease this clock was asked for, so that lease
    /// and its margin, or what is left of the deadline where that is longer.
    pub fn server_bound(&self) -> Duration {
        let longest = Duration::from_millis(self.longest.load(Ordering::Relaxed));
        (longest + margin(longest)).max(self.remaining().unwrap_or_default())
    }

    /// A renewal for `lease` sent at `sent_at` may or may not have been applied (its answer was
    /// lost): the deadline becomes the earlier of the current one and the renewal's.
    pub fn maybe_renewed(&self, sent_at: Instant, lease: Duration) {
        self.asked(lease);
        let theirs = sent_at + lease.saturating_sub(margin(lease));
        self.deadline.send_if_modified(|d| match *d {
            Some(ours) if ours > theirs => {
                *d = Some(theirs);
                true
            }
            // Earlier already, or no deadline at all (a lease that lives with its holder).
            _ => false,
        });
    }

    /// Sets the deadline outright (`None`: none, the lease lives as long as its holder).
    pub fn set_deadline(&self, at: Option<Instant>) {
        self.deadline.send_if_modified(|d| {
            let changed = *d != at;
            *d = at;
            changed
        });
    }

    /// The deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline.get()
    }

    /// Whether the deadline has passed at `now`.
    pub fn has_passed(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|d| d <= now)
    }

    /// The time left before the deadline (`None`: no deadline).
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline()
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The reason a guard reports when this clock's deadline passes.
    pub fn expiry_reason(&self) -> LostReason {
        self.expiry
    }

    /// Resolves once the deadline has passed, following every change of it; never while there
    /// is none.
    pub async fn passed(&self) {
        loop {
            let (at, seen) = self.deadline.seen();
            match at {
                Some(at) if at <= Instant::now() => return,
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = self.deadline.changed(seen) => {}
                    }
                }
                None => self.deadline.changed(seen).await,
            }
        }
    }

    /// The deadline and its version, for [`deadline_changed`](Self::deadline_changed).
    pub(crate) fn deadline_seen(&self) -> (Option<Instant>, u64) {
        self.deadline.seen()
    }

    /// Resolves once the deadline changed since version `seen`.
    pub(crate) async fn deadline_changed(&self, seen: u64) {
        self.deadline.changed(seen).await
    }
}

/// The part of a lease a guard gives up to clock differences: 2 % (at most 500 ms, but never
/// less than Redlock's 1 %) plus 2 ms.
pub fn margin(lease: Duration) -> Duration {
    (lease / 50)
        .min(Duration::from_millis(500))
        .max(lease / 100)
        + Duration::from_millis(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn deadline_follows_renewals_shorter_or_longer() {
        let now = Instant::now();
        let c = LeaseClock::starting(now, Duration::from_secs(60));
        assert!(c.deadline().unwrap() > now + Duration::from_secs(58));
        c.renewed(now, Duration::from_secs(2));
        let d = c.deadline().unwrap();
        assert!(d < now + Duration::from_secs(2) && d > now + Duration::from_millis(1900));
        let passed = c.passed();
        tokio::time::timeout(Duration::from_secs(3), passed)
            .await
            .unwrap();
        assert!(c.has_passed(Instant::now()));
    }

    #[test]
    fn a_renewal_of_unknown_outcome_keeps_the_earlier_deadline() {
        let now = Instant::now();
        let c = LeaseClock::starting(now, Duration::from_secs(60));
        let long = c.deadline().unwrap();
        c.maybe_renewed(now, Duration::from_secs(120));
        assert_eq!(
            c.deadline(),
            Some(long),
            "a longer lease may not have been applied"
        );
        c.maybe_renewed(now, Duration::from_secs(2));
        let short = c.deadline().unwrap();
        assert!(
            short < now + Duration::from_secs(2),
            "a shorter one may have been"
        );
        // The server may keep it for the longer lease all the same.
        assert!(c.server_bound() >= Duration::from_secs(120));
    }
}
