//! Redlock benchmark: lockkit's Redlock mutex against `rslock` (the Redlock crate) over the same
//! independent Redis masters, in the same run.
//!
//! ```text
//! eval "$(scripts/services.sh up --redlock)"
//! cargo bench --features redis --bench redlock
//! ```
//!
//! Both sides take a 10 s lease and talk to every master of `LOCKKIT_TEST_REDLOCK_URL`
//! (`redlock://h1:p1,h2:p2,…`; rslock gets the same hosts as `redis://h:p` URLs). Per cycle:
//!
//! * lockkit (`Mutex::lock`, then `release` awaited; a watchdog lease of 10 s, the handle's
//!   default): one round of `redlock_acquire.lua` sent to every master in parallel, each within
//!   the node timeout (a hundredth of the lease, 100 ms): `SET key owner NX PX` and the token
//!   from the lock's fencing counter. Held once a quorum (3 of 5) took it with validity left,
//!   after one more round to the masters that issued a lower token if they disagree; then the
//!   ownership is registered with the client's watchdog (which would renew it every third of
//!   the lease). A round that finds the lock busy takes a place in the lockkit waiters' queue on
//!   that master (and one that finds it free while an earlier waiter is first gives way); the
//!   release tells the first waiter on pub/sub, which tries once a quorum of masters told it;
//!   the others try after `Backoff::POLL`'s pause. Release: the compare-and-delete script on
//!   every master in parallel, which also tells the first waiter. So lockkit serves waiters in
//!   order: a client that releases and acquires again waits behind the others.
//! * rslock (`acquire_no_guard`, then `unlock` awaited; its retries as it ships them): `SET key
//!   <20 random bytes> NX PX` on every master in parallel, no per-master timeout; held once a
//!   quorum took it with validity left. A failed try runs the compare-and-delete script on every
//!   master, then sleeps a random 0-199 ms (`lock`'s 3 tries); when the 3 have failed,
//!   `acquire_no_guard` calls `lock` again at once. Release: the compare-and-delete script on
//!   every master in parallel. (benches/redis.rs runs rslock only as shipped, and so does this
//!   bench: no tight variant.)
//!
//! What is measured:
//!
//! * uncontended: one client of each, acquire + release on one lock, the two taking turns cycle
//!   by cycle, so machine noise (which comes in bursts here) hits them alike.
//!   `LOCKKIT_BENCH_ROUNDS` (3) × `LOCKKIT_BENCH_CYCLES` (500) cycles each; p50/p99/mean of the
//!   cycle and cycles per second, and the lockkit/rslock ratios as the median of the per-round
//!   ratios.
//! * contended: `LOCKKIT_BENCH_CLIENTS` clients (a comma-separated list, default `8,64`), each
//!   its own handle (its own connections), take one lock `LOCKKIT_BENCH_TOTAL` (1000) times per
//!   round: throughput, p50/p99 wait, the busiest client's share, overlaps (must be 0), lockkit's
//!   failed acquires (rslock's `acquire_no_guard` does not fail). `LOCKKIT_BENCH_CONTENDED_ROUNDS`
//!   (3) rounds, lockkit then rslock, the order reversed in odd rounds; the lockkit/rslock
//!   ratios of throughput, p50 and p99 are the median of the per-round ratios. At every count
//!   with nothing done under the lock (a releasing client can barge straight back in), and at
//!   the first count with 1 ms of waiting under it (`LOCKKIT_BENCH_WORK_TOTAL`, 200,
//!   acquisitions per round). A client's wait is counted when it gets the lock, so a side whose
//!   releasing client takes the lock straight back (rslock's) shows it in the busiest share
//!   (1/count when fair) more than in p99.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit::{LockConfig, Locks};
use lockkit_measure::{Latencies, Tally};

/// Both sides' lease.
const LEASE: Duration = Duration::from_secs(10);

fn env_num(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The masters of `redlock://[user:pass@]h1:p1,h2:p2,…[/db][?options]` as the `redis://` URLs
/// rslock takes: the same hosts, credentials and db (as written, still percent-encoded); the
/// options are lockkit's own and dropped.
fn rslock_urls(url: &str) -> Vec<String> {
    let rest = url
        .strip_prefix("redlock://")
        .expect("LOCKKIT_TEST_REDLOCK_URL is a redlock:// URL");
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let db = if db.is_empty() {
        String::new()
    } else {
        format!("/{db}")
    };
    hosts
        .split(',')
        .map(|h| {
            // An IPv6 address is bracketed: its port, if any, follows the `]`.
            let port = if h.rsplit(']').next().unwrap_or(h).contains(':') {
                ""
            } else {
                ":6379"
            };
            format!("redis://{userinfo}{h}{port}{db}")
        })
        .collect()
}

/// One lockkit client: its own handle, its own connection to every master.
async fn lockkit_client(url: &str) -> Locks {
    lockkit::from_config(&LockConfig::new(url).with_lease(LEASE))
        .await
        .unwrap()
}

/// One rslock client, connected to every master before the clock starts (its connections open
/// on first use), as lockkit's handle is.
async fn rslock_client(masters: &[String], warm_key: &str) -> rslock::LockManager {
    let rl = rslock::LockManager::new(masters.to_vec());
    if let Ok(l) = rl.lock(warm_key.as_bytes(), LEASE).await {
        rl.unlock(&l).await;
    }
    rl
}

/// One lockkit cycle: `lock`, then `release`.
async fn lockkit_cycle(lock: &lockkit::Mutex) -> Duration {
    let t = Instant::now();
    let g = lock.lock().await.unwrap();
    g.release().await.unwrap();
    t.elapsed()
}

/// One rslock cycle: `acquire_no_guard`, then `unlock`.
async fn rslock_cycle(rl: &rslock::LockManager, key: &str) -> Duration {
    let t = Instant::now();
    let l = rl.acquire_no_guard(key.as_bytes(), LEASE).await.unwrap();
    rl.unlock(&l).await;
    t.elapsed()
}

/// `n` cycles of each, interleaved one by one (lockkit, rslock, lockkit, ...).
async fn uncontended_round(
    lock: &lockkit::Mutex,
    rl: &rslock::LockManager,
    key: &str,
    n: usize,
) -> [Latencies; 2] {
    let mut out: [Latencies; 2] = Default::default();
    for _ in 0..n {
        out[0].record(lockkit_cycle(lock).await);
        out[1].record(rslock_cycle(rl, key).await);
    }
    out
}

async fn uncontended(url: &str, masters: &[String], run: &str, rounds: usize, cycles: usize) {
    let locks = lockkit_client(url).await;
    let lock = locks.mutex(&format!("{run}/uncontended")).unwrap();
    let rl = rslock_client(masters, &format!("{run}:warm")).await;
    let key = format!("{run}:uncontended");
    // Warm up both (scripts loaded on every master, connections, allocator).
    uncontended_round(&lock, &rl, &key, 100).await;
    let [mut lk_t, mut rl_t]: [Latencies; 2] = Default::default();
    let (mut p50s, mut p99s, mut rates) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let [l, r] = uncontended_round(&lock, &rl, &key, cycles).await;
        p50s.push(us(l.quantile(0.5)) / us(r.quantile(0.5)));
        p99s.push(us(l.quantile(0.99)) / us(r.quantile(0.99)));
        rates.push(us(r.mean()) / us(l.mean()));
        lk_t.add(&l);
        rl_t.add(&r);
    }
    println!(
        "\nuncontended (1 client) acquire+release, {} cycles each, {rounds} rounds, the two \
         taking turns",
        lk_t.count()
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>10}",
        "", "p50 µs", "p99 µs", "mean µs", "cycles/s"
    );
    for (label, v) in [
        ("lockkit lock + release", &lk_t),
        ("rslock acquire + unlock", &rl_t),
    ] {
        println!(
            "{label:<34} {:>9.1} {:>9.1} {:>9.1} {:>10.0}",
            us(v.quantile(0.5)),
            us(v.quantile(0.99)),
            us(v.mean()),
            1e6 / us(v.mean())
        );
    }
    println!(
        "ratio lockkit/rslock at 1 client: throughput {:.3}, p50 {:.3}, p99 {:.3} (medians of \
         {rounds} rounds; throughput rounds {rates:.3?})",
        median(rates.clone()),
        median(p50s),
        median(p99s)
    );
    drop(locks);
}

struct Contended {
    label: &'static str,
    secs: f64,
    tally: Tally,
    overlaps: usize,
    /// Acquires or releases that returned an error (tried again).
    errors: usize,
}

impl Contended {
    fn rate(&self) -> f64 {
        self.tally.ops() as f64 / self.secs
    }

    fn wait(&self, q: f64) -> f64 {
        us(self.tally.waits().quantile(q))
    }

    /// Adds another round of the same side.
    fn absorb(&mut self, other: Contended) {
        self.secs += other.secs;
        self.tally.add(&other.tally);
        self.overlaps += other.overlaps;
        self.errors += other.errors;
    }

    fn print(&self) {
        println!(
            "{:<34} {:>9.0} {:>10.2} {:>10.2} {:>9.1}% {:>9} {:>7}",
            self.label,
            self.rate(),
            self.wait(0.5) / 1000.0,
            self.wait(0.99) / 1000.0,
            100.0 * self.tally.busiest_share(),
            self.overlaps,
            self.errors
        );
    }
}

/// The work done under the lock: none, or waiting `hold` (an I/O call, say).
async fn work(hold: Duration) {
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
}

/// Shared bookkeeping of a contended run: a ticket counter, an overlap detector, an error count.
#[derive(Default)]
struct Arena {
    taken: AtomicUsize,
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    errors: AtomicUsize,
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
    fn failed(&self, what: &str, e: &lockkit::Error) {
        if self.errors.fetch_add(1, Ordering::SeqCst) < 3 {
            eprintln!("lockkit {what} failed: {e}");
        }
    }
}

async fn contended_lockkit(
    url: &str,
    name: &str,
    (total, count): (usize, usize),
    hold: Duration,
) -> Contended {
    let arena = Arc::new(Arena::default());
    let mut clients = Vec::new();
    for _ in 0..count {
        clients.push(lockkit_client(url).await);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for locks in &clients {
        let (lock, arena) = (locks.mutex(name).unwrap(), arena.clone());
        tasks.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            loop {
                let t = Instant::now();
                // A failed acquire (too few masters answered in time) leaves nothing behind:
                // counted, and tried again.
                let g = match lock.lock().await {
                    Ok(g) => g,
                    Err(e) => {
                        arena.failed("acquire", &e);
                        continue;
                    }
                };
                let wait = t.elapsed();
                let more = arena.enter(total);
                work(hold).await;
                arena.leave();
                if let Err(e) = g.release().await {
                    arena.failed("release", &e);
                }
                if !more {
                    return waits;
                }
                waits.push(wait);
            }
        }));
    }
    finish("lockkit redlock mutex", started, tasks, arena, clients).await
}

/// rslock: `acquire_no_guard` retries until it has the lock, `unlock` releases it; each client
/// its own `LockManager` (its own connections).
async fn contended_rslock(
    masters: &[String],
    key: &str,
    (total, count): (usize, usize),
    hold: Duration,
) -> Contended {
    let arena = Arc::new(Arena::default());
    let mut managers = Vec::new();
    for _ in 0..count {
        managers.push(rslock_client(masters, &format!("{key}-warm")).await);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for rl in managers {
        let (arena, key) = (arena.clone(), key.to_string());
        tasks.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            loop {
                let t = Instant::now();
                let l = rl.acquire_no_guard(key.as_bytes(), LEASE).await.unwrap();
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
        errors: arena.errors.load(Ordering::SeqCst),
    }
}

/// `rounds` alternating rounds of lockkit and rslock among `count` clients, `hold` of work
/// under the lock; prints the table and the median per-round lockkit/rslock ratios.
async fn contended_table(
    (url, masters): (&str, &[String]),
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
        "{:<34} {:>9} {:>10} {:>10} {:>10} {:>9} {:>7}",
        "", "acq/s", "p50 ms", "p99 ms", "busiest", "overlaps", "errors"
    );
    let tag = format!("{}-{count}", hold.as_micros());
    let size = (total, count);
    let mut rows: Vec<Contended> = Vec::new();
    let (mut rates, mut p50s, mut p99s) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Odd rounds run rslock first, so neither always follows the other.
        let mut round_rows: [Option<Contended>; 2] = [None, None];
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            round_rows[i] = Some(match i {
                0 => contended_lockkit(url, &format!("{run}/c{tag}-{round}"), size, hold).await,
                _ => {
                    contended_rslock(masters, &format!("{run}:rl-{tag}-{round}"), size, hold).await
                }
            });
        }
        let [Some(lk), Some(rl)] = round_rows else {
            unreachable!("both sides ran")
        };
        rates.push(lk.rate() / rl.rate());
        p50s.push(lk.wait(0.5) / rl.wait(0.5));
        p99s.push(lk.wait(0.99) / rl.wait(0.99));
        for (i, r) in [lk, rl].into_iter().enumerate() {
            match rows.get_mut(i) {
                Some(acc) => acc.absorb(r),
                None => rows.push(r),
            }
        }
    }
    for r in &rows {
        r.print();
    }
    println!(
        "ratio lockkit/rslock at {count} clients: throughput {:.3}, p50 wait {:.3}, p99 wait \
         {:.3} (medians of {rounds} rounds; throughput rounds {rates:.3?})",
        median(rates.clone()),
        median(p50s),
        median(p99s)
    );
    assert!(rows.iter().all(|r| r.overlaps == 0), "overlapping holders");
}

fn main() {
    let Ok(url) = std::env::var("LOCKKIT_TEST_REDLOCK_URL") else {
        eprintln!(
            "LOCKKIT_TEST_REDLOCK_URL is not set; skipping (run `eval \"$(scripts/services.sh \
             up --redlock)\"` first)"
        );
        return;
    };
    let masters = rslock_urls(&url);
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
        let rounds = if quick {
            1
        } else {
            env_num("LOCKKIT_BENCH_ROUNDS", 3)
        };
        let cycles = if quick {
            50
        } else {
            env_num("LOCKKIT_BENCH_CYCLES", 500)
        };
        let total = if quick {
            100
        } else {
            env_num("LOCKKIT_BENCH_TOTAL", 1000)
        };
        let contended_rounds = if quick {
            1
        } else {
            env_num("LOCKKIT_BENCH_CONTENDED_ROUNDS", 3)
        };
        let run = format!("lkbench-{}", std::process::id());
        println!("{} masters: {}", masters.len(), masters.join(" "));

        uncontended(&url, &masters, &run, rounds, cycles).await;

        // Contended: with nothing done under the lock (the releasing client can barge straight
        // back in), and with 1 ms of work under it. The 1-client case is the uncontended one.
        let counts = if std::env::var_os("LOCKKIT_BENCH_CLIENTS").is_some() {
            common::client_counts()
        } else {
            vec![8, 64]
        };
        let servers = (url.as_str(), masters.as_slice());
        for &count in &counts {
            contended_table(
                servers,
                &run,
                (total, count),
                contended_rounds,
                Duration::ZERO,
            )
            .await;
        }
        let with_work = if quick {
            50
        } else {
            env_num("LOCKKIT_BENCH_WORK_TOTAL", 200)
        };
        let size = (with_work, counts[0]);
        contended_table(
            servers,
            &run,
            size,
            contended_rounds,
            Duration::from_millis(1),
        )
        .await;
    }))
    .unwrap();
}
