//! Renewals and reconnects, which only a backend sees, show in the metrics.

mod common;

use std::time::Duration;

use common::*;
use lockkit_core::telemetry::names::{RECONNECTS, RENEWALS, RENEWAL_DURATION};
use lockkit_core::AcquireOptions;
use lockkit_testing::metrics::{self, until};

const OK: [(&str, &str); 2] = [("backend", "redis"), ("result", "ok")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renewals_are_counted() {
    let Some(url) = shared_url() else { return };
    assert!(metrics::install());
    let locks = connect(&url, &[]).await;
    let before = metrics::read();
    let g = locks
        .mutex(&lockkit_testing::unique_name("renewals"))
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(Duration::from_secs(1)))
        .await
        .unwrap()
        .unwrap();
    // Renewed every third of the lease: two renewals within about 700 ms.
    until("two renewals", |s| {
        s.counter(RENEWALS, &OK) >= before.counter(RENEWALS, &OK) + 2.0
            && s.samples(RENEWAL_DURATION, &OK) >= before.samples(RENEWAL_DURATION, &OK) + 2.0
    })
    .await;
    assert_eq!(g.state(), lockkit_core::LockState::Held);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_pubsub_connection_counts_a_reconnect() {
    if shared_url().is_none() {
        return;
    }
    assert!(metrics::install());
    // A server of its own: killing pub/sub clients disturbs nobody else.
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let name = lockkit_testing::unique_name("reconnect");
    let holder = locks.mutex(&name).unwrap().lock().await.unwrap();
    // A waiter keeps a subscription to its lock's channel standing.
    let w = locks.mutex(&name).unwrap();
    let waiter = tokio::spawn(async move { w.lock_for(Duration::from_secs(20)).await });
    let mut admin = admin(&server.url()).await;
    until_subscribed(
        &mut admin,
        &format!("*{name}*"),
        Duration::from_secs(10),
        "never subscribed",
    )
    .await;
    let key = [("backend", "redis")];
    let before = metrics::read().counter(RECONNECTS, &key);
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(killed >= 1, "no pub/sub connection to kill");
    until("a reconnect", |s| s.counter(RECONNECTS, &key) > before).await;
    // And the waiter still hears of the release.
    holder.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter finished")
        .unwrap()
        .unwrap();
    got.expect("the waiter got the lock")
        .release()
        .await
        .unwrap();
}

/// A renewal that fails (here: the server is gone, so the connection is refused at once) is
/// tried again at a pace (a tenth of the lease, at most 1 s), not in a tight loop; the guard is
/// Suspect from the first failure and Lost at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_renewals_are_retried_at_a_pace() {
    if shared_url().is_none() {
        return;
    }
    assert!(metrics::install());
    const FAILED: [(&str, &str); 2] = [("backend", "redis"), ("result", "failed")];
    let mut server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let lease = Duration::from_secs(3);
    let g = locks
        .mutex(&lockkit_testing::unique_name("paced"))
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(lease))
        .await
        .unwrap()
        .unwrap();
    server.kill();
    let before = metrics::read().counter(RENEWALS, &FAILED);
    until("a failed renewal", |s| {
        s.counter(RENEWALS, &FAILED) > before
    })
    .await;
    assert_eq!(g.state(), lockkit_core::LockState::Suspect);
    let first = metrics::read().counter(RENEWALS, &FAILED);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let retries = metrics::read().counter(RENEWALS, &FAILED) - first;
    // One every 300 ms: about two; a tight loop makes hundreds.
    assert!(retries <= 5.0, "{retries} failed renewals in 600 ms");
    let reason = tokio::time::timeout(lease, g.lost()).await;
    assert_eq!(reason, Ok(lockkit_core::LostReason::LeaseExpired));
    drop(g);
    let _ = locks.close().await;
}
