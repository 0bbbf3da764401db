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
//!   reported, and beside each row the server's CPU per acquisition (read from `/proc` at the
//!   start and the end of its run, when the server is the one `scripts/services.sh` started):
//!   what the contestant costs the server. At every count with
//!   nothing done under the lock (a releasing client can barge
//!   straight back in: a retry loop's best case), and at the first count with 1 ms of waiting
//!   under it (`LOCKKIT_BENCH_WORK_TOTAL`, 500, acquisitions per round).
//!
//! `LOCKKIT_BENCH_ROUNDS` (default 6) × `LOCKKIT_BENCH_CYCLES` (default 500) sets the
//! uncontended run length.

mod common;

use std::time::{Duration, Instant};

use common::contended::{self, Contended, Run};
use common::{median, rslock_peer, us, Lengths};
use lockkit_measure::Latencies;
use lockkit_redis::redis;

const CAD: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

/// rslock's lease (the one server's `redis://` URL is its one master).
const RSLOCK_LEASE: Duration = Duration::from_secs(30);

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

async fn contended_lockkit(
    url: &str,
    name: &str,
    (total, count): (usize, usize),
    fair: bool,
    hold: Duration,
) -> Contended {
    let mut clients = Vec::new();
    for _ in 0..count {
        clients.push(lockkit::connect(url).await.unwrap());
    }
    let mut run = Run::start(total, hold);
    for locks in &clients {
        let (lock, arena) = (locks.mutex(name).unwrap(), run.arena());
        run.spawn(async move {
            arena
                .client(
                    async move || {
                        let opts = lockkit::AcquireOptions::new().fair(fair);
                        Some(lock.acquire(&opts).await.unwrap().unwrap())
                    },
                    async move |g| g.release().await.unwrap(),
                )
                .await
        });
    }
    let label = if fair {
        "lockkit fair mutex (FIFO)"
    } else {
        "lockkit mutex (queue + hand-off)"
    };
    run.finish(label, clients).await
}

async fn contended_setnx(
    url: &str,
    key: &str,
    (total, count): (usize, usize),
    retry: Option<Duration>,
    hold: Duration,
) -> Contended {
    // Connected before the clock starts, as every other variant's clients are.
    let mut conns = Vec::with_capacity(count);
    for _ in 0..count {
        conns.push(raw_conn(url).await);
    }
    let mut run = Run::start(total, hold);
    for (c, mut conn) in conns.into_iter().enumerate() {
        // A clone is the same multiplexed connection, for the release.
        let mut release_conn = conn.clone();
        let (arena, key, release_key) = (run.arena(), key.to_string(), key.to_string());
        run.spawn(async move {
            let cad = redis::Script::new(CAD);
            let mut n = 0u64;
            arena
                .client(
                    async move || {
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
                                return Some(val);
                            }
                            match retry {
                                Some(d) => tokio::time::sleep(d).await,
                                None => tokio::task::yield_now().await,
                            }
                        }
                    },
                    async move |val| {
                        let _: i64 = cad
                            .key(&release_key)
                            .arg(&val)
                            .invoke_async(&mut release_conn)
                            .await
                            .unwrap();
                    },
                )
                .await
        });
    }
    let label = if retry.is_some() {
        "SET NX loop, 1 ms retry sleep"
    } else {
        "SET NX loop, no sleep (spin)"
    };
    run.finish(label, Vec::new()).await
}

/// `rounds` alternating rounds of every contended variant among `count` clients, `hold` of work
/// under the lock; prints the table and the median per-round throughput ratios of lockkit to
/// the best peer and to `rslock`.
async fn contended_table(
    url: &str,
    run: &str,
    size @ (_, count): (usize, usize),
    rounds: usize,
    hold: Duration,
) {
    let retry = Some(Duration::from_millis(1));
    let rslock_urls = &[url.to_string()];
    let variant = move |i: usize, tag: String| async move {
        match i {
            0 => contended_lockkit(url, &format!("{run}/c{tag}"), size, false, hold).await,
            1 => contended_lockkit(url, &format!("{run}/cf{tag}"), size, true, hold).await,
            2 => contended_setnx(url, &format!("{run}:s1-{tag}"), size, retry, hold).await,
            3 => contended_setnx(url, &format!("{run}:s0-{tag}"), size, None, hold).await,
            _ => {
                let key = format!("{run}:rl-{tag}");
                rslock_peer::contended(rslock_urls, &key, size, hold, RSLOCK_LEASE).await
            }
        }
    };
    let (rows, ratios) = contended::alternate(size, rounds, hold, false, 5, variant, |r| {
        let best_peer = r[2..].iter().map(Contended::rate).fold(0.0, f64::max);
        (r[0].rate() / best_peer, r[0].rate() / r[4].rate())
    })
    .await;
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
    contended::assert_no_overlaps(&rows);
}

fn main() {
    let Ok(url) = std::env::var("LOCKKIT_TEST_REDIS_URL") else {
        eprintln!(
            "LOCKKIT_TEST_REDIS_URL is not set; run `eval \"$(scripts/services.sh up)\"` first"
        );
        return;
    };
    common::run_on_workers(async move {
        let Lengths {
            rounds,
            cycles,
            total,
            contended_rounds,
            work_total,
        } = Lengths::read(Lengths {
            rounds: 6,
            cycles: 500,
            total: 2000,
            contended_rounds: 9,
            work_total: 500,
        });
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
            let [r, l, w, s] = uncontended_round(
                &mut raw,
                &cad,
                &raw_key,
                &lock,
                &script_keys,
                &scripts,
                cycles,
            )
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
        println!(
            "\nuncontended acquire+release, {} cycles each, {rounds} rounds, kinds taking turns",
            raw_t.count()
        );
        common::latency_table(
            44,
            &[
                ("raw floor: SET NX PX + EVALSHA compare-del", &raw_t),
                ("lockkit try_lock + release", &lk_t),
                ("lockkit lock + release", &lw_t),
                ("(try_lock's scripts on the raw connection)", &sc_t),
            ],
        );
        for (label, v, per_round) in [("try_lock", &lk_t, &ratios), ("lock", &lw_t, &wait_ratios)] {
            println!(
                "ratio lockkit {label}/raw: p50 {:.3}, mean {:.3}, median of per-round p50 ratios {:.3} (target <= 1.25)",
                us(v.quantile(0.5)) / us(raw_t.quantile(0.5)),
                mean(v) / mean(&raw_t),
                per_round[per_round.len() / 2]
            );
        }
        drop(locks);

        // The server's CPU per acquisition in every contended run: what each contestant costs
        // the one server they share, and so what bounds its rate.
        if let Some(pid) = common::server_pid("redis", &url, &lockkit::redis::INFO) {
            contended::measure_server(pid);
        }

        // Contended: with nothing done under the lock (the releasing client can barge straight
        // back in: the best case for a retry loop), and with 1 ms of work under it.
        let counts = common::client_counts();
        for &count in &counts {
            contended_table(&url, &run, (total, count), contended_rounds, Duration::ZERO).await;
        }
        let size = (work_total, counts[0]);
        contended_table(&url, &run, size, contended_rounds, Duration::from_millis(1)).await;
    });
}
