//! The metrics a scripted sequence leaves behind (acquire, contend, lose, force-unlock,
//! release), read from a recording recorder, on `mem://`.

use std::collections::HashMap;
use std::time::Duration;

use lockkit_core::telemetry::names;
use lockkit_core::{AcquireOptions, Locks};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;

/// What the recorder saw: counters and gauges as they are now, histogram samples summed over
/// every look (a snapshot hands each sample out once). Keys: kind, name and the labels other
/// than `backend=mem` and `primitive=mutex` (which every metric here must carry).
struct Seen {
    s: Snapshotter,
    samples: HashMap<(String, Vec<(String, String)>), usize>,
}

impl Seen {
    fn look(&mut self, kind: MetricKind, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut found = 0.0;
        for (k, _, _, v) in self.s.snapshot().into_vec() {
            let key = k.key();
            let mut rest: Vec<(String, String)> = Vec::new();
            let (mut backend, mut primitive) = (false, false);
            for l in key.labels() {
                match (l.key(), l.value()) {
                    ("backend", "mem") => backend = true,
                    ("primitive", "mutex") => primitive = true,
                    (k, v) => rest.push((k.to_string(), v.to_string())),
                }
            }
            if !(backend && primitive) {
                continue;
            }
            rest.sort();
            if let DebugValue::Histogram(h) = &v {
                *self
                    .samples
                    .entry((key.name().to_string(), rest.clone()))
                    .or_default() += h.len();
            }
            let mut want = want.clone();
            want.sort();
            if k.kind() == kind && key.name() == name && rest == want {
                found = match v {
                    DebugValue::Counter(n) => n as f64,
                    DebugValue::Gauge(g) => g.into_inner(),
                    DebugValue::Histogram(_) => 0.0,
                };
            }
        }
        if kind == MetricKind::Histogram {
            let mut want = want;
            want.sort();
            return *self.samples.get(&(name.to_string(), want)).unwrap_or(&0) as f64;
        }
        found
    }

    fn counter(&mut self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.look(MetricKind::Counter, name, labels)
    }

    fn gauge(&mut self, name: &str) -> f64 {
        self.look(MetricKind::Gauge, name, &[])
    }

    fn gauge_with(&mut self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.look(MetricKind::Gauge, name, labels)
    }

    fn samples(&mut self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.look(MetricKind::Histogram, name, labels)
    }
}

#[tokio::test]
async fn a_scripted_sequence_leaves_these_metrics() {
    let recorder = DebuggingRecorder::new();
    let mut seen = Seen {
        s: recorder.snapshotter(),
        samples: HashMap::new(),
    };
    recorder.install().unwrap();
    let locks = Locks::memory();
    let m = locks.mutex("metrics/a").unwrap();

    let g = m.lock().await.unwrap();
    assert_eq!(seen.gauge(names::HELD), 1.0);
    assert_eq!(seen.gauge(names::WAITING), 0.0);
    assert_eq!(
        seen.samples(names::ACQUIRE_DURATION, &[("outcome", "acquired")]),
        1.0
    );

    // Contended: the try finds it held.
    assert!(m.try_lock().await.unwrap().is_none());
    assert_eq!(
        seen.samples(names::ACQUIRE_DURATION, &[("outcome", "timed_out")]),
        1.0
    );

    // Lost: a fixed lease runs out.
    let short = locks
        .mutex("metrics/b")
        .unwrap()
        .acquire(&AcquireOptions::new().fixed_lease(Duration::from_millis(150)))
        .await
        .unwrap()
        .unwrap();
    short.lost().await;
    assert_eq!(
        seen.counter(names::LOST, &[("reason", "lease_expired")]),
        1.0
    );

    // Force-unlocked: an audit count, and its holder learns of it.
    let c = locks.mutex("metrics/c").unwrap();
    let held_c = c.lock().await.unwrap();
    assert!(c.force_unlock().await.unwrap());
    assert_eq!(seen.counter(names::FORCE_UNLOCKS, &[]), 1.0);
    held_c.lost().await;
    assert_eq!(seen.counter(names::LOST, &[("reason", "deleted")]), 1.0);
    let _ = held_c.release().await;

    // A blocked waiter counts in lockkit_waiting until it gets the lock.
    let holding = locks.mutex("metrics/w").unwrap().lock().await.unwrap();
    let w = locks.mutex("metrics/w").unwrap();
    let waiter = tokio::spawn(async move { w.lock().await });
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while seen.gauge(names::WAITING) != 1.0 {
        assert!(
            std::time::Instant::now() < end,
            "the waiter was never counted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    holding.release().await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(seen.gauge(names::WAITING), 0.0);
    got.release().await.unwrap();

    g.release().await.unwrap();
    let _ = short.release().await;
    assert_eq!(seen.gauge(names::HELD), 0.0);
    assert_eq!(seen.samples(names::HOLD_DURATION, &[]), 5.0);
    assert_eq!(seen.counter(names::RELEASE_ERRORS, &[]), 0.0);

    // The opt-in lock label.
    lockkit_core::telemetry::label_lock_names(true);
    let d = locks.mutex("metrics/d").unwrap().lock().await.unwrap();
    assert_eq!(
        seen.samples(
            names::ACQUIRE_DURATION,
            &[("outcome", "acquired"), ("lock", "metrics/d")]
        ),
        1.0
    );
    assert_eq!(seen.gauge_with(names::HELD, &[("lock", "metrics/d")]), 1.0);
    d.release().await.unwrap();
    lockkit_core::telemetry::label_lock_names(false);
    assert_eq!(seen.gauge_with(names::HELD, &[("lock", "metrics/d")]), 0.0);
}
