//! The lockkit side of the Redisson interop test (`scripts/test.d/20-redisson-interop.sh`).
//!
//! `interop_peer MODE REDIS_URL NAME WORKERS ITER PERMITS DIR`: `WORKERS` tasks, each with its
//! own Redisson-compatible client (as separate services would have), take the object `NAME`
//! `ITER` times each while a Java program using Redisson does the same (`interop/redisson`):
//!
//! * `mutex`: the mutex (Redisson's `RFencedLock`/`RLock` on the Java side);
//! * `fair`: the mutex in fair mode (Redisson's `RFairLock`: one queue for both sides);
//! * `fairorder`: while Redisson holds the fair lock, a lockkit waiter, a Redisson waiter and a
//!   lockkit waiter queue in turn; they must get the lock in that order (the turns are logged
//!   to `{NAME}:interop-turns`, which this side checks);
//! * `rw`: the read-write lock, every third hold a write (`RReadWriteLock`);
//! * `sem`: a semaphore of `PERMITS` permits, one per hold (`RSemaphore`).
//!
//! Inside, both sides add to the shared counter `{NAME}:interop-inside` (a reader or permit
//! holder 1, a writer or mutex holder 1000) and fail on an overlap; each hold appends
//! `rust KIND <acquired ms> <released ms> <token>` to `DIR/rust.order`.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockkit_core::LockConfig;
use lockkit_redis::redis;

const EXCLUSIVE: i64 = 1000;

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

struct Run {
    mode: String,
    url: String,
    name: String,
    iter: usize,
    permits: u32,
    order: Mutex<std::fs::File>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, url, name, workers, iter, permits, dir] = &args[..] else {
        eprintln!(
            "usage: interop_peer mutex|fair|fairorder|rw|sem REDIS_URL NAME WORKERS ITER PERMITS DIR"
        );
        std::process::exit(2);
    };
    assert!(
        ["mutex", "fair", "fairorder", "rw", "sem"].contains(&mode.as_str()),
        "unknown mode {mode}"
    );
    let order = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(format!("{dir}/rust.order"))
        .unwrap();
    let run = Arc::new(Run {
        mode: mode.clone(),
        url: url.clone(),
        name: name.clone(),
        iter: iter.parse().unwrap(),
        permits: permits.parse().unwrap(),
        order: Mutex::new(order),
    });
    let mut raw = raw(url).await;
    start_together(&mut raw, name).await;
    if mode == "fairorder" {
        fair_order(&run, &mut raw).await;
        expire_extras(&mut raw, name).await;
        return;
    }
    let workers: usize = workers.parse().unwrap();
    let tasks: Vec<_> = (0..workers)
        .map(|_| tokio::spawn(work(run.clone())))
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    expire_extras(&mut raw, name).await;
}

/// Leaves nothing of the test behind on the server for long.
async fn expire_extras(raw: &mut redis::aio::MultiplexedConnection, name: &str) {
    for key in ["inside", "ready", "step", "turns"] {
        let _: i64 = redis::cmd("EXPIRE")
            .arg(format!("{{{name}}}:interop-{key}"))
            .arg(60)
            .query_async(raw)
            .await
            .unwrap();
    }
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Start together: the JVM on the other side starts far slower than we do.
async fn start_together(raw: &mut redis::aio::MultiplexedConnection, name: &str) {
    let ready = format!("{{{name}}}:interop-ready");
    let _: i64 = redis::cmd("INCR")
        .arg(&ready)
        .query_async(raw)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    loop {
        let n: i64 = redis::cmd("GET")
            .arg(&ready)
            .query_async(raw)
            .await
            .unwrap();
        if n >= 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the Redisson peer never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn work(run: Arc<Run>) {
    let locks = compat(&run.url).await;
    let mut raw = raw(&run.url).await;
    let inside = format!("{{{}}}:interop-inside", run.name);
    for i in 0..run.iter {
        let (kind, weight, guard) = match run.mode.as_str() {
            "mutex" => {
                let g = locks.mutex(&run.name).unwrap().lock().await.unwrap();
                ("x", EXCLUSIVE, Guard::Lock(g))
            }
            "fair" => {
                let fair = lockkit_core::AcquireOptions::new().fair(true);
                let g = locks.mutex(&run.name).unwrap().acquire(&fair).await;
                ("x", EXCLUSIVE, Guard::Lock(g.unwrap().unwrap()))
            }
            "rw" if i % 3 == 0 => {
                let g = locks.rwlock(&run.name).unwrap().write_lock().await;
                ("w", EXCLUSIVE, Guard::Write(g.unwrap()))
            }
            "rw" => {
                let g = locks.rwlock(&run.name).unwrap().read_lock().await;
                ("r", 1, Guard::Read(g.unwrap()))
            }
            _ => {
                let s = locks.semaphore(&run.name, run.permits).unwrap();
                ("p", 1, Guard::Permit(s.acquire_one().await.unwrap()))
            }
        };
        let acquired = now_ms();
        let now: i64 = redis::cmd("INCRBY")
            .arg(&inside)
            .arg(weight)
            .query_async(&mut raw)
            .await
            .unwrap();
        let ok = match kind {
            "x" | "w" => now == EXCLUSIVE,
            "r" => now < EXCLUSIVE,
            _ => now <= i64::from(run.permits),
        };
        if !ok {
            eprintln!("OVERLAP: lockkit {kind} hold saw {now} inside");
            std::process::exit(3);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _: i64 = redis::cmd("DECRBY")
            .arg(&inside)
            .arg(weight)
            .query_async(&mut raw)
            .await
            .unwrap();
        let released = now_ms();
        let token = guard.token();
        writeln!(
            run.order.lock().unwrap(),
            "rust {kind} {acquired} {released} {token}"
        )
        .unwrap();
        guard.release().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn compat(url: &str) -> lockkit_core::Locks {
    let mut cfg = LockConfig::new(url);
    cfg.options.insert("redisson_compat".into(), "true".into());
    lockkit_redis::connect(&cfg).await.unwrap()
}

/// Waits (30 s at most) until the integer at `key` (`GET`, or `LLEN` with `list`) reaches `n`.
async fn until(conn: &mut redis::aio::MultiplexedConnection, key: &str, list: bool, n: i64) {
    let started = std::time::Instant::now();
    loop {
        let cmd = if list { "LLEN" } else { "GET" };
        let v: Option<i64> = redis::cmd(cmd).arg(key).query_async(conn).await.unwrap();
        if v.unwrap_or(0) >= n {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{key} never reached {n}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The lockkit side of `fairorder` (see the module docs; the steps go through
/// `{NAME}:interop-step`).
async fn fair_order(run: &Run, conn: &mut redis::aio::MultiplexedConnection) {
    let step = format!("{{{}}}:interop-step", run.name);
    let turns = format!("{{{}}}:interop-turns", run.name);
    let queue = lockkit_redis::LockKeys::redisson_mutex(&run.name)
        .unwrap()
        .queue;
    let waiter = |label: &'static str| {
        let (name, url, turns) = (run.name.clone(), run.url.clone(), turns.clone());
        tokio::spawn(async move {
            let locks = compat(&url).await;
            let fair = lockkit_core::AcquireOptions::new().fair(true);
            let g = locks.mutex(&name).unwrap().acquire(&fair).await;
            let g = g.unwrap().unwrap();
            let mut conn = raw(&url).await;
            let _: i64 = redis::cmd("RPUSH")
                .arg(&turns)
                .arg(label)
                .query_async(&mut conn)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            g.release().await.unwrap();
        })
    };
    // Redisson holds the lock; then lockkit, Redisson and lockkit queue, in turn.
    until(conn, &step, false, 1).await;
    let first = waiter("lockkit-1");
    until(conn, &queue, true, 1).await;
    let _: () = redis::cmd("SET")
        .arg(&step)
        .arg(2)
        .query_async(conn)
        .await
        .unwrap();
    until(conn, &step, false, 3).await;
    let second = waiter("lockkit-2");
    until(conn, &queue, true, 3).await;
    let _: () = redis::cmd("SET")
        .arg(&step)
        .arg(4)
        .query_async(conn)
        .await
        .unwrap();
    first.await.unwrap();
    second.await.unwrap();
    let order: Vec<String> = redis::cmd("LRANGE")
        .arg(&turns)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap();
    assert_eq!(
        order,
        ["lockkit-1", "redisson", "lockkit-2"],
        "Redisson's and lockkit's fair waiters were not served in the order they queued"
    );
    println!("fairorder: {}", order.join(" -> "));
}

enum Guard {
    Lock(lockkit_core::LockGuard),
    Read(lockkit_core::ReadGuard),
    Write(lockkit_core::WriteGuard),
    Permit(lockkit_core::Permit),
}

impl Guard {
    /// The fencing token where Redisson has one too (the mutex: RFencedLock's counter), else -1.
    fn token(&self) -> i64 {
        match self {
            Guard::Lock(g) => g.token().0 as i64,
            _ => -1,
        }
    }

    async fn release(self) {
        match self {
            Guard::Lock(g) => g.release().await.unwrap(),
            Guard::Read(g) => g.release().await.unwrap(),
            Guard::Write(g) => g.release().await.unwrap(),
            Guard::Permit(g) => g.release().await.unwrap(),
        }
    }
}
