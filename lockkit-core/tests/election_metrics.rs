//! The election metrics (issue 27): campaigns won, the term of the last one, and the changes
//! observers saw, read from a recording recorder, on `mem://`. Campaigns are acquires of
//! primitive `election` (their durations and holds are in the acquire metrics, see
//! `metrics.rs`).

use lockkit_core::telemetry::names;
use lockkit_core::Locks;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// The value of metric `name` labelled `backend=mem, primitive=election` (0 when absent).
fn value(s: &Snapshotter, name: &str) -> f64 {
    for (k, _, _, v) in s.snapshot().into_vec() {
        let key = k.key();
        let ours = key
            .labels()
            .any(|l| l.key() == "primitive" && l.value() == "election")
            && key
                .labels()
                .any(|l| l.key() == "backend" && l.value() == "mem");
        if ours && key.name() == name {
            return match v {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(h) => h.len() as f64,
            };
        }
    }
    0.0
}

#[tokio::test]
async fn campaigns_terms_and_observed_changes_are_counted() {
    let recorder = DebuggingRecorder::new();
    let s = recorder.snapshotter();
    recorder.install().unwrap();
    let locks = Locks::memory();
    let e = locks.election("metrics/e").unwrap();
    let mut changes = e.observe().await.unwrap();
    assert_eq!(changes.next().await.unwrap().unwrap(), None);

    let lead = e.campaign("a").await.unwrap();
    assert_eq!(value(&s, names::LEADERSHIPS), 1.0);
    assert_eq!(value(&s, names::LEADER_TERM), lead.term().0 as f64);
    assert!(changes.next().await.unwrap().unwrap().is_some());
    assert!(lead.resign().await.unwrap());
    assert_eq!(changes.next().await.unwrap().unwrap(), None);
    // The first state is no change; the leader and its resignation are two.
    assert_eq!(value(&s, names::LEADER_CHANGES), 2.0);

    let next = e.campaign("b").await.unwrap();
    assert_eq!(value(&s, names::LEADERSHIPS), 2.0);
    assert_eq!(value(&s, names::LEADER_TERM), next.term().0 as f64);
}
