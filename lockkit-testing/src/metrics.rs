//! A process-wide recording `metrics` recorder, so that a case can check what the metrics of a
//! scripted sequence read on every backend.
//!
//! A recorder local to a thread would miss what the backends' tasks emit on the runtime's other
//! workers, so this one is global, installed once per test binary. Cases of one binary run in
//! parallel and share it: [`install`] turns on the `lock` label
//! ([`label_lock_names`](lockkit_core::telemetry::label_lock_names)), and a case reads only the
//! series of its own (randomly named) locks. Renewals and reconnects have no `lock` label: only
//! their growth can be checked.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;

/// A metric series: kind, name, labels (sorted).
type Series = (MetricKind, String, Vec<(String, String)>);

struct Recorded {
    snapshotter: Snapshotter,
    /// Counters and gauges as they are now; for histograms, every sample seen so far (a
    /// snapshot hands each sample out once, and cases of the binary share the recorder).
    values: Mutex<BTreeMap<Series, f64>>,
}

static RECORDED: OnceLock<Option<Recorded>> = OnceLock::new();

fn recorded() -> Option<&'static Recorded> {
    RECORDED
        .get_or_init(|| {
            let recorder = DebuggingRecorder::new();
            let snapshotter = recorder.snapshotter();
            ::metrics::set_global_recorder(recorder).ok()?;
            lockkit_core::telemetry::label_lock_names(true);
            Some(Recorded {
                snapshotter,
                values: Mutex::default(),
            })
        })
        .as_ref()
}

/// Installs the recording recorder for the whole process (once) and labels per-lock metrics
/// with the lock's name from now on; `false` if another recorder was there first.
pub fn install() -> bool {
    recorded().is_some()
}

/// The metrics as they read now (empty before [`install`]).
pub fn read() -> Seen {
    let Some(r) = recorded() else {
        return Seen::default();
    };
    let mut values = r.values.lock().unwrap_or_else(|e| e.into_inner());
    for (key, _, _, value) in r.snapshotter.snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_string(), l.value().to_string()))
            .collect();
        labels.sort();
        let series = (kind, key.name().to_string(), labels);
        match value {
            DebugValue::Counter(n) => {
                values.insert(series, n as f64);
            }
            DebugValue::Gauge(g) => {
                values.insert(series, g.into_inner());
            }
            DebugValue::Histogram(h) => *values.entry(series).or_default() += h.len() as f64,
        }
    }
    Seen(values.clone())
}

/// Polls the metrics until `ok` holds, failing with `what` (and what was seen) after 10 s.
pub async fn until(what: &str, ok: impl Fn(&Seen) -> bool) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let seen = read();
        if ok(&seen) {
            return;
        }
        assert!(std::time::Instant::now() < end, "{what}: {seen:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// One reading of the metrics.
#[derive(Clone, Debug, Default)]
pub struct Seen(BTreeMap<Series, f64>);

impl Seen {
    /// The sum over the series of `kind` named `name` that carry every label of `labels`.
    fn sum(&self, kind: MetricKind, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|((k, n, have), _)| {
                *k == kind
                    && n == name
                    && labels
                        .iter()
                        .all(|(lk, lv)| have.iter().any(|(k, v)| k == lk && v == lv))
            })
            .map(|(_, v)| *v)
            .sum()
    }

    /// A counter (summed over the matching series).
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.sum(MetricKind::Counter, name, labels)
    }

    /// A gauge (summed over the matching series).
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.sum(MetricKind::Gauge, name, labels)
    }

    /// How many samples a histogram has had (summed over the matching series).
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.sum(MetricKind::Histogram, name, labels)
    }

    /// Every series of `name` with its value, for failure messages.
    pub fn series(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|((_, n, _), _)| n == name)
            .map(|((_, n, labels), v)| format!("{n}{labels:?} = {v}"))
            .collect()
    }
}
