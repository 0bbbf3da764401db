//! Durations in an HDR histogram.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Three significant digits: any percentile is within 0.1 % of a recorded value.
const SIGNIFICANT_DIGITS: u8 = 3;

/// Recorded durations (nanoseconds, three significant digits; the histogram grows to the
/// largest value recorded, so a minute-long wait is kept as exactly as a microsecond one).
#[derive(Clone, Debug)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Latencies {
    /// No durations yet.
    pub fn new() -> Self {
        // Only an out-of-range digit count fails: 3 is in range.
        let h = Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits");
        Latencies(h)
    }

    /// Records one duration (a duration past `u64::MAX` nanoseconds, some 584 years, is kept
    /// as that).
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // The histogram grows to take any value up to `u64::MAX / 2`; past that, it saturates.
        if self.0.record(ns).is_err() {
            self.0.saturating_record(ns);
        }
    }

    /// Adds every duration `other` recorded.
    pub fn add(&mut self, other: &Latencies) {
        // Both histograms resize themselves, so adding cannot run out of range.
        let _ = self.0.add(&other.0);
    }

    /// How many durations were recorded.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The duration at quantile `q` (0.5 is the median; clamped to `0..=1`), zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.is_empty() {
            return Duration::ZERO;
        }
        let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
        Duration::from_nanos(self.0.value_at_quantile(q))
    }

    /// The mean duration, zero when empty.
    pub fn mean(&self) -> Duration {
        Duration::from_nanos(self.0.mean().round() as u64)
    }

    /// The longest duration recorded (to three significant digits), zero when empty.
    pub fn max(&self) -> Duration {
        if self.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.0.max())
    }

    /// Counts per power-of-two bucket of microseconds: bucket `i` holds the durations in
    /// `[2^i, 2^(i+1))` µs (bucket 0 also those under 1 µs). Ends at the last non-empty
    /// bucket; empty when nothing was recorded.
    pub fn log2_us_buckets(&self) -> Vec<u64> {
        let mut out: Vec<u64> = Vec::new();
        for v in self.0.iter_recorded() {
            let us = (v.value_iterated_to() / 1000).max(1);
            let b = (63 - us.leading_zeros()) as usize;
            if out.len() <= b {
                out.resize(b + 1, 0);
            }
            out[b] += v.count_at_value();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn close(a: Duration, b: Duration) -> bool {
        (a.as_secs_f64() - b.as_secs_f64()).abs() <= b.as_secs_f64() * 0.001 + 1e-9
    }

    #[test]
    fn empty_is_zero() {
        let l = Latencies::new();
        assert!(l.is_empty());
        assert_eq!(l.quantile(0.5), Duration::ZERO);
        assert_eq!(l.quantile(0.99), Duration::ZERO);
        assert_eq!(l.mean(), Duration::ZERO);
        assert_eq!(l.max(), Duration::ZERO);
        assert!(l.log2_us_buckets().is_empty());
    }

    #[test]
    fn quantiles_within_a_tenth_of_a_percent() {
        let mut l = Latencies::new();
        for i in 1..=1000 {
            l.record(Duration::from_micros(i));
        }
        assert_eq!(l.count(), 1000);
        assert!(close(l.quantile(0.5), Duration::from_micros(500)));
        assert!(close(l.quantile(0.99), Duration::from_micros(990)));
        assert!(close(l.max(), Duration::from_micros(1000)));
        assert!(close(l.mean(), Duration::from_nanos(500_500)));
        // Out-of-range quantiles are clamped.
        assert_eq!(l.quantile(2.0), l.quantile(1.0));
        assert_eq!(l.quantile(-1.0), l.quantile(0.0));
    }

    #[test]
    fn wide_range_and_add() {
        let mut a = Latencies::new();
        a.record(Duration::from_nanos(20));
        a.record(Duration::from_secs(90));
        let mut b = Latencies::new();
        b.record(ms(5));
        a.add(&b);
        assert_eq!(a.count(), 3);
        assert!(close(a.quantile(0.5), ms(5)));
        assert!(close(a.max(), Duration::from_secs(90)));
        assert_eq!(a.quantile(0.0), Duration::from_nanos(20));
        // Absurd durations are kept, not lost.
        a.record(Duration::MAX);
        assert_eq!(a.count(), 4);
    }

    #[test]
    fn log2_buckets() {
        let mut l = Latencies::new();
        l.record(Duration::from_nanos(300)); // under 1 µs: bucket 0
        l.record(Duration::from_micros(1)); // bucket 0
        l.record(Duration::from_micros(3)); // [2, 4): bucket 1
        l.record(Duration::from_micros(1500)); // [1024, 2048): bucket 10
        let b = l.log2_us_buckets();
        assert_eq!(b.len(), 11);
        assert_eq!(b[0], 2);
        assert_eq!(b[1], 1);
        assert_eq!(b[10], 1);
        assert_eq!(b.iter().sum::<u64>(), 4);
    }
}
