//! Runs the uncontended lock + unlock cycle in a loop, for profiling (`perf record`).
//!
//! `cargo run --release -p lockkit-etcd --example cycle_loop -- [SECONDS]`

use std::time::{Duration, Instant};

use lockkit_core::LockConfig;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let url = std::env::var("LOCKKIT_TEST_ETCD_URL").unwrap_or("etcd://127.0.0.1:12379".into());
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let locks = lockkit_etcd::connect(&LockConfig::new(url)).await.unwrap();
    let m = locks.mutex("cycle-loop").unwrap();
    let until = Instant::now() + Duration::from_secs(secs);
    let mut n = 0u64;
    while Instant::now() < until {
        m.lock().await.unwrap().release().await.unwrap();
        n += 1;
    }
    println!("{n} cycles, {:.0} us each", secs as f64 * 1e6 / n as f64);
    locks.close().await.unwrap();
}
