//! The `file://` backend across OS processes: this test binary runs itself as the holder
//! process (the `holder_process` test, active only when `LOCKKIT_FILE_HOLDER_DIR` is set).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use lockkit::FencingToken;

const DIR_VAR: &str = "LOCKKIT_FILE_HOLDER_DIR";
const NAME: &str = "cross/process";

/// In the child: takes the lock, prints `HELD <token>`, and sleeps until killed.
#[tokio::test]
async fn holder_process() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let locks = lockkit::connect(&format!("file://{dir}")).await.unwrap();
    let guard = locks.mutex(NAME).unwrap().lock().await.unwrap();
    println!("HELD {}", guard.token().0);
    tokio::time::sleep(Duration::from_secs(300)).await;
    drop(guard);
}

/// Kills the child if the test fails half-way, so no holder outlives the run.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_releases_its_lock() {
    if std::env::var(DIR_VAR).is_ok() {
        return;
    }
    // Declared before the child, so the child is killed and reaped before the directory goes.
    let dir = lockkit_testing::ScratchDir::new("xproc");
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "holder_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_VAR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let held = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| {
                // The harness prints "test holder_process ... " on the same line.
                let (_, t) = l.split_once("HELD ")?;
                t.trim().parse::<u64>().ok()
            })
    });
    let child_token = tokio::time::timeout(Duration::from_secs(60), held)
        .await
        .expect("child took the lock")
        .unwrap()
        .expect("child printed its token");

    let locks = lockkit::connect(&dir.url()).await.unwrap();
    let lock = locks.mutex(NAME).unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert!(
        lock.lock_for(Duration::from_millis(300))
            .await
            .unwrap()
            .is_none(),
        "got a lock another process holds"
    );
    let info = locks
        .inspect(NAME, lockkit::Primitive::Mutex)
        .await
        .unwrap();
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].token, Some(FencingToken(child_token)));
    assert!(info.holders[0].owner.contains(&child.0.id().to_string()));

    child.0.kill().unwrap(); // SIGKILL: no cleanup runs in the holder
    child.0.wait().unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), lock.lock())
        .await
        .expect("the dead holder's lock was released by the OS")
        .unwrap();
    assert!(g.token() > FencingToken(child_token));
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_survive_a_restart_of_the_backend() {
    if std::env::var(DIR_VAR).is_ok() {
        return;
    }
    let dir = lockkit_testing::ScratchDir::new("restart");
    let url = dir.url();
    let first = {
        let locks = lockkit::connect(&url).await.unwrap();
        let g = locks.mutex("r").unwrap().lock().await.unwrap();
        g.token()
    };
    let locks = lockkit::connect(&url).await.unwrap();
    let g = locks.mutex("r").unwrap().lock().await.unwrap();
    assert!(g.token() > first);
}
