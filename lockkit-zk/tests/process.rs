//! A holder in another process is killed (SIGKILL) mid-hold: the lock comes back when ZooKeeper
//! expires its session.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use lockkit_core::LockConfig;

const CHILD_ENV: &str = "LOCKKIT_ZK_CHILD_URL";

/// In the child process: take the lock, say so, and hold it until killed.
#[tokio::test]
async fn child_holder() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let locks = lockkit_zk::connect(&LockConfig::new(url)).await.unwrap();
    let guard = locks.mutex("killed").unwrap().lock().await.unwrap();
    println!("HELD {}", guard.token());
    tokio::time::sleep(Duration::from_secs(60)).await;
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_process_releases_after_session_expiry() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("session_timeout=1s&prefix={}", prefix()));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holder", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap() == 0 || line.contains("HELD ") {
                return line;
            }
        }
    });
    let line = tokio::time::timeout(Duration::from_secs(20), line)
        .await
        .unwrap()
        .unwrap();
    let child_token: u64 = line
        .split("HELD ")
        .nth(1)
        .expect("child held the lock")
        .trim()
        .parse()
        .unwrap();

    let locks = lockkit_zk::connect(&LockConfig::new(url)).await.unwrap();
    let lock = locks.mutex("killed").unwrap();
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "the child holds the lock"
    );
    child.kill().unwrap(); // SIGKILL: no release, no session close
    child.wait().unwrap();
    let killed = Instant::now();
    let g = lock
        .lock_for(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("lock back after the dead holder's session expired");
    let took = killed.elapsed();
    assert!(g.token().get() > child_token);
    assert!(took < Duration::from_secs(5), "took {took:?}");
    eprintln!("lock came back {took:?} after SIGKILL (session timeout 1 s)");
    g.release().await.unwrap();
}
