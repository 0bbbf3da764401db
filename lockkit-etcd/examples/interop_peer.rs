//! The lockkit side of the Go interop test (`scripts/test.d/40-go-etcd-interop.sh`).
//!
//! ```text
//! interop_peer URL NAME LOGFILE ITERS HOLD_MS
//! ```
//!
//! Locks mutex NAME ITERS times and, while holding it, appends `enter rust <token> <ns>` and
//! `exit rust <token> <ns>` lines to LOGFILE. Go's `concurrency.Mutex` on the prefix
//! `lockkit/NAME` (the default key prefix, NAME needing no encoding) appends `go` lines to the
//! same file; the script checks that no two holders were ever inside at once.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockkit_core::LockConfig;

fn append(path: &str, line: String) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open log");
    writeln!(f, "{line}").expect("write log");
    f.sync_all().expect("sync log");
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 6 {
        eprintln!("usage: interop_peer URL NAME LOGFILE ITERS HOLD_MS");
        std::process::exit(2);
    }
    let (url, name, log) = (&args[1], &args[2], &args[3]);
    let iters: u32 = args[4].parse().expect("ITERS");
    let hold = Duration::from_millis(args[5].parse().expect("HOLD_MS"));
    let locks = lockkit_etcd::connect(&LockConfig::new(url.as_str()))
        .await
        .expect("connect");
    let m = locks.mutex(name).expect("name");
    for _ in 0..iters {
        let g = m
            .lock_for(Duration::from_secs(60))
            .await
            .expect("lock")
            .expect("acquired within 60 s");
        append(log, format!("enter rust {} {}", g.token(), now_ns()));
        tokio::time::sleep(hold).await;
        append(log, format!("exit rust {} {}", g.token(), now_ns()));
        g.release().await.expect("release");
        tokio::time::sleep(hold / 2).await;
    }
    locks.close().await.expect("close");
}
