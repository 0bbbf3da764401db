//! One clock for every process: `CLOCK_MONOTONIC` in microseconds.
//!
//! On Linux `CLOCK_MONOTONIC` is one system-wide clock, so readings taken in the coordinator and
//! in every worker process compare directly. Unlike the wall clock it never jumps (NTP only slews
//! it), and it keeps running while a process is stopped with SIGSTOP, which is what a pause fault
//! needs.

use std::time::Duration;

use rustix::time::{clock_gettime, ClockId};

/// Microseconds on the shared monotonic clock.
pub type Micros = u64;

/// Now, in microseconds on `CLOCK_MONOTONIC`.
pub fn now() -> Micros {
    let ts = clock_gettime(ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// A duration in microseconds.
pub fn micros(d: Duration) -> Micros {
    d.as_micros() as Micros
}

/// How long until `at` (zero if it passed).
pub fn until(at: Micros) -> Duration {
    Duration::from_micros(at.saturating_sub(now()))
}
