//! What a lock benchmark measures, once for lockkit's benches and `lockkit bench`.
//!
//! - [`Latencies`]: durations in an HDR histogram (nanoseconds, three significant digits, so
//!   every percentile is within 0.1 % of the recorded value, in memory that does not grow with
//!   the number of samples).
//! - [`process_cpu`]: the CPU time a process (this one, or a server) has used, so a bench can
//!   print what each contestant costs the machine beside what it costs the clock; [`CpuSpan`]
//!   reads it over one run, for a server and this process, as [`CpuCost`]s per operation.
//! - [`Tally`]: one contended run, the latencies of every acquisition plus how many each client
//!   made, summed up as a [`Summary`] (throughput, p50/p99/max wait, the busiest client's share).
//!
//! ```
//! use std::time::Duration;
//! use lockkit_measure::Tally;
//!
//! let mut run = Tally::new(2);
//! run.record(0, Duration::from_millis(1));
//! run.record(1, Duration::from_millis(3));
//! run.record(0, Duration::from_millis(2));
//! let s = run.summary(Duration::from_secs(1));
//! assert_eq!(s.ops, 3);
//! assert!((s.busiest_share - 2.0 / 3.0).abs() < 1e-9);
//! assert!((s.p50.as_secs_f64() - 0.002).abs() < 0.000_01);
//! ```

mod cpu;
mod latencies;
mod tally;

pub use cpu::{process_cpu, CpuCost, CpuSpan};
pub use latencies::Latencies;
pub use tally::{Summary, Tally};
