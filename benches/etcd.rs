//! etcd benchmark: lockkit against the raw floor and against Go's `concurrency.Mutex`, in the
//! same run on the same server.
//!
//! ```text
//! eval "$(scripts/services.sh up)"
//! cargo bench --bench etcd --features etcd
//! ```
//!
//! Measures (1) the uncontended lock + unlock cycle (p50) of lockkit, of the raw floor (one
//! transaction put-if-absent + one delete) and of Go's Mutex; (2) clients contending on one lock,
//! each with its own connection and session: acquisitions per second, p50/p99 wait (from the
//! acquire call to the guard) and the busiest client's share, at each count of
//! `LOCKKIT_BENCH_CLIENTS` (a comma-separated list, default `8`; the issue's sweep is
//! `1,8,64,256`). The Go side is `interop/go-etcd` in `bench` mode (built with `go build`; set
//! `LOCKKIT_BENCH_NO_GO=1` to skip it). The etcd URL comes from `LOCKKIT_TEST_ETCD_URL`
//! (default `etcd://127.0.0.1:12379`). Sizes: `LOCKKIT_BENCH_CYCLES` (default 300) and
//! `LOCKKIT_BENCH_ACQUISITIONS` (default 400 for lockkit and Go alike). When the server is the
//! one `scripts/services.sh` started (`LOCKKIT_SERVICES_STATE`), each contended row also gives
//! the server's CPU per acquisition over its clock (from `/proc`, in hundredths of a second: use
//! enough acquisitions), and each gives its clients' process's: on this 2-core machine, shared
//! by the server and the clients, their sum is what bounds a side's rate.

mod common;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lockkit_etcd::etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use lockkit_measure::{Latencies, Tally};

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

#[derive(Debug, Default, Clone, Copy)]
struct Contended {
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    busiest: f64,
    /// The etcd server's CPU per acquisition, in microseconds, when it could be read.
    server_us: Option<f64>,
    /// The clients' CPU per acquisition (their process's), in microseconds.
    client_us: Option<f64>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Side {
    uncontended_us: f64,
    contended: Contended,
}

fn main() {
    let url =
        std::env::var("LOCKKIT_TEST_ETCD_URL").unwrap_or_else(|_| "etcd://127.0.0.1:12379".into());
    let cycles = env_usize("LOCKKIT_BENCH_CYCLES", 300);
    let acquisitions = env_usize("LOCKKIT_BENCH_ACQUISITIONS", 400);
    let sweep = common::client_counts();
    let server = common::server_pid("etcd", &url, &lockkit::etcd::INFO);
    let run = format!(
        "lkbench-{:x}",
        std::process::id() as u64 * 7919 + now_nanos() % 100_000
    );
    // The uncontended cycle runs on a current-thread runtime (for the raw floor and lockkit
    // alike): on this 2-core machine, shared with the etcd server, cross-thread wake-ups cost a
    // measurable share of a ~1 ms cycle. The 8 contending clients run on a 2-worker runtime.
    // `LOCKKIT_BENCH_RUNTIME=multi` runs everything on the 2-worker runtime.
    let multi_only = std::env::var("LOCKKIT_BENCH_RUNTIME").is_ok_and(|v| v == "multi");
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let single = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rt1 = if multi_only { &multi } else { &single };
    let raw = rt1.block_on(raw_floor(&url, &run, cycles));
    let uncontended = rt1.block_on(lockkit_uncontended(&url, &run, cycles));
    let no_go = std::env::var("LOCKKIT_BENCH_NO_GO").is_ok();
    let go_bin = if no_go { None } else { build_go() };
    let mut rows = Vec::new();
    for (i, &clients) in sweep.iter().enumerate() {
        let lk = multi.block_on(lockkit_contended(&url, &run, clients, acquisitions, server));
        // The Go side measures its uncontended cycle on the first count only.
        let go = go_bin.as_ref().map(|bin| {
            let cycles = if i == 0 { cycles } else { 1 };
            go_side(bin, &url, &run, (clients, cycles, acquisitions), server)
        });
        rows.push((clients, lk, go));
    }

    println!();
    println!(
        "etcd benchmark ({url}), uncontended on a {} tokio runtime, contending clients on a 2-worker one, {acquisitions} acquisitions",
        if multi_only { "2-worker" } else { "current-thread" }
    );
    println!("uncontended cycle p50:   raw floor {:8.0} us", raw);
    println!("                         lockkit   {:8.0} us", uncontended);
    if let Some(Some(go)) = rows.first().map(|r| r.2) {
        println!(
            "                         Go Mutex  {:8.0} us",
            go.uncontended_us
        );
        println!(
            "ratios: uncontended lockkit/Go = {:.2}, lockkit/raw = {:.2}",
            uncontended / go.uncontended_us,
            uncontended / raw
        );
    }
    let row = |who: &str, clients: usize, c: Contended| {
        let cpu = |who: &str, us: Option<f64>| {
            us.map(|us| format!("   {who} CPU {us:5.0} us/acq"))
                .unwrap_or_default()
        };
        let server = cpu("server", c.server_us) + &cpu("clients", c.client_us);
        println!(
            "contended {clients:4} {who:8}  {:7.1} acq/s   wait p50 {:7.2} ms   p99 {:7.2} ms   busiest {:4.1} %{server}",
            c.per_sec,
            c.p50_ms,
            c.p99_ms,
            c.busiest * 100.0
        )
    };
    for (clients, lk, go) in &rows {
        row("lockkit", *clients, *lk);
        if let Some(go) = go {
            row("Go", *clients, go.contended);
            println!(
                "ratio at {clients} clients: contended throughput lockkit/Go = {:.2}x",
                lk.per_sec / go.contended.per_sec
            );
        }
    }
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn endpoints(url: &str) -> Vec<String> {
    let u = lockkit::ServerUrl::parse_for(url, &lockkit::etcd::INFO).expect("etcd URL");
    u.hosts.iter().map(|h| h.to_string()).collect()
}

/// One transaction put-if-absent plus one delete, the least any etcd lock can do.
async fn raw_floor(url: &str, run: &str, cycles: usize) -> f64 {
    let mut c = Client::connect(endpoints(url), None).await.unwrap();
    let key = format!("{run}/raw/k");
    let mut lat = Latencies::new();
    for _ in 0..cycles {
        let t = Instant::now();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), "", None)]);
        assert!(c.txn(txn).await.unwrap().succeeded());
        c.delete(key.clone(), None).await.unwrap();
        lat.record(t.elapsed());
    }
    lat.quantile(0.5).as_secs_f64() * 1e6
}

async fn lockkit_uncontended(url: &str, run: &str, cycles: usize) -> f64 {
    let locks = lockkit::connect(url).await.unwrap();
    let m = locks.mutex(&format!("{run}/uncontended")).unwrap();
    // Warm up: session lease and the name's watch.
    m.lock().await.unwrap().release().await.unwrap();
    let mut lat = Latencies::new();
    for _ in 0..cycles {
        let t = Instant::now();
        let g = m.lock().await.unwrap();
        g.release().await.unwrap();
        lat.record(t.elapsed());
    }
    locks.close().await.unwrap();
    lat.quantile(0.5).as_secs_f64() * 1e6
}

async fn lockkit_contended(
    url: &str,
    run: &str,
    n: usize,
    acquisitions: usize,
    server: Option<u32>,
) -> Contended {
    let name = format!("{run}/contended{n}");
    let mut clients = Vec::new();
    for _ in 0..n {
        let locks = lockkit::connect(url).await.unwrap();
        let m = locks.mutex(&name).unwrap();
        // Warm up each client (session + watch) outside the measurement.
        m.lock().await.unwrap().release().await.unwrap();
        clients.push((locks, m));
    }
    let left = Arc::new(std::sync::atomic::AtomicI64::new(acquisitions as i64));
    let tally = Arc::new(Mutex::new(Tally::new(n)));
    let cpu = lockkit_measure::CpuSpan::start(server);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, (_, m)) in clients.iter().enumerate() {
        let (m, left, tally) = (m.clone(), left.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            while left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) > 0 {
                let t = Instant::now();
                let g = m.lock().await.unwrap();
                let w = t.elapsed();
                g.release().await.unwrap();
                tally.lock().unwrap().record(i, w);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let run = tally.lock().unwrap().summary(start.elapsed());
    let per_acq = |c: lockkit_measure::CpuCost| c.per_op_us();
    let (server_us, client_us) = cpu.end(acquisitions);
    let (server_us, client_us) = (server_us.map(per_acq), client_us.map(per_acq));
    for (locks, _) in clients {
        locks.close().await.unwrap();
    }
    Contended {
        per_sec: run.per_sec,
        p50_ms: run.p50.as_secs_f64() * 1e3,
        p99_ms: run.p99.as_secs_f64() * 1e3,
        busiest: run.busiest_share,
        server_us,
        client_us,
    }
}

/// Builds `interop/go-etcd`; `None` (with a note) when Go is missing.
fn build_go() -> Option<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("target").join("go-etcd-peer");
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(root.join("interop/go-etcd"))
        .status();
    match built {
        Ok(s) if s.success() => Some(bin),
        other => {
            eprintln!("skipping the Go side: `go build` failed or go is missing ({other:?})");
            None
        }
    }
}

/// Runs the Go peer in bench mode with `clients` contending clients (and `cycles` uncontended
/// ones first); it reads the `server`'s CPU over its contended clock.
fn go_side(
    bin: &std::path::Path,
    url: &str,
    run: &str,
    (clients, cycles, acquisitions): (usize, usize, usize),
    server: Option<u32>,
) -> Side {
    let out = Command::new(bin)
        .args(["bench", "-endpoints", &endpoints(url).join(",")])
        .args(["-server-pid", &server.unwrap_or(0).to_string()])
        .args(["-prefix", &format!("{run}/go{clients}")])
        .args(["-clients", &clients.to_string()])
        .args(["-acquisitions", &acquisitions.to_string()])
        .args(["-cycles", &cycles.to_string()])
        .output()
        .expect("run go-etcd-peer");
    assert!(out.status.success(), "go bench failed: {out:?}");
    let line = String::from_utf8_lossy(&out.stdout).to_string();
    let num = |k: &str| -> f64 {
        let at = line.find(&format!("\"{k}\":")).expect(k) + k.len() + 3;
        let rest = &line[at..];
        let end = rest.find([',', '}']).unwrap();
        rest[..end].parse().unwrap()
    };
    Side {
        uncontended_us: num("uncontended_p50_us"),
        contended: Contended {
            per_sec: num("contended_per_sec"),
            p50_ms: num("wait_p50_ms"),
            p99_ms: num("wait_p99_ms"),
            busiest: num("busiest_share"),
            server_us: Some(num("server_cpu_us")).filter(|us| *us >= 0.0),
            client_us: Some(num("client_cpu_us")),
        },
    }
}
