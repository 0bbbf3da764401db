//! Issue 3, point 9: two OS processes contend for one lock; the holder is SIGKILLed and the
//! other process gets the lock once the lease runs out.
//!
//! The test binary re-executes itself: with `LOCKKIT_REDIS_CHILD` set, `child_holder` holds the
//! lock and prints its token, then sleeps until killed.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use lockkit_core::AcquireOptions;

const CHILD_ENV: &str = "LOCKKIT_REDIS_CHILD";
const LEASE: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_holder() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // only meaningful as the child process
    };
    let mut parts = spec.splitn(3, '|');
    let (url, name, out) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let locks = connect(url, &[]).await;
    let g = locks
        .mutex(name)
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(LEASE))
        .await
        .unwrap()
        .unwrap();
    // Written to a file (the test harness may capture stdout), renamed into place atomically.
    std::fs::write(format!("{out}.tmp"), g.token().to_string()).unwrap();
    std::fs::rename(format!("{out}.tmp"), out).unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_process_frees_the_lock_after_its_lease() {
    let Some(url) = shared_url() else { return };
    let name = lockkit_testing::unique_name("xproc");
    let out = std::env::temp_dir().join(format!("lockkit-xproc-{}", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_holder", "--test-threads=1"])
            .env(CHILD_ENV, format!("{url}|{name}|{}", out.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    let token: u64 = loop {
        if let Ok(s) = std::fs::read_to_string(&out) {
            break s.trim().parse().unwrap();
        }
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "child exited without holding the lock"
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "child never held the lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let _ = std::fs::remove_file(&out);

    let locks = connect(&url, &[]).await;
    let lock = locks.mutex(&name).unwrap();
    // The child's watchdog keeps its 1 s lease alive: we are excluded for well over a lease.
    assert!(
        lock.lock_for(LEASE * 2).await.unwrap().is_none(),
        "got the lock while the other process held it"
    );
    child.0.kill().unwrap(); // SIGKILL: no release, no goodbye
    let killed = Instant::now();
    child.0.wait().unwrap();
    let g = lock
        .lock_for(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("lock after the kill");
    let took = killed.elapsed();
    assert!(
        took <= LEASE + Duration::from_millis(500),
        "took {took:?} after the kill"
    );
    assert!(g.token().get() > token);
    g.release().await.unwrap();
}

/// Kills the child if the test fails before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
