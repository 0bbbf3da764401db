//! `Backoff`: the one retry schedule every retry loop in lockkit uses.
//!
//! Exponential with jitter ("equal jitter": each pause is half the current step plus a random
//! part of the other half), so that after a failover the clients of one server do not retry in
//! lockstep.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// A retry schedule: the first pause, the growth factor and the longest pause.
///
/// ```
/// use std::time::Duration;
/// let mut retry = lockkit_core::Backoff::new(Duration::from_millis(10), Duration::from_secs(1)).start();
/// let first = retry.next_pause();
/// assert!(first >= Duration::from_millis(5) && first <= Duration::from_millis(10));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    factor: u32,
}

impl Default for Backoff {
    /// 20 ms, doubling, at most 2 s.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(20), Duration::from_secs(2))
    }
}

/// The schedules lockkit retries on, one per kind of retry: every retry loop of the core and
/// of the backends takes one of these (bounded by its own deadline or attempt count).
impl Backoff {
    /// One request whose connection dropped or timed out, tried again while the caller's
    /// budget lasts (a release, a create, asking the Sentinels for the primary): 25 ms to 200 ms.
    pub const REQUEST: Backoff = Backoff::new(ms(25), ms(200));

    /// The attempts of a queued waiter that failed (its heartbeat, the holder's lease end and
    /// hand-off messages pace it otherwise): 50 ms to 400 ms.
    pub const WAITER: Backoff = Backoff::new(ms(50), ms(400));

    /// Setting a watch or a subscription up again, or creating a directory, after a failure:
    /// 50 ms to 1 s.
    pub const WATCH: Backoff = Backoff::new(ms(50), ms(1_000));

    /// Keeping a session or lease alive, or opening a new one: 100 ms to 5 s (a keep-alive
    /// caps it to fit its lease with [`Backoff::capped`]).
    pub const SESSION: Backoff = Backoff::new(ms(100), ms(5_000));

    /// Cleanup in the reaper: 50 ms to 2 s.
    pub const CLEANUP: Backoff = Backoff::new(ms(50), ms(2_000));

    /// An acquirer that polls a lock with no queue that grants it (Redlock, whose masters share
    /// nothing): tries again after a random pause of 5 to 10 ms, growing to 100 to 200 ms, so
    /// that contenders spread out instead of colliding on every master. (Redlock's first waiter
    /// hears of a release at once on pub/sub; the pauses keep the others' places and find a
    /// lock freed without a word.)
    pub const POLL: Backoff = Backoff::new(ms(10), ms(200));

    /// Starts at `initial` and doubles up to `max`.
    pub const fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            factor: 2,
        }
    }

    /// Grows by `factor` (at least 1) instead of doubling.
    pub const fn with_factor(mut self, factor: u32) -> Self {
        self.factor = if factor == 0 { 1 } else { factor };
        self
    }

    /// The same schedule with pauses of at most `max` (and a first pause no longer).
    pub const fn capped(mut self, max: Duration) -> Self {
        if max.as_nanos() < self.max.as_nanos() {
            self.max = max;
        }
        self
    }

    /// The longest pause.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// A fresh sequence of pauses.
    pub fn start(&self) -> Retry {
        Retry {
            schedule: *self,
            step: self.initial.min(self.max),
            attempts: 0,
        }
    }
}

/// How long [`Backoff::retry`] keeps trying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// No pause that would end at or after this instant.
    Until(Instant),
    /// At most this many tries after the first.
    Retries(u32),
}

impl Backoff {
    /// Runs `op` until it succeeds, fails with an error that `transient` does not accept, or
    /// the budget is spent, pausing on this schedule between tries; returns the last answer.
    /// The one loop for a request that is simply sent again (a backend's protocol decides
    /// which requests may be, and `transient` which failures say so); each retry is traced at
    /// debug level with the failure it follows.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use lockkit_core::{Backoff, Budget};
    /// let mut tries = 0;
    /// let r: Result<(), &str> = Backoff::REQUEST
    ///     .retry(Budget::Retries(2), |_| true, || {
    ///         tries += 1;
    ///         async { Err("connection reset") }
    ///     })
    ///     .await;
    /// assert_eq!((r, tries), (Err("connection reset"), 3));
    /// # }
    /// ```
    pub async fn retry<T, E, F, Fut>(
        &self,
        budget: Budget,
        transient: impl Fn(&E) -> bool,
        mut op: F,
    ) -> std::result::Result<T, E>
    where
        E: std::fmt::Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let mut pauses = self.start();
        loop {
            let e = match op().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if !transient(&e) {
                return Err(e);
            }
            let pause = pauses.next_pause();
            let more = match budget {
                Budget::Until(end) => Instant::now() + pause < end,
                Budget::Retries(n) => pauses.attempts() <= n,
            };
            if !more {
                return Err(e);
            }
            tracing::debug!(error = %e, ?pause, "lockkit: a transient failure, trying again");
            tokio::time::sleep(pause).await;
        }
    }
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One sequence of pauses from a [`Backoff`].
#[derive(Clone, Debug)]
pub struct Retry {
    schedule: Backoff,
    step: Duration,
    attempts: u32,
}

impl Retry {
    /// The next pause, jittered within the upper half of the current step.
    pub fn next_pause(&mut self) -> Duration {
        let step = self.step;
        self.step = step
            .saturating_mul(self.schedule.factor)
            .min(self.schedule.max);
        self.attempts = self.attempts.saturating_add(1);
        let half = step / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let extra = if nanos == 0 {
            0
        } else {
            rand::thread_rng().gen_range(0..=nanos)
        };
        half + Duration::from_nanos(extra)
    }

    /// Sleeps for the next pause.
    pub async fn wait(&mut self) {
        let pause = self.next_pause();
        tokio::time::sleep(pause).await;
    }

    /// How many pauses were taken so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Starts the sequence over (after a success).
    pub fn reset(&mut self) {
        self.step = self.schedule.initial.min(self.schedule.max);
        self.attempts = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_with_jitter_in_the_upper_half() {
        let ms = Duration::from_millis;
        let mut r = Backoff::new(ms(10), ms(80)).start();
        for step in [10, 20, 40, 80, 80, 80] {
            let p = r.next_pause();
            assert!(p >= ms(step) / 2 && p <= ms(step), "{p:?} for step {step}");
        }
        assert_eq!(r.attempts(), 6);
        r.reset();
        assert!(r.next_pause() <= ms(10));
    }

    #[tokio::test(start_paused = true)]
    async fn retry_stops_at_success_a_lasting_error_or_the_budget() {
        use std::cell::Cell;
        let tries = Cell::new(0);
        let flaky = || {
            tries.set(tries.get() + 1);
            let n = tries.get();
            async move {
                match n {
                    1 | 2 => Err("dropped"),
                    _ => Ok(n),
                }
            }
        };
        let r = Backoff::REQUEST
            .retry(Budget::Retries(5), |_| true, flaky)
            .await;
        assert_eq!(r, Ok(3));

        tries.set(0);
        let r = Backoff::REQUEST
            .retry(Budget::Retries(5), |e| *e != "dropped", flaky)
            .await;
        assert_eq!(
            (r, tries.get()),
            (Err("dropped"), 1),
            "a lasting error ends it"
        );

        tries.set(0);
        let r = Backoff::REQUEST
            .retry(Budget::Retries(1), |_| true, flaky)
            .await;
        assert_eq!(
            (r, tries.get()),
            (Err("dropped"), 2),
            "one retry, then the error"
        );

        // No pause ends past the deadline: the tries stop before it.
        let start = Instant::now();
        let end = start + Duration::from_millis(500);
        tries.set(0);
        let never = || {
            tries.set(tries.get() + 1);
            async { Err::<(), _>("down") }
        };
        let r = Backoff::REQUEST
            .retry(Budget::Until(end), |_| true, never)
            .await;
        assert_eq!(r, Err("down"));
        assert!(Instant::now() < end, "slept past the deadline");
        assert!(tries.get() >= 3, "{} tries in 500 ms", tries.get());
    }

    #[test]
    fn pauses_differ_between_clients() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let pauses: std::collections::HashSet<Duration> =
            (0..20).map(|_| b.start().next_pause()).collect();
        assert!(pauses.len() > 1, "no jitter");
    }
}
