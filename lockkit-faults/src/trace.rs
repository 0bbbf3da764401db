//! An opt-in trace of a worker's lock calls, for chasing a failed run.
//!
//! With `LOCKKIT_FAULTS_TRACE` set to a level (`debug`, `trace`, ...), a worker writes lockkit's
//! events at that level to its stderr (the run's `worker-N.log`), each stamped with the shared
//! monotonic clock in microseconds, the clock of the run's `log.jsonl`.

use std::fmt;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

/// Stamps events with [`crate::clock::now`].
struct Monotonic;

impl FormatTime for Monotonic {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        write!(w, "{}", crate::clock::now())
    }
}

/// Installs the trace if `LOCKKIT_FAULTS_TRACE` names a level; does nothing otherwise.
pub fn install() {
    let Some(level) = std::env::var("LOCKKIT_FAULTS_TRACE")
        .ok()
        .and_then(|l| l.parse::<tracing_subscriber::filter::LevelFilter>().ok())
    else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_timer(Monotonic)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
