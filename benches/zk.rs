//! ZooKeeper benchmark: lockkit against the raw floor and against Apache Curator, on the same
//! server in the same run.
//!
//! ```text
//! eval "$(scripts/services.sh up)"
//! cargo bench --features zk --bench zk
//! ```
//!
//! * uncontended: one client, acquire + release (awaited) in a loop, against the raw floor
//!   (create ephemeral-sequential + getChildren + delete, one after the other, on one session)
//!   and Curator's `InterProcessMutex` (`interop/curator`, `bench-uncontended`);
//! * contended: `LOCKKIT_BENCH_CLIENTS` clients (a comma-separated list, default `8`; the issue's
//!   sweep is `1,8,64,256`), each its own session, take one lock `LOCKKIT_BENCH_TOTAL` (2000)
//!   times in all: throughput, p50/p99 wait, the busiest client's share, and how many rounds of
//!   C consecutive acquisitions were served to C different clients (1.0 = perfect FIFO), against
//!   Curator's `bench-contended` with as many clients, and the lockkit/Curator ratio per count.
//!
//! A contended run's clock stops at its last counted grant, on both sides. When the server is the
//! one `scripts/services.sh` started (`LOCKKIT_SERVICES_STATE`), each contended row also gives
//! the server's CPU per acquisition (from `/proc`), and each its clients' process's (Curator's
//! includes the JVM's own threads): on this 2-core machine, shared by the server and the
//! clients, their sum is what bounds a side's rate.
//!
//! Each measurement runs twice, alternating lockkit and Curator, and the mean is reported.
//! `LOCKKIT_BENCH_SECS` (default 4) sets the uncontended run length. The Curator side is built
//! with Maven on first use; without java/mvn it is skipped.

mod common;

use std::process::Command;
use std::sync::OnceLock;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lockkit_core::{LockConfig, Locks};
use lockkit_measure::Tally;
use lockkit_zk::zookeeper_client as zk;

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

async fn raw_floor(url: &str, secs: f64) -> f64 {
    let b = lockkit_zk::connect_zk(&LockConfig::new(url)).await.unwrap();
    let client = b.zk_client().unwrap();
    let dir = format!("{}-raw", b.mutex_path("bench"));
    client
        .mkdir(
            &dir,
            &zk::CreateMode::Container.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let opts = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let prefix = format!("{dir}/n-");
    let cycle = || async {
        let (_, seq) = client.create(&prefix, b"", &opts).await.unwrap();
        client.list_children(&dir).await.unwrap();
        client
            .delete(&format!("{prefix}{seq}"), None)
            .await
            .unwrap();
    };
    for _ in 0..200 {
        cycle().await;
    }
    let (start, mut n) = (Instant::now(), 0u64);
    while start.elapsed().as_secs_f64() < secs {
        cycle().await;
        n += 1;
    }
    let _ = client.delete(&dir, None).await;
    n as f64 / start.elapsed().as_secs_f64()
}

async fn lockkit_uncontended(url: &str, secs: f64) -> f64 {
    let locks = lockkit_zk::connect(&LockConfig::new(url)).await.unwrap();
    let lock = locks.mutex("bench/uncontended").unwrap();
    for _ in 0..200 {
        lock.lock().await.unwrap().release().await.unwrap();
    }
    let (start, mut n) = (Instant::now(), 0u64);
    while start.elapsed().as_secs_f64() < secs {
        lock.lock().await.unwrap().release().await.unwrap();
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

#[derive(Debug, Default, Clone, Copy)]
struct Contended {
    ops: f64,
    p50: f64,
    p99: f64,
    busiest: f64,
    fifo: f64,
    /// The server's CPU per acquisition, microseconds (NaN when it could not be read).
    server_us: f64,
    /// The clients' process's CPU per acquisition, microseconds.
    client_us: f64,
}

impl Contended {
    fn mean(a: Contended, b: Contended) -> Contended {
        Contended {
            ops: (a.ops + b.ops) / 2.0,
            p50: (a.p50 + b.p50) / 2.0,
            p99: (a.p99 + b.p99) / 2.0,
            busiest: (a.busiest + b.busiest) / 2.0,
            fifo: (a.fifo + b.fifo) / 2.0,
            server_us: (a.server_us + b.server_us) / 2.0,
            client_us: (a.client_us + b.client_us) / 2.0,
        }
    }
}

async fn lockkit_contended(
    url: &str,
    (total, count): (usize, usize),
    round: usize,
    server: Option<u32>,
) -> Contended {
    let mut clients: Vec<Locks> = Vec::new();
    for _ in 0..count {
        clients.push(lockkit_zk::connect(&LockConfig::new(url)).await.unwrap());
    }
    let name = format!("bench/contended-{count}-{round}");
    let remaining = Arc::new(std::sync::atomic::AtomicIsize::new(total as isize));
    let order = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let tally = Arc::new(Mutex::new(Tally::new(count)));
    // When the last counted acquisition was granted: the clock stops there, not when every
    // client has made its one uncounted acquisition more.
    let done = Arc::new(OnceLock::new());
    let cpu = lockkit_measure::CpuSpan::start(server);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (id, locks) in clients.iter().enumerate() {
        let lock = locks.mutex(&name).unwrap();
        let (remaining, order, tally) = (remaining.clone(), order.clone(), tally.clone());
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let t0 = Instant::now();
                let g = lock.lock().await.unwrap();
                let waited = t0.elapsed();
                let nth = remaining.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                if nth == 1 {
                    let _ = done.set(Instant::now());
                }
                let more = nth > 0;
                if more {
                    tally.lock().unwrap().record(id, waited);
                    order.lock().unwrap().push(id);
                }
                g.release().await.unwrap();
                if !more {
                    return;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // CPU counts until the last client stopped, and so do the grants (each client's one
    // uncounted acquisition too).
    let grants = total + count;
    let per_grant = |c: Option<lockkit_measure::CpuCost>| c.map_or(f64::NAN, |c| c.per_op_us());
    let (server_us, client_us) = cpu.end(grants);
    let (server_us, client_us) = (per_grant(server_us), per_grant(client_us));
    let end = done.get().copied().unwrap_or_else(Instant::now);
    let run = tally.lock().unwrap().summary(end - start);
    let order = order.lock().unwrap().clone();
    let (mut rounds, mut fair) = (0, 0);
    for chunk in order.chunks_exact(count) {
        rounds += 1;
        let mut seen = vec![false; count];
        chunk.iter().for_each(|&i| seen[i] = true);
        if seen.iter().all(|&s| s) {
            fair += 1;
        }
    }
    Contended {
        ops: run.per_sec,
        p50: run.p50.as_secs_f64() * 1e3,
        p99: run.p99.as_secs_f64() * 1e3,
        busiest: run.busiest_share,
        fifo: fair as f64 / rounds.max(1) as f64,
        server_us,
        client_us,
    }
}

/// The Curator side: builds interop/curator on first use. `None` when java or mvn is missing.
fn curator(args: &[&str]) -> Option<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/curator");
    let modified = |p: &str| {
        std::fs::metadata(dir.join(p))
            .and_then(|m| m.modified())
            .ok()
    };
    let stale = match (
        modified("src/main/java/lockkit/interop/Main.java"),
        modified("target/classes/lockkit/interop/Main.class"),
    ) {
        (Some(source), Some(class)) => source > class,
        _ => true,
    };
    if stale || !dir.join("target/dependency").exists() {
        let built = Command::new("mvn")
            .args([
                "-q",
                "-B",
                "-Dstyle.color=never",
                "package",
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
            ])
            .current_dir(&dir)
            .status()
            .ok()?;
        if !built.success() {
            return None;
        }
    }
    let out = Command::new("java")
        .args([
            "-cp",
            "target/classes:target/dependency/*",
            "lockkit.interop.Main",
        ])
        .args(args)
        .current_dir(&dir)
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "curator bench failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn field(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

fn main() {
    let url = std::env::var("LOCKKIT_BENCH_ZK_URL")
        .or_else(|_| std::env::var("LOCKKIT_TEST_ZK_URL"))
        .unwrap_or_else(|_| "zk://127.0.0.1:12181".into());
    let secs: f64 = env_or("LOCKKIT_BENCH_SECS", "4").parse().unwrap();
    let total: usize = env_or("LOCKKIT_BENCH_TOTAL", "2000").parse().unwrap();
    let hosts = url
        .trim_start_matches("zk://")
        .split(['/', '?'])
        .next()
        .unwrap()
        .to_string();
    let run = format!(
        "{:08x}",
        std::process::id() ^ (Instant::now().elapsed().subsec_nanos())
    );
    let url = format!(
        "{url}{}prefix=lockkit-bench-{run}",
        if url.contains('?') { '&' } else { '?' }
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if rt
        .block_on(lockkit_zk::connect(&LockConfig::new(url.clone())))
        .is_err()
    {
        eprintln!("zk bench: no ZooKeeper at {url}; start one with scripts/services.sh up");
        return;
    }
    println!("zk bench on {hosts} (uncontended {secs} s per run, contended {total} acquisitions, 2 runs each)");

    let raw = rt.block_on(raw_floor(&url, secs));
    let mut lk_u = Vec::new();
    let mut cu_u = Vec::new();
    for round in 0..2 {
        lk_u.push(rt.block_on(lockkit_uncontended(&url, secs)));
        let path = format!("/lockkit-bench-{run}/curator-u{round}");
        if let Some(out) = curator(&["bench-uncontended", &hosts, &path, &secs.to_string()]) {
            cu_u.push(field(&out, "ops_per_sec"));
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (lk_u, cu_u) = (mean(&lk_u), mean(&cu_u));
    println!("\nuncontended acquire + release (awaited), one client:");
    println!("  raw floor (create-seq + getChildren + delete): {raw:8.1} cycles/s");
    println!(
        "  lockkit zk mutex:                              {lk_u:8.1} ops/s  ({:.2}x raw floor)",
        lk_u / raw
    );
    if cu_u > 0.0 {
        println!("  Curator InterProcessMutex:                     {cu_u:8.1} ops/s");
        println!(
            "  lockkit / Curator:                             {:8.2}x  (target >= 1.15x)",
            lk_u / cu_u
        );
    }

    // The server's PID, for its CPU per acquisition, when it is the one scripts/services.sh
    // started.
    let server = common::server_pid("zk", &url, &lockkit::zk::INFO);
    for count in common::client_counts() {
        let mut lk_c = Vec::new();
        let mut cu_c = Vec::new();
        for round in 0..2 {
            let size = (total, count);
            lk_c.push(rt.block_on(lockkit_contended(&url, size, round, server)));
            let path = format!("/lockkit-bench-{run}/curator-c{count}-{round}");
            if let Some(out) = curator(&[
                "bench-contended",
                &hosts,
                &path,
                &count.to_string(),
                &total.to_string(),
                &server.unwrap_or(0).to_string(),
            ]) {
                let server_us = Some(field(&out, "server_cpu_us"))
                    .filter(|us| *us >= 0.0)
                    .unwrap_or(f64::NAN);
                cu_c.push(Contended {
                    ops: field(&out, "ops_per_sec"),
                    p50: field(&out, "p50_ms"),
                    p99: field(&out, "p99_ms"),
                    busiest: field(&out, "busiest_share"),
                    fifo: field(&out, "fifo_rounds"),
                    server_us,
                    client_us: field(&out, "client_cpu_us"),
                });
            }
        }
        let lk = Contended::mean(lk_c[0], lk_c[1]);
        println!("\ncontended, {count} clients (sessions), {total} acquisitions:");
        let show = |who: &str, c: &Contended| {
            let mut cpu = format!("  clients CPU {:5.0} us/acq", c.client_us);
            if !c.server_us.is_nan() {
                cpu = format!("  server CPU {:5.0} us/acq{cpu}", c.server_us);
            }
            println!(
                "  {who:<26} {:8.1} acq/s  p50 wait {:6.2} ms  p99 wait {:6.2} ms  busiest {:5.1}%  FIFO rounds {:5.1}%{cpu}",
                c.ops, c.p50, c.p99, c.busiest * 100.0, c.fifo * 100.0
            )
        };
        show("lockkit zk mutex:", &lk);
        if cu_c.len() == 2 {
            let cu = Contended::mean(cu_c[0], cu_c[1]);
            show("Curator InterProcessMutex:", &cu);
            println!(
                "  lockkit / Curator at {count} clients: {:8.2}x  (target >= 2x)",
                lk.ops / cu.ops
            );
        }
    }
    // The Curator paths live under /lockkit-bench-<run>; remove what is left of them.
    rt.block_on(async {
        if let Ok(b) = lockkit_zk::connect_zk(&LockConfig::new(url.clone())).await {
            if let Ok(client) = b.zk_client() {
                let base = format!("/lockkit-bench-{run}");
                let left = client.list_children(&base).await.unwrap_or_default();
                for child in left {
                    let _ = client.delete(&format!("{base}/{child}"), None).await;
                }
                let _ = client.delete(&base, None).await;
            }
        }
    });
}
