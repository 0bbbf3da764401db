//! The lockkit side of the Redisson interop test (`scripts/test.d/20-redisson-interop.sh`).
//!
//! `interop_peer mutex REDIS_URL NAME ITER DIR`: takes the mutex `NAME` in Redisson-compatible
//! mode `ITER` times while a Java program using Redisson's `RLock` does the same. Inside the
//! critical section both sides increment the shared counter `{NAME}:interop-inside` and fail if
//! it is not 1; each hold appends `rust <acquired ms> <released ms>` to `DIR/order`.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockkit_core::{DistLockExt, LockConfig};
use lockkit_redis::redis;

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, url, name, iter, dir] = &args[..] else {
        eprintln!("usage: interop_peer mutex REDIS_URL NAME ITER DIR");
        std::process::exit(2);
    };
    assert_eq!(mode, "mutex", "unknown mode {mode}");
    let iter: usize = iter.parse().unwrap();
    let mut cfg = LockConfig::new(url.as_str());
    cfg.options.insert("redisson_compat".into(), "true".into());
    let locks = lockkit_redis::connect(&cfg).await.unwrap();
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let inside = format!("{{{name}}}:interop-inside");
    // Start together: the JVM on the other side starts far slower than we do.
    let ready = format!("{{{name}}}:interop-ready");
    let _: i64 = redis::cmd("INCR")
        .arg(&ready)
        .query_async(&mut raw)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    loop {
        let n: i64 = redis::cmd("GET")
            .arg(&ready)
            .query_async(&mut raw)
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
    let lock = locks.mutex(name).unwrap();
    let mut order = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(format!("{dir}/order"))
        .unwrap();
    for _ in 0..iter {
        let g = lock.lock().await.unwrap();
        let acquired = now_ms();
        let n: i64 = redis::cmd("INCR")
            .arg(&inside)
            .query_async(&mut raw)
            .await
            .unwrap();
        if n != 1 {
            eprintln!("OVERLAP: Redisson was inside while lockkit held the lock");
            std::process::exit(3);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _: i64 = redis::cmd("DECR")
            .arg(&inside)
            .query_async(&mut raw)
            .await
            .unwrap();
        let released = now_ms();
        writeln!(order, "rust {acquired} {released}").unwrap();
        g.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Leave nothing behind on the test server for long.
    for key in [&inside, &ready] {
        let _: i64 = redis::cmd("EXPIRE")
            .arg(key)
            .arg(60)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
}
