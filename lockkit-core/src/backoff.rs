//! `Backoff`: the one retry schedule every retry loop in lockkit uses.
//!
//! Exponential with jitter ("equal jitter": each pause is half the current step plus a random
//! part of the other half), so that after a failover the clients of one server do not retry in
//! lockstep.

use std::time::Duration;

use rand::Rng;

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

impl Backoff {
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

    #[test]
    fn pauses_differ_between_clients() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let pauses: std::collections::HashSet<Duration> =
            (0..20).map(|_| b.start().next_pause()).collect();
        assert!(pauses.len() > 1, "no jitter");
    }
}
