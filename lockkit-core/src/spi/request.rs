//! `Request`: one acquire as the core hands it to a backend, with every option resolved.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::options::{AcquireOptions, Lease, Wait};

/// One acquire, resolved by the core: the lease is concrete (the handle's default filled in),
/// the wait budget is a deadline taken once, and the options were checked against the
/// backend's capabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    lease: Lease,
    fair: bool,
    deadline: Option<Instant>,
    waits: bool,
}

impl Request {
    /// Resolves `opts` against the handle's `default_lease`, starting the wait budget now.
    pub fn new(opts: &AcquireOptions, default_lease: Duration) -> Self {
        let now = Instant::now();
        let (deadline, waits) = match opts.wait {
            Wait::None => (Some(now), false),
            // A budget too long for the clock (`Duration::MAX`) is no budget, not a panic.
            Wait::For(d) => (now.checked_add(d), true),
            Wait::Forever => (None, true),
        };
        Request {
            lease: opts.lease.unwrap_or(Lease::Watchdog(default_lease)),
            fair: opts.fair,
            deadline,
            waits,
        }
    }

    /// The lease to take.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// Whether the acquire asked for fair (FIFO) order.
    pub fn fair(&self) -> bool {
        self.fair
    }

    /// When the wait budget runs out (`None`: never). A request that may not wait has a
    /// deadline of its start.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the acquire may wait for a busy lock at all.
    pub fn waits(&self) -> bool {
        self.waits
    }

    /// Whether the wait budget has run out.
    pub fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| d <= Instant::now())
    }

    /// `at`, or the deadline if that comes first: when a wait that may end early at `at` must
    /// end at the latest.
    pub fn bound(&self, at: Instant) -> Instant {
        self.deadline.map_or(at, |d| d.min(at))
    }

    /// Runs `fut` until the deadline: its output, or `None` when the deadline came first.
    pub async fn within<F: Future>(&self, fut: F) -> Option<F::Output> {
        match self.deadline {
            None => Some(fut.await),
            Some(at) => tokio::time::timeout_at(at, fut).await.ok(),
        }
    }

    /// The budget left (`None`: forever).
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_too_long_for_the_clock_waits_forever() {
        let r = Request::new(
            &AcquireOptions::new().wait(Duration::MAX),
            Duration::from_secs(30),
        );
        assert!(r.waits());
        assert_eq!(r.deadline(), None);
        assert_eq!(r.remaining(), None);
    }
}
