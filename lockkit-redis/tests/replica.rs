//! Issue 3, point 7: `wait_replicas` runs WAIT after the acquire; when too few replicas
//! acknowledge, the acquire is rolled back and fails with `ReplicaSync`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lockkit_core::ErrorKind;

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
async fn a_synced_replica_lets_the_acquire_through() {
    let primary = PrivateRedis::start(&["--repl-diskless-sync-delay", "0"]);
    let replica_of = primary.port.to_string();
    let replica = PrivateRedis::start(&["--replicaof", "127.0.0.1", &replica_of]);
    let mut admin = admin(&replica.url()).await;
    let started = Instant::now();
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut admin)
            .await
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "replica did not sync"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let locks = connect(
        &primary.url(),
        &[("wait_replicas", "1"), ("wait_timeout", "2s")],
    )
    .await;
    let g = locks
        .mutex("synced")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("acquired");
    // The replica has the lock too.
    let exists: bool = redis::cmd("EXISTS")
        .arg(lockkit_redis::LockKeys::mutex("lockkit", "synced").lock)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(exists, "the replica did not see the acquire");
    g.release().await.unwrap();
}
