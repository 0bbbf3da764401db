//! What the per-backend benches share.
//!
//! Every bench that says `mod common;` compiles all of it and uses only its part (the contended
//! runs are the Redis benches'), so what one bench leaves unused is not dead code.
#![allow(dead_code)]

pub mod contended;
pub mod rslock_peer;

use std::future::Future;
use std::time::Duration;

use lockkit_measure::Latencies;

/// Whether to run a smoke-sized pass: `cargo bench` passes `--bench`; `cargo test --benches`
/// passes nothing.
pub fn quick() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// Runs `bench` on a runtime of two workers, in a spawned task: on the runtime's workers like a
/// service's handlers (the main thread's `block_on` would add a cross-thread wake-up to every
/// reply).
pub fn run_on_workers(bench: impl Future<Output = ()> + Send + 'static) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(rt.spawn(bench)).unwrap();
}

/// The PID of the server `name` (`redis`, `etcd`, `zk`) that `scripts/services.sh` started in
/// `LOCKKIT_SERVICES_STATE`, if it serves the first host of `url` (its command line, or the
/// `zoo.cfg` it names, says so), for reading the server's CPU; `None` otherwise (the bench then
/// leaves that out). Redis is told by its process title (`redis-server 127.0.0.1:PORT`), which a
/// server with `set-proc-title no` does not show.
pub fn server_pid(name: &str, url: &str, backend: &lockkit::BackendInfo) -> Option<u32> {
    let port = lockkit::ServerUrl::parse_for(url, backend)
        .ok()?
        .hosts
        .first()?
        .port;
    let dir = std::env::var("LOCKKIT_SERVICES_STATE").ok()?;
    let pid: u32 = std::fs::read_to_string(format!("{dir}/{name}.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).ok()?;
    let serves = |text: &str| {
        text.ends_with(&format!(":{port}"))
            || text
                .lines()
                .any(|l| l.trim() == format!("clientPort={port}"))
    };
    let args: Vec<&str> = cmdline.split('\0').collect();
    let ours = args.iter().any(|a| serves(a))
        || args
            .iter()
            .filter(|a| a.ends_with(".cfg"))
            .any(|cfg| std::fs::read_to_string(cfg).is_ok_and(|t| serves(&t)));
    ours.then_some(pid)
}

/// The counts of contending clients to sweep, from `LOCKKIT_BENCH_CLIENTS` (a comma-separated
/// list, default `8`; the sweep is `1,8,64,256`).
pub fn client_counts() -> Vec<usize> {
    std::env::var("LOCKKIT_BENCH_CLIENTS")
        .unwrap_or_else(|_| "8".into())
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .expect("LOCKKIT_BENCH_CLIENTS: counts like 1,8,64")
        })
        .collect()
}

/// How long a bench runs: from `LOCKKIT_BENCH_ROUNDS`, `LOCKKIT_BENCH_CYCLES`,
/// `LOCKKIT_BENCH_TOTAL`, `LOCKKIT_BENCH_CONTENDED_ROUNDS` and `LOCKKIT_BENCH_WORK_TOTAL`, each
/// the bench's own default when unset; smoke-sized (1, 50, 100, 1, 50) in a [`quick`] pass.
pub struct Lengths {
    /// Uncontended rounds.
    pub rounds: usize,
    /// Uncontended cycles of each kind per round.
    pub cycles: usize,
    /// Contended acquisitions per round with nothing done under the lock.
    pub total: usize,
    /// Contended rounds.
    pub contended_rounds: usize,
    /// Contended acquisitions per round with work under the lock.
    pub work_total: usize,
}

impl Lengths {
    /// Reads the lengths; `defaults` are the bench's.
    pub fn read(defaults: Lengths) -> Lengths {
        if quick() {
            return Lengths {
                rounds: 1,
                cycles: 50,
                total: 100,
                contended_rounds: 1,
                work_total: 50,
            };
        }
        Lengths {
            rounds: env_num("LOCKKIT_BENCH_ROUNDS", defaults.rounds),
            cycles: env_num("LOCKKIT_BENCH_CYCLES", defaults.cycles),
            total: env_num("LOCKKIT_BENCH_TOTAL", defaults.total),
            contended_rounds: env_num("LOCKKIT_BENCH_CONTENDED_ROUNDS", defaults.contended_rounds),
            work_total: env_num("LOCKKIT_BENCH_WORK_TOTAL", defaults.work_total),
        }
    }
}

/// The number in the environment variable `key`, or `default` when it is unset or not a number.
fn env_num(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `d` in microseconds.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Prints the columns of an uncontended table and a row a kind of cycle (labels `label_width`
/// wide): p50, p99 and mean in microseconds, cycles per second.
pub fn latency_table(label_width: usize, rows: &[(&str, &Latencies)]) {
    println!(
        "{:<label_width$} {:>9} {:>9} {:>9} {:>10}",
        "", "p50 µs", "p99 µs", "mean µs", "cycles/s"
    );
    for (label, v) in rows {
        let mean = us(v.mean());
        println!(
            "{label:<label_width$} {:>9.1} {:>9.1} {:>9.1} {:>10.0}",
            us(v.quantile(0.5)),
            us(v.quantile(0.99)),
            mean,
            1e6 / mean
        );
    }
}

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}
