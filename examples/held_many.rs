//! Holds many locks in one process and reports what each costs this process in memory.
//!
//! ```text
//! cargo run --release --example held_many --features full -- [URL] [N] [HOLD_SECS]
//! ```
//!
//! Defaults: `mem://`, 10 000 locks, held 10 s (long enough for several watchdog renewals of
//! the default 30 s lease to come due on a shorter `lease`, e.g. `redis://…?lease=3s`). It
//! prints the resident set size before and after acquiring, the difference per held lock, and
//! how long acquiring and releasing took. Count the server's side yourself while it holds (for
//! Redis, `redis-cli info commandstats` before and after: the watchdog renews up to 100 locks
//! per script call).

use std::time::{Duration, Instant};

fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[tokio::main]
async fn main() -> lockkit::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "mem://".to_string());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let hold = Duration::from_secs(args.next().and_then(|s| s.parse().ok()).unwrap_or(10));
    let locks = lockkit::connect(&url).await?;
    let run = std::process::id();
    // Warm up the client (connections, sessions, scripts) before the baseline.
    locks
        .mutex(&format!("held-many/{run}/warm-up"))?
        .lock()
        .await?
        .release()
        .await?;
    let before = resident_bytes();
    let started = Instant::now();
    let mut guards = Vec::with_capacity(n);
    for i in 0..n {
        let g = locks
            .mutex(&format!("held-many/{run}/{i}"))?
            .try_lock()
            .await?
            .expect("a fresh name is free");
        guards.push(g);
    }
    let acquired = started.elapsed();
    let after = resident_bytes();
    println!(
        "{url}: {n} locks acquired in {acquired:.2?} ({:.0}/s)",
        n as f64 / acquired.as_secs_f64()
    );
    if let (Some(b), Some(a)) = (before, after) {
        println!(
            "resident set: {:.1} MiB before, {:.1} MiB held, {:.0} bytes per held lock",
            b as f64 / 1048576.0,
            a as f64 / 1048576.0,
            a.saturating_sub(b) as f64 / n as f64
        );
    }
    println!("holding for {hold:?}");
    tokio::time::sleep(hold).await;
    let lost = guards.iter().filter(|g| !g.state().is_live()).count();
    println!("after the hold: {lost} of {n} lost");
    let started = Instant::now();
    for g in guards {
        g.release().await?;
    }
    println!("released in {:.2?}", started.elapsed());
    locks.close().await
}
