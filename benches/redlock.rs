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

use std::time::{Duration, Instant};

use common::contended::{self, Contended, Run};
use common::{median, rslock_peer, us, Lengths};
use lockkit::{LockConfig, Locks};
use lockkit_measure::Latencies;

/// Both sides' lease.
const LEASE: Duration = Duration::from_secs(10);

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
    let rl = rslock_peer::client(masters, &format!("{run}:warm"), LEASE).await;
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
    common::latency_table(
        34,
        &[
            ("lockkit lock + release", &lk_t),
            ("rslock acquire + unlock", &rl_t),
        ],
    );
    println!(
        "ratio lockkit/rslock at 1 client: throughput {:.3}, p50 {:.3}, p99 {:.3} (medians of \
         {rounds} rounds; throughput rounds {rates:.3?})",
        median(rates.clone()),
        median(p50s),
        median(p99s)
    );
    drop(locks);
}

async fn contended_lockkit(
    url: &str,
    name: &str,
    (total, count): (usize, usize),
    hold: Duration,
) -> Contended {
    let mut clients = Vec::new();
    for _ in 0..count {
        clients.push(lockkit_client(url).await);
    }
    let mut run = Run::start(total, hold);
    for locks in &clients {
        let (lock, arena) = (locks.mutex(name).unwrap(), run.arena());
        let (acquires, releases) = (arena.clone(), arena.clone());
        run.spawn(async move {
            arena
                .client(
                    // A failed acquire (too few masters answered in time) leaves nothing behind:
                    // counted, and tried again.
                    async move || match lock.lock().await {
                        Ok(g) => Some(g),
                        Err(e) => {
                            acquires.failed("acquire", &e);
                            None
                        }
                    },
                    async move |g| {
                        if let Err(e) = g.release().await {
                            releases.failed("release", &e);
                        }
                    },
                )
                .await
        });
    }
    run.finish("lockkit redlock mutex", clients).await
}

/// `rounds` alternating rounds of lockkit and rslock among `count` clients, `hold` of work
/// under the lock; prints the table and the median per-round lockkit/rslock ratios.
async fn contended_table(
    (url, masters): (&str, &[String]),
    run: &str,
    size @ (_, count): (usize, usize),
    rounds: usize,
    hold: Duration,
) {
    let side = move |i: usize, tag: String| async move {
        match i {
            0 => contended_lockkit(url, &format!("{run}/c{tag}"), size, hold).await,
            _ => {
                let key = format!("{run}:rl-{tag}");
                rslock_peer::contended(masters, &key, size, hold, LEASE).await
            }
        }
    };
    let (rows, ratios) = contended::alternate(size, rounds, hold, true, 2, side, |r| {
        let (lk, rl) = (&r[0], &r[1]);
        [
            lk.rate() / rl.rate(),
            lk.wait(0.5) / rl.wait(0.5),
            lk.wait(0.99) / rl.wait(0.99),
        ]
    })
    .await;
    let [rates, p50s, p99s] = [0, 1, 2].map(|k| ratios.iter().map(|r| r[k]).collect::<Vec<f64>>());
    println!(
        "ratio lockkit/rslock at {count} clients: throughput {:.3}, p50 wait {:.3}, p99 wait \
         {:.3} (medians of {rounds} rounds; throughput rounds {rates:.3?})",
        median(rates.clone()),
        median(p50s),
        median(p99s)
    );
    contended::assert_no_overlaps(&rows);
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
    common::run_on_workers(async move {
        let Lengths {
            rounds,
            cycles,
            total,
            contended_rounds,
            work_total,
        } = Lengths::read(Lengths {
            rounds: 3,
            cycles: 500,
            total: 1000,
            contended_rounds: 3,
            work_total: 200,
        });
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
        let size = (work_total, counts[0]);
        contended_table(
            servers,
            &run,
            size,
            contended_rounds,
            Duration::from_millis(1),
        )
        .await;
    });
}
