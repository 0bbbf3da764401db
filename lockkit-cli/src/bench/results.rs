//! What a bench run measured: its rows and the whole report.

use serde::Serialize;

/// One result row: one scenario on one backend.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) backend: String,
    pub(crate) url: String,
    pub(crate) scenario: String,
    pub(crate) clients: usize,
    pub(crate) ops: u64,
    /// `ok`, `unsupported`, `n/a` (no raw floor for this URL) or `error`.
    pub(crate) status: String,
    pub(crate) note: Option<String>,
    pub(crate) elapsed_ms: f64,
    pub(crate) ops_per_sec: f64,
    pub(crate) p50_wait_us: f64,
    pub(crate) p99_wait_us: f64,
    pub(crate) max_wait_us: f64,
    /// The busiest client's share of the ops (1/clients is perfectly even).
    pub(crate) busiest_share: Option<f64>,
    pub(crate) violations: u64,
    /// Wait-latency histogram: bucket `i` counts waits in [2^i, 2^(i+1)) µs (bucket 0 also those
    /// under 1 µs), up to the last non-empty bucket.
    pub(crate) histogram: Vec<u64>,
}

impl Row {
    pub(crate) fn empty(backend: &str, url: &str, scenario: &str, status: &str) -> Self {
        Row {
            backend: backend.into(),
            url: url.into(),
            scenario: scenario.into(),
            clients: 0,
            ops: 0,
            status: status.into(),
            note: None,
            elapsed_ms: 0.0,
            ops_per_sec: 0.0,
            p50_wait_us: 0.0,
            p99_wait_us: 0.0,
            max_wait_us: 0.0,
            busiest_share: None,
            violations: 0,
            histogram: Vec::new(),
        }
    }

    pub(crate) fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// The whole run, as printed by `--json`.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// The client counts of the multi-client scenarios, in the order run.
    pub(crate) clients: Vec<usize>,
    pub(crate) ops: u64,
    pub(crate) hold_us: u64,
    pub(crate) rows: Vec<Row>,
}
