//! One contended run: every acquisition's wait, and how many each client made.

use std::time::Duration;

use crate::Latencies;

/// The waits of one run and each client's count of acquisitions.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    waits: Latencies,
    per_client: Vec<u64>,
}

/// What one run comes to.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Acquisitions made.
    pub ops: u64,
    /// Acquisitions per second of the run's elapsed time.
    pub per_sec: f64,
    /// The median wait.
    pub p50: Duration,
    /// The 99th-percentile wait.
    pub p99: Duration,
    /// The longest wait.
    pub max: Duration,
    /// The mean wait.
    pub mean: Duration,
    /// The busiest client's share of the acquisitions (`1 / clients` is perfectly even), zero
    /// when there were none.
    pub busiest_share: f64,
}

impl Tally {
    /// A run of `clients` clients, numbered from 0.
    pub fn new(clients: usize) -> Self {
        Tally {
            waits: Latencies::new(),
            per_client: vec![0; clients],
        }
    }

    /// Client `client` acquired after waiting `wait` (a client past the count given to
    /// [`Tally::new`] is added).
    pub fn record(&mut self, client: usize, wait: Duration) {
        if self.per_client.len() <= client {
            self.per_client.resize(client + 1, 0);
        }
        self.per_client[client] += 1;
        self.waits.record(wait);
    }

    /// Adds another round of the same clients.
    pub fn add(&mut self, other: &Tally) {
        self.waits.add(&other.waits);
        if self.per_client.len() < other.per_client.len() {
            self.per_client.resize(other.per_client.len(), 0);
        }
        for (mine, theirs) in self.per_client.iter_mut().zip(&other.per_client) {
            *mine += theirs;
        }
    }

    /// Every wait recorded.
    pub fn waits(&self) -> &Latencies {
        &self.waits
    }

    /// Acquisitions made, by every client.
    pub fn ops(&self) -> u64 {
        self.per_client.iter().sum()
    }

    /// The busiest client's share of the acquisitions, zero when there were none.
    pub fn busiest_share(&self) -> f64 {
        let total = self.ops();
        if total == 0 {
            return 0.0;
        }
        let busiest = self.per_client.iter().copied().max().unwrap_or(0);
        busiest as f64 / total as f64
    }

    /// What the run comes to, given how long it took.
    pub fn summary(&self, elapsed: Duration) -> Summary {
        let ops = self.ops();
        Summary {
            ops,
            per_sec: ops as f64 / elapsed.as_secs_f64().max(1e-9),
            p50: self.waits.quantile(0.5),
            p99: self.waits.quantile(0.99),
            max: self.waits.max(),
            mean: self.waits.mean(),
            busiest_share: self.busiest_share(),
        }
    }
}

impl From<Latencies> for Tally {
    /// A run of one client, which made every acquisition in `waits`.
    fn from(waits: Latencies) -> Self {
        let per_client = vec![waits.count()];
        Tally { waits, per_client }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_and_rounds() {
        let mut a = Tally::new(3);
        for _ in 0..6 {
            a.record(0, Duration::from_millis(1));
        }
        a.record(1, Duration::from_millis(1));
        a.record(2, Duration::from_millis(1));
        assert_eq!(a.ops(), 8);
        assert!((a.busiest_share() - 0.75).abs() < 1e-9);
        let mut b = Tally::new(3);
        for _ in 0..6 {
            b.record(1, Duration::from_millis(1));
        }
        b.record(4, Duration::from_millis(1));
        a.add(&b);
        assert_eq!(a.ops(), 15);
        assert_eq!(a.waits().count(), 15);
        // Clients 0 and 1 made 6 and 7.
        assert!((a.busiest_share() - 7.0 / 15.0).abs() < 1e-9);
        let s = a.summary(Duration::from_millis(1500));
        assert_eq!(s.ops, 15);
        assert!((s.per_sec - 10.0).abs() < 1e-9);
    }

    #[test]
    fn one_client() {
        let mut l = Latencies::new();
        l.record(Duration::from_millis(2));
        l.record(Duration::from_millis(4));
        let t = Tally::from(l);
        assert_eq!(t.ops(), 2);
        assert_eq!(t.busiest_share(), 1.0);
    }

    #[test]
    fn empty_run() {
        let s = Tally::new(4).summary(Duration::ZERO);
        assert_eq!(s.ops, 0);
        assert_eq!(s.per_sec, 0.0);
        assert_eq!(s.busiest_share, 0.0);
        assert_eq!(s.p99, Duration::ZERO);
    }
}
