//! Redis benchmark: lockkit against the raw floor, a plain `SET NX` retry loop and `rslock` (the
//! Redlock crate, on one server), on the same server in the same run.
//!
//! ```text
//! eval "$(scripts/services.sh up)"
//! cargo bench --features redis --bench redis
//! ```
//!
//! * uncontended: one client, acquire + release (awaited) on one lock, with `try_lock` and with
//!   `lock`, against the raw floor (`SET NX PX` + compare-and-delete `EVALSHA` on one
//!   multiplexed connection), and `try_lock`'s own scripts on that connection. The kinds take
//!   turns cycle by cycle, so machine noise hits them alike; the ratio of the medians is
//!   reported, and the median of the per-round ratios.
//! * contended: `LOCKKIT_BENCH_CLIENTS` clients (a comma-separated list, default `8`; the
//!   issue's sweep is `1,8,64,256`), their own connections each, take one lock
//!   `LOCKKIT_BENCH_TOTAL` (2000) times per round with the non-fair and the fair (FIFO) mutex:
//!   throughput, p50/p99 wait, the busiest client's share, overlaps (must be 0); against a plain
//!   `SET NX PX` retry loop (1 ms between tries), the same loop without sleeping, and `rslock`'s
//!   `acquire` (its retries as it ships them: up to 200 ms apart, at random).
//!   `LOCKKIT_BENCH_CONTENDED_ROUNDS` (9) rounds of all five (odd rounds in reverse order); the
//!   median per-round throughput ratios of lockkit to the best peer and to `rslock` are
//!   reported. At every count with nothing done under the lock (a releasing client can barge
//!   straight back in: a retry loop's best case), and at the first count with 1 ms of waiting
//!   under it (`LOCKKIT_BENCH_WORK_TOTAL`, 500, acquisitions per round).
//!
//! `LOCKKIT_BENCH_ROUNDS` (default 6) × `LOCKKIT_BENCH_CYCLES` (default 500) sets the
//! uncontended run length.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit::Locks;
use lockkit_measure::{Latencies, Tally};
use lockkit_redis::redis;

const CAD: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

fn env_num(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn raw_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// One raw-floor cycle: `SET NX PX`, then the compare-and-delete script.
async fn raw_cycle(
    conn: &mut redis::aio::MultiplexedConnection,
    cad: &redis::Script,
    key: &str,
    i: usize,
) -> Duration {
    let val = format!("owner-{i}");
    let t = Instant::now();
    let ok: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(&val)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(conn)
        .await
        .unwrap();
    assert!(ok.is_some());
    let del: i64 = cad.key(key).arg(&val).invoke_async(conn).await.unwrap();
    assert_eq!(del, 1);
    t.elapsed()
}

/// lockkit's own scripts for `try_lock` and `release` on a plain connection: the server's share
/// of the cycle, without the client library around it.
async fn script_cycle(
    conn: &mut redis::aio::MultiplexedConnection,
    keys: &lockkit_redis::LockKeys,
    scripts: &(redis::Script, redis::Script),
    i: usize,
) -> Duration {
    let (acquire, release) = scripts;
    let owner = format!("bench:{i}");
    let t = Instant::now();
    let (ok, _token): (i64, i64) = acquire
        .key(&keys.lock)
        .key(&keys.fence)
        .arg(&owner)
        .arg(30_000)
        .arg(3_600_000)
        .invoke_async(conn)
        .await
        .unwrap();
    assert_eq!(ok, 1);
    let r: i64 = release
        .key(&keys.lock)
        .key(keys.unlock_latch(&owner))
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .arg(&owner)
        .arg(20_000)
        .arg(3_600_000)
        .arg(3_000)
        .invoke_async(conn)
        .await
        .unwrap();
    assert_eq!(r, 1);
    t.elapsed()
}

/// One lockkit cycle: `try_lock` (or `lock`, `waiting`), then `release`.
async fn lockkit_cycle(lock: &lockkit::Mutex, waiting: bool) -> Duration {
    let t = Instant::now();
    let g = if waiting {
        lock.lock().await.unwrap()
    } else {
        lock.try_lock().await.unwrap().expect("uncontended")
    };
    g.release().await.unwrap();
    t.elapsed()
}

/// `n` cycles of each kind, interleaved one by one (raw, `try_lock`, `lock`, scripts, raw, ...)
/// so that machine noise, which comes in bursts here, hits them all alike.
async fn uncontended_round(
    raw: &mut redis::aio::MultiplexedConnection,
    cad: &redis::Script,
    raw_key: &str,
    lock: &lockkit::Mutex,
    script_keys: &lockkit_redis::LockKeys,
    scripts: &(redis::Script, redis::Script),
    n: usize,
) -> [Latencies; 4] {
    let mut out: [Latencies; 4] = Default::default();
    for i in 0..n {
        out[0].record(raw_cycle(raw, cad, raw_key, i).await);
        out[1].record(lockkit_cycle(lock, false).await);
        out[2].record(lockkit_cycle(lock, true).await);
        out[3].record(script_cycle(raw, script_keys, scripts, i).await);
    }
    out
}

struct Contended {
    label: &'static str,
    secs: f64,
    tally: Tally,
    overlaps: usize,
}

impl Contended {
    fn rate(&self) -> f64 {
        self.tally.ops() as f64 / self.secs
    }

    /// Adds another round of the same variant.
    fn absorb(&mut self, other: Contended) {
        self.secs += other.secs;
        self.tally.add(&other.tally);
        self.overlaps += other.overlaps;
    }

    fn print(&self) {
        let w = self.tally.waits();
        println!(
            "{:<34} {:>9.0} {:>10.2} {:>10.2} {:>9.1}% {:>9}",
            self.label,
            self.rate(),
            us(w.quantile(0.5)) / 1000.0,
            us(w.quantile(0.99)) / 1000.0,
            100.0 * self.tally.busiest_share(),
            self.overlaps
        );
    }
}

/// The work done under the lock: none, or waiting `hold` (an I/O call, say).
async fn work(hold: Duration) {
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
}

/// Shared bookkeeping of a contended run: a ticket counter and an overlap detector.
#[derive(Default)]
struct Arena {
    taken: AtomicUsize,
    inside: AtomicUsize,
    overlaps: AtomicUsize,
}

impl Arena {
    /// Enters the critical section; returns false once the run has its acquisitions.
    fn enter(&self, total: usize) -> bool {
        if self.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.taken.fetch_add(1, Ordering::SeqCst) < total
    }
    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn contended_lockkit(
    url: &str,
    name: &str,
    (total, count): (usize, usize),
    fair: bool,
    hold: Duration,
) -> Contended {
    let arena = Arc::new(Arena::default());
    let mut clients = Vec::new();
    for _ in 0..count {
        clients.push(lockkit::connect(url).await.unwrap());
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for locks in &clients {
        let (lock, arena) = (locks.mutex(name).unwrap(), arena.clone());
        tasks.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            loop {
                let t = Instant::now();
                let opts = lockkit::AcquireOptions::new().fair(fair);
                let g = lock.acquire(&opts).await.unwrap().unwrap();
                let wait = t.elapsed();
                let more = arena.enter(total);
                work(hold).await;
                arena.leave();
                g.release().await.unwrap();
                if !more {
                    return waits;
                }
                waits.push(wait);
            }
        }));
    }
    finish(
        if fair {
            "lockkit fair mutex (FIFO)"
        } else {
            "lockkit mutex (queue + hand-off)"
        },
        started,
        tasks,
        arena,
        clients,
    )
    .await
}

async fn contended_setnx(
    url: &str,
    key: &str,
    (total, count): (usize, usize),
    retry: Option<Duration>,
    hold: Duration,
) -> Contended {
    let arena = Arc::new(Arena::default());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..count {
        let mut conn = raw_conn(url).await;
        let (arena, key) = (arena.clone(), key.to_string());
        tasks.push(tokio::spawn(async move {
            let cad = redis::Script::new(CAD);
            let (mut waits, mut n) = (Vec::new(), 0u64);
            loop {
                let t = Instant::now();
                let val = format!("{c}-{n}");
                n += 1;
                loop {
                    let ok: Option<String> = redis::cmd("SET")
                        .arg(&key)
                        .arg(&val)
                        .arg("NX")
                        .arg("PX")
                        .arg(30_000)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    if ok.is_some() {
                        break;
                    }
                    match retry {
                        Some(d) => tokio::time::sleep(d).await,
                        None => tokio::task::yield_now().await,
                    }
                }
                let wait = t.elapsed();
                let more = arena.enter(total);
                work(hold).await;
                arena.leave();
                let _: i64 = cad
                    .key(&key)
                    .arg(&val)
                    .invoke_async(&mut conn)
                    .await
                    .unwrap();
                if !more {
                    return waits;
                }
                waits.push(wait);
            }
        }));
    }
    let label = if retry.is_some() {
        "SET NX loop, 1 ms retry sleep"
    } else {
        "SET NX loop, no sleep (spin)"
    };
    finish(label, started, tasks, arena, Vec::new()).await
}

/// `rslock` (Redlock on one server): `acquire_no_guard` retries until it has the lock, `unlock`
/// releases it; each client its own `LockManager` (its own connection).
async fn contended_rslock(
    url: &str,
    key: &str,
    (total, count): (usize, usize),
    hold: Duration,
) -> Contended {
    let arena = Arc::new(Arena::default());
    let mut managers = Vec::new();
    for _ in 0..count {
        let rl = rslock::LockManager::new(vec![url.to_string()]);
        // Connected before the clock starts, as the others are.
        let warm = rl
            .lock(format!("{key}-warm").as_bytes(), Duration::from_secs(30))
            .await;
        if let Ok(l) = warm {
            rl.unlock(&l).await;
        }
        managers.push(rl);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for rl in managers {
        let (arena, key) = (arena.clone(), key.to_string());
        tasks.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            loop {
                let t = Instant::now();
                let l = rl
                    .acquire_no_guard(key.as_bytes(), Duration::from_secs(30))
                    .await
                    .unwrap();
                let wait = t.elapsed();
                let more = arena.enter(total);
                work(hold).await;
                arena.leave();
                rl.unlock(&l).await;
                if !more {
                    return waits;
                }
                waits.push(wait);
            }
        }));
    }
    finish(
        "rslock (acquire, as shipped)",
        started,
        tasks,
        arena,
        Vec::new(),
    )
    .await
}

async fn finish(
    label: &'static str,
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<Vec<Duration>>>,
    arena: Arc<Arena>,
    clients: Vec<Locks>,
) -> Contended {
    let mut tally = Tally::new(tasks.len());
    for (client, t) in tasks.into_iter().enumerate() {
        for wait in t.await.unwrap() {
            tally.record(client, wait);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    drop(clients);
    Contended {
        label,
        secs,
        tally,
        overlaps: arena.overlaps.load(Ordering::SeqCst),
    }
}

/// `rounds` alternating rounds of every contended variant among `count` clients, `hold` of work
/// under the lock; prints the table and the median per-round throughput ratios of lockkit to
/// the best peer and to `rslock`.
async fn contended_table(
    url: &str,
    run: &str,
    (total, count): (usize, usize),
    rounds: usize,
    hold: Duration,
) {
    println!(
        "\ncontended: {count} clients, one lock, {hold:?} of work under it, {total} acquisitions \
         per round, {rounds} alternating rounds"
    );
    println!(
        "{:<34} {:>9} {:>10} {:>10} {:>10} {:>9}",
        "", "acq/s", "p50 ms", "p99 ms", "busiest", "overlaps"
    );
    let tag = format!("{}-{count}", hold.as_micros());
    let size = (total, count);
    // Alternating rounds, as above: machine noise hits every variant alike.
    let mut rows: Vec<Contended> = Vec::new();
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let retry = Some(Duration::from_millis(1));
        // Odd rounds run the variants in reverse, so none always follows another.
        let mut round_rows: Vec<Option<Contended>> = (0..5).map(|_| None).collect();
        let order: Vec<usize> = if round % 2 == 0 {
            (0..5).collect()
        } else {
            (0..5).rev().collect()
        };
        for i in order {
            round_rows[i] = Some(match i {
                0 => {
                    contended_lockkit(url, &format!("{run}/c{tag}-{round}"), size, false, hold)
                        .await
                }
                1 => {
                    contended_lockkit(url, &format!("{run}/cf{tag}-{round}"), size, true, hold)
                        .await
                }
                2 => {
                    contended_setnx(url, &format!("{run}:s1-{tag}-{round}"), size, retry, hold)
                        .await
                }
                3 => {
                    contended_setnx(url, &format!("{run}:s0-{tag}-{round}"), size, None, hold).await
                }
                _ => contended_rslock(url, &format!("{run}:rl-{tag}-{round}"), size, hold).await,
            });
        }
        let round_rows: Vec<Contended> = round_rows.into_iter().flatten().collect();
        let best_peer = round_rows[2..]
            .iter()
            .map(Contended::rate)
            .fold(0.0, f64::max);
        ratios.push((
            round_rows[0].rate() / best_peer,
            round_rows[0].rate() / round_rows[4].rate(),
        ));
        for (i, r) in round_rows.into_iter().enumerate() {
            match rows.get_mut(i) {
                Some(acc) => acc.absorb(r),
                None => rows.push(r),
            }
        }
    }
    for r in &rows {
        r.print();
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let best: Vec<f64> = ratios.iter().map(|r| r.0).collect();
    let rsl: Vec<f64> = ratios.iter().map(|r| r.1).collect();
    println!(
        "ratio lockkit/best peer throughput at {count} clients: median of {rounds} rounds {:.3}, \
         rounds {best:.3?} (target >= 2)",
        median(best.clone())
    );
    println!(
        "ratio lockkit/rslock throughput at {count} clients: median of {rounds} rounds {:.3}",
        median(rsl)
    );
    assert!(rows.iter().all(|r| r.overlaps == 0), "overlapping holders");
}

fn main() {
    let Ok(url) = std::env::var("LOCKKIT_TEST_REDIS_URL") else {
        eprintln!(
            "LOCKKIT_TEST_REDIS_URL is not set; run `eval \"$(scripts/services.sh up)\"` first"
        );
        return;
    };
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing: run a smoke-sized pass.
    let quick = !std::env::args().any(|a| a == "--bench");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Everything runs in a spawned task, on the runtime's workers like a service's handlers: the
    // main thread's `block_on` would add a cross-thread wake-up to every reply.
    rt.block_on(rt.spawn(async move {
        let rounds = if quick { 1 } else { env_num("LOCKKIT_BENCH_ROUNDS", 6) };
        let cycles = if quick { 50 } else { env_num("LOCKKIT_BENCH_CYCLES", 500) };
        let total = if quick { 100 } else { env_num("LOCKKIT_BENCH_TOTAL", 2000) };
        let contended_rounds = if quick { 1 } else { env_num("LOCKKIT_BENCH_CONTENDED_ROUNDS", 9) };
        let run = format!("lkbench-{}", std::process::id());

        // Uncontended.
        let mut raw = raw_conn(&url).await;
        let cad = redis::Script::new(CAD);
        let locks = lockkit::connect(&url).await.unwrap();
        let lock = locks.mutex(&format!("{run}/uncontended")).unwrap();
        let raw_key = format!("{run}:raw");
        let [mut raw_t, mut lk_t, mut lw_t, mut sc_t]: [Latencies; 4] = Default::default();
        let script_keys = lockkit_redis::LockKeys::mutex("lockkit", &format!("{run}/scripts"));
        let scripts = (
            redis::Script::new(lockkit_redis::scripts::TRY_ACQUIRE),
            redis::Script::new(lockkit_redis::scripts::RELEASE),
        );
        // Warm up every kind (script load, connection, allocator).
        uncontended_round(&mut raw, &cad, &raw_key, &lock, &script_keys, &scripts, 100).await;
        let (mut ratios, mut wait_ratios) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let [r, l, w, s] =
                uncontended_round(&mut raw, &cad, &raw_key, &lock, &script_keys, &scripts, cycles)
                    .await;
            ratios.push(us(l.quantile(0.5)) / us(r.quantile(0.5)));
            wait_ratios.push(us(w.quantile(0.5)) / us(r.quantile(0.5)));
            raw_t.add(&r);
            lk_t.add(&l);
            lw_t.add(&w);
            sc_t.add(&s);
        }
        for r in [&mut ratios, &mut wait_ratios] {
            r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        }
        let mean = |v: &Latencies| us(v.mean());
        println!("\nuncontended acquire+release, {} cycles each, {rounds} rounds, kinds taking turns", raw_t.count());
        println!("{:<44} {:>9} {:>9} {:>9} {:>10}", "", "p50 µs", "p99 µs", "mean µs", "cycles/s");
        for (label, v) in [
            ("raw floor: SET NX PX + EVALSHA compare-del", &raw_t),
            ("lockkit try_lock + release", &lk_t),
            ("lockkit lock + release", &lw_t),
            ("(try_lock's scripts on the raw connection)", &sc_t),
        ] {
            println!(
                "{label:<44} {:>9.1} {:>9.1} {:>9.1} {:>10.0}",
                us(v.quantile(0.5)),
                us(v.quantile(0.99)),
                mean(v),
                1e6 / mean(v)
            );
        }
        for (label, v, per_round) in [
            ("try_lock", &lk_t, &ratios),
            ("lock", &lw_t, &wait_ratios),
        ] {
            println!(
                "ratio lockkit {label}/raw: p50 {:.3}, mean {:.3}, median of per-round p50 ratios {:.3} (target <= 1.25)",
                us(v.quantile(0.5)) / us(raw_t.quantile(0.5)),
                mean(v) / mean(&raw_t),
                per_round[per_round.len() / 2]
            );
        }
        drop(locks);

        // Contended: with nothing done under the lock (the releasing client can barge straight
        // back in: the best case for a retry loop), and with 1 ms of work under it.
        let counts = common::client_counts();
        for &count in &counts {
            contended_table(&url, &run, (total, count), contended_rounds, Duration::ZERO).await;
        }
        let with_work = if quick { 50 } else { env_num("LOCKKIT_BENCH_WORK_TOTAL", 500) };
        let size = (with_work, counts[0]);
        contended_table(&url, &run, size, contended_rounds, Duration::from_millis(1)).await;
    }))
    .unwrap();
}
