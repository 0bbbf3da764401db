//! Multi-lock benchmark (issue 29): a set taken the way `MultiLock` takes it (in one atomic step
//! where the backend has one, else member by member) against ordered acquisition written out by
//! hand (each member's mutex in turn, in the global order, as `MultiLock` falls back to), in the
//! same run on the same servers.
//!
//! ```text
//! eval "$(scripts/services.sh up)"
//! cargo bench --features redis,zk,etcd --bench multi
//! ```
//!
//! URLs from `LOCKKIT_TEST_{REDIS,ZK,ETCD}_URL` (a backend without one is skipped). Per backend:
//!
//! * uncontended: one client takes and releases a set of 2, 4 and 8 free mutexes (watchdog
//!   lease, release awaited), `LOCKKIT_BENCH_ROUNDS` (3) × `LOCKKIT_BENCH_CYCLES` (200) cycles
//!   each way, the two ways taking turns cycle by cycle; p50 and mean of the cycle, and the
//!   `MultiLock`/ordered ratio of cycles per second (the median of the per-round ratios).
//! * contended: `LOCKKIT_BENCH_CLIENTS` (8) clients, each its own handle, take random sets of 4
//!   of 12 names `LOCKKIT_BENCH_TOTAL` (400) times in all per round, nothing done under them;
//!   `LOCKKIT_BENCH_CONTENDED_ROUNDS` (3) rounds, the order of the ways reversed in odd rounds:
//!   sets per second and the ratio (the median of the per-round ratios).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{median, us, Lengths};
use lockkit::{LockGuard, Locks};
use lockkit_measure::Latencies;

/// The two ways of taking a set.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    /// `MultiLock::lock`.
    Multi,
    /// Each member's `Mutex::lock` in the global order, then every release at once.
    Ordered,
}

fn main() {
    common::run_on_workers(async {
        let len = Lengths::read(Lengths {
            rounds: 3,
            cycles: 200,
            total: 400,
            contended_rounds: 3,
            work_total: 0,
        });
        let clients = common::client_counts();
        let run = format!("lkmulti-{}", std::process::id());
        for (backend, var) in [
            ("redis", "LOCKKIT_TEST_REDIS_URL"),
            ("zk", "LOCKKIT_TEST_ZK_URL"),
            ("etcd", "LOCKKIT_TEST_ETCD_URL"),
        ] {
            let Ok(url) = std::env::var(var) else {
                eprintln!("skipping {backend}: {var} is not set");
                continue;
            };
            println!("\n{backend}: multi-lock (MultiLock) against ordered acquisition by hand");
            let locks = lockkit::connect(&url).await.unwrap();
            for n in [2, 4, 8] {
                let names: Vec<String> = (0..n).map(|i| format!("{run}-{backend}-u{i}")).collect();
                uncontended(&locks, &names, &len).await;
            }
            for &c in &clients {
                contended(&url, &format!("{run}-{backend}-c"), c, &len).await;
            }
            locks.close().await.unwrap();
        }
    });
}

/// Takes `names` one way; the guards of the ordered way, or the set's.
async fn take(locks: &Locks, names: &[String], way: Way) -> Taken {
    match way {
        Way::Multi => Taken::Set(locks.multi(names).unwrap().lock().await.unwrap()),
        Way::Ordered => {
            let mut sorted: Vec<&String> = names.iter().collect();
            sorted.sort();
            let mut guards = Vec::with_capacity(sorted.len());
            for n in sorted {
                guards.push(locks.mutex(n).unwrap().lock().await.unwrap());
            }
            Taken::Each(guards)
        }
    }
}

enum Taken {
    Set(lockkit::MultiGuard),
    Each(Vec<LockGuard>),
}

impl Taken {
    async fn release(self) {
        match self {
            Taken::Set(g) => g.release().await.unwrap(),
            Taken::Each(gs) => {
                for r in futures::future::join_all(gs.into_iter().map(LockGuard::release)).await {
                    r.unwrap();
                }
            }
        }
    }
}

async fn uncontended(locks: &Locks, names: &[String], len: &Lengths) {
    let (mut all_multi, mut all_ordered) = (Latencies::new(), Latencies::new());
    let mut ratios = Vec::new();
    for _ in 0..len.rounds {
        let (mut multi, mut ordered) = (Latencies::new(), Latencies::new());
        for _ in 0..len.cycles {
            for way in [Way::Multi, Way::Ordered] {
                let started = Instant::now();
                take(locks, names, way).await.release().await;
                let took = started.elapsed();
                match way {
                    Way::Multi => multi.record(took),
                    Way::Ordered => ordered.record(took),
                }
            }
        }
        ratios.push(us(ordered.mean()) / us(multi.mean()));
        all_multi.add(&multi);
        all_ordered.add(&ordered);
    }
    println!(
        "  {} members uncontended: MultiLock p50 {:.0} µs mean {:.0} µs ({:.0}/s); ordered p50 \
         {:.0} µs mean {:.0} µs ({:.0}/s); MultiLock/ordered {:.2}x",
        names.len(),
        us(all_multi.quantile(0.5)),
        us(all_multi.mean()),
        1e6 / us(all_multi.mean()),
        us(all_ordered.quantile(0.5)),
        us(all_ordered.mean()),
        1e6 / us(all_ordered.mean()),
        median(ratios)
    );
}

async fn contended(url: &str, prefix: &str, clients: usize, len: &Lengths) {
    let names: Vec<String> = (0..12).map(|i| format!("{prefix}{i}")).collect();
    let mut handles = Vec::with_capacity(clients);
    for _ in 0..clients {
        handles.push(lockkit::connect(url).await.unwrap());
    }
    let mut ratios = Vec::new();
    let (mut multi_rates, mut ordered_rates) = (Vec::new(), Vec::new());
    for round in 0..len.contended_rounds {
        let ways = if round % 2 == 0 {
            [Way::Multi, Way::Ordered]
        } else {
            [Way::Ordered, Way::Multi]
        };
        let (mut multi, mut ordered) = (0.0, 0.0);
        for way in ways {
            let rate = contended_run(&handles, &names, way, len.total, round).await;
            match way {
                Way::Multi => multi = rate,
                Way::Ordered => ordered = rate,
            }
        }
        ratios.push(multi / ordered);
        multi_rates.push(multi);
        ordered_rates.push(ordered);
    }
    println!(
        "  {clients} clients, sets of 4 of 12: MultiLock {:.0} sets/s, ordered {:.0} sets/s; \
         MultiLock/ordered {:.2}x",
        median(multi_rates),
        median(ordered_rates),
        median(ratios)
    );
    for h in handles {
        h.close().await.unwrap();
    }
}

/// Sets per second of `total` sets taken by every handle at once, one way.
async fn contended_run(
    handles: &[Locks],
    names: &[String],
    way: Way,
    total: usize,
    round: usize,
) -> f64 {
    let left = Arc::new(AtomicUsize::new(total));
    let started = Instant::now();
    let tasks: Vec<_> = handles
        .iter()
        .enumerate()
        .map(|(i, locks)| {
            let (locks, names, left) = (locks.clone(), names.to_vec(), left.clone());
            tokio::spawn(async move {
                let mut seed = ((i + 1) as u64 * 0x9e37_79b9_7f4a_7c15) ^ round as u64 | 1;
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                    .is_ok()
                {
                    let mut picked: Vec<String> = Vec::with_capacity(4);
                    while picked.len() < 4 {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let n = &names[(seed % names.len() as u64) as usize];
                        if !picked.contains(n) {
                            picked.push(n.clone());
                        }
                    }
                    take(&locks, &picked, way).await.release().await;
                }
            })
        })
        .collect();
    let deadline = Duration::from_secs(600);
    tokio::time::timeout(deadline, futures::future::try_join_all(tasks))
        .await
        .expect("a contended run within 10 minutes")
        .unwrap();
    total as f64 / started.elapsed().as_secs_f64()
}
