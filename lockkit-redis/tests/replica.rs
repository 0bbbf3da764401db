//! Replica safety (`wait_replicas`): acquires, renewals and releases are followed by `WAIT` on
//! a connection of the handle's own; `auto` (the default) waits for the replicas connected now
//! and costs nothing without replicas; an acquire the replicas did not get is rolled back with
//! `ReplicaSync`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lockkit_core::{AcquireOptions, ErrorKind, LockState};
use lockkit_testing::unique_name;

/// A primary and one replica that has synced with it and that the primary lists as online.
async fn primary_and_replica() -> (PrivateRedis, PrivateRedis) {
    // A disk-based sync: after a diskless one, Redis 7 streams writes to the new replica only
    // once it has acknowledged the data it loaded, which takes it up to ~10 s.
    let primary = PrivateRedis::start(&["--repl-diskless-sync", "no"]);
    let replica_of = primary.port.to_string();
    let replica = PrivateRedis::start(&["--replicaof", "127.0.0.1", &replica_of]);
    let mut admin = admin(&primary.url()).await;
    let started = Instant::now();
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut admin)
            .await
            .unwrap();
        // The primary counts it (ROLE lists it) once it is online.
        if info.contains("state=online") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "replica did not sync"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (primary, replica)
}

/// How many `WAIT` commands the server at `url` ran.
async fn waits_run(url: &str) -> u64 {
    command_calls(&mut admin(url).await, &["wait"]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_replica_ack_rolls_back_with_a_typed_error() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(
        &server.url(),
        &[("wait_replicas", "1"), ("wait_timeout", "100ms")],
    )
    .await;
    let plain = connect(&server.url(), &[]).await;
    let e = locks.mutex("wait").unwrap().try_lock().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ReplicaSync, "{e}");
    assert!(e.is_retryable());
    assert!(
        !plain.mutex("wait").unwrap().is_locked().await.unwrap(),
        "not rolled back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replicas_auto_runs_no_wait() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    // (The connect checks once, with `WAIT 0 0`, that this user may run WAIT.)
    let after_connect = waits_run(&server.url()).await;
    for _ in 0..3 {
        let g = locks.mutex("no-replicas").unwrap().lock().await.unwrap();
        g.release().await.unwrap();
    }
    let r = locks
        .rwlock("no-replicas-rw")
        .unwrap()
        .read_lock()
        .await
        .unwrap();
    r.release().await.unwrap();
    assert_eq!(waits_run(&server.url()).await, after_connect);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_waits_for_the_connected_replica_on_acquire_renewal_and_release() {
    let (primary, replica) = primary_and_replica().await;
    // The default: auto.
    let locks = connect(&primary.url(), &[]).await;
    let name = unique_name("synced");
    let before = waits_run(&primary.url()).await;
    let g = locks
        .mutex(&name)
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(Duration::from_millis(600)))
        .await
        .unwrap()
        .unwrap();
    // The replica has the lock as soon as the acquire returns.
    let mut on_replica = admin(&replica.url()).await;
    let exists: bool = redis::cmd("EXISTS")
        .arg(lockkit_redis::LockKeys::mutex("lockkit", &name).lock)
        .query_async(&mut on_replica)
        .await
        .unwrap();
    assert!(exists, "the replica did not see the acquire");
    let after_acquire = waits_run(&primary.url()).await;
    assert!(after_acquire > before, "no WAIT after the acquire");
    // Renewals (every 200 ms here) wait too.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let after_renewals = waits_run(&primary.url()).await;
    assert!(after_renewals > after_acquire, "no WAIT after a renewal");
    assert_eq!(g.state(), LockState::Held);
    g.release().await.unwrap();
    // The release's WAIT runs in the background (its caller learns nothing from it).
    let released = Instant::now();
    while waits_run(&primary.url()).await <= after_renewals {
        assert!(
            released.elapsed() < Duration::from_secs(3),
            "no WAIT after the release"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shared = locks.rwlock(&name).unwrap().read_lock().await.unwrap();
    shared.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_rolls_back_an_acquire_no_replica_acknowledged() {
    let (primary, replica) = primary_and_replica().await;
    let locks = connect(&primary.url(), &[("wait_timeout", "200ms")]).await;
    let plain = connect(&primary.url(), &[("wait_replicas", "0")]).await;
    let name = unique_name("unsynced");
    // Paused, the replica stays connected and acknowledges nothing.
    replica.pause();
    let e = locks.mutex(&name).unwrap().try_lock().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ReplicaSync, "{e}");
    assert!(
        !plain.mutex(&name).unwrap().is_locked().await.unwrap(),
        "not rolled back"
    );
    let e = locks.rwlock(&name).unwrap().try_read().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ReplicaSync, "{e}");
    assert!(!plain.rwlock(&name).unwrap().is_locked().await.unwrap());
    replica.resume();
    let g = locks.mutex(&name).unwrap().try_lock().await.unwrap();
    g.expect("free").release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_the_replicas_miss_makes_the_guard_suspect() {
    let (primary, replica) = primary_and_replica().await;
    let locks = connect(&primary.url(), &[("wait_timeout", "500ms")]).await;
    let g = locks
        .mutex(&unique_name("renewal"))
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(Duration::from_secs(3)))
        .await
        .unwrap()
        .unwrap();
    let mut changes = g.state_changes();
    replica.pause();
    let suspect = tokio::time::timeout(Duration::from_secs(3), async {
        while changes.next().await != Some(LockState::Suspect) {}
    })
    .await;
    replica.resume();
    assert!(
        suspect.is_ok(),
        "a renewal the replica missed still counted"
    );
    let held = tokio::time::timeout(Duration::from_secs(3), async {
        while changes.next().await != Some(LockState::Held) {}
    })
    .await;
    assert!(
        held.is_ok(),
        "the guard did not recover once the replica was back"
    );
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_never_holds_up_the_handles_other_commands() {
    let (primary, replica) = primary_and_replica().await;
    let locks = connect(&primary.url(), &[("wait_timeout", "3s")]).await;
    replica.pause();
    let waiting = {
        let m = locks.mutex(&unique_name("slow-wait")).unwrap();
        tokio::spawn(async move { m.try_lock().await.map(|g| g.is_some()) })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Other commands of the same handle run while that WAIT blocks its own connection.
    let other = locks.mutex(&unique_name("other")).unwrap();
    assert!(!other.is_locked().await.unwrap());
    assert!(
        !waiting.is_finished(),
        "the other command waited for the WAIT to end"
    );
    replica.resume();
    assert!(waiting.await.unwrap().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_that_may_not_run_role_turns_auto_off_and_a_count_into_a_config_error() {
    let (primary, _replica) = primary_and_replica().await;
    let mut admin = admin(&primary.url()).await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("plain")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-role")
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://plain:pw@127.0.0.1:{}", primary.port);
    let locks = connect(&url, &[]).await;
    let g = locks.mutex("no-role").unwrap().try_lock().await.unwrap();
    g.expect("free").release().await.unwrap();
    let e = lockkit_redis::connect(&config(&url, &[("wait_replicas", "1")]))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
}

/// An extend the replicas did not acknowledge was still applied by the primary: the guard must
/// not outlive the lease the primary now counts (issue 25, item 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_the_replicas_miss_shortens_the_guard_to_the_asked_lease() {
    let (primary, replica) = primary_and_replica().await;
    let locks = connect(&primary.url(), &[("wait_timeout", "200ms")]).await;
    let plain = connect(&primary.url(), &[("wait_replicas", "0")]).await;
    let name = unique_name("extend-unsynced");
    let g = locks
        .mutex(&name)
        .unwrap()
        .acquire(&AcquireOptions::new().fixed_lease(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    replica.pause();
    let asked = Instant::now();
    let e = g.extend(Duration::from_secs(2)).await.unwrap_err();
    replica.resume();
    assert_eq!(e.kind(), ErrorKind::ReplicaSync, "{e}");
    // The primary applied it: it counts 2 s from the extend, and so must the guard.
    let server_left = plain
        .mutex(&name)
        .unwrap()
        .remaining_lease()
        .await
        .unwrap()
        .expect("held");
    assert!(
        server_left <= Duration::from_secs(2),
        "the primary did not apply the extend(2s): {server_left:?} left"
    );
    let guard_left = g.remaining().expect("a fixed lease has a deadline");
    assert!(
        guard_left <= server_left + Duration::from_millis(50),
        "{:?} after an extend(2s) the primary applied, the guard has {guard_left:?} left and the \
         server {server_left:?}",
        asked.elapsed()
    );
}
