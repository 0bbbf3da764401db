//! Session renewals and session replacements show in the metrics.

mod common;

use std::time::Duration;

use common::*;
use lockkit_core::telemetry::names::{RECONNECTS, RENEWALS, RENEWAL_DURATION};
use lockkit_core::LockState;
use lockkit_testing::metrics::{self, until};

const OK: [(&str, &str); 2] = [("backend", "etcd"), ("result", "ok")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_renewals_are_counted() {
    let Some(url) = url() else { return };
    assert!(metrics::install());
    // A 3 s session lease is kept alive every second.
    let locks = connect(&url, "lease_ttl=3s").await;
    let before = metrics::read();
    let g = locks
        .mutex(&name("renewals"))
        .unwrap()
        .lock()
        .await
        .unwrap();
    until("two renewals", |s| {
        s.counter(RENEWALS, &OK) >= before.counter(RENEWALS, &OK) + 2.0
            && s.samples(RENEWAL_DURATION, &OK) >= before.samples(RENEWAL_DURATION, &OK) + 2.0
    })
    .await;
    assert_eq!(g.state(), LockState::Held);
    g.release().await.unwrap();
}

/// A session lease revoked behind the handle's back is replaced on the next acquire, and the
/// replacement counts as a reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_session_counts_a_reconnect() {
    let Some(url) = url() else { return };
    assert!(metrics::install());
    let mut r = raw(&url).await;
    let locks = connect(&url, "lease_ttl=3s").await;
    let n = name("replaced");
    let g = locks.mutex(&n).unwrap().lock().await.unwrap();
    let lease = keys(&mut r, &n).await[0].2;
    let key = [("backend", "etcd")];
    let before = metrics::read().counter(RECONNECTS, &key);
    r.lease_revoke(lease).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), g.lost())
        .await
        .expect("lost()");
    // Let the keepalive find the lease gone (it runs every second).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let g2 = locks
        .mutex(&n)
        .unwrap()
        .lock_for(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("next acquire");
    until("a reconnect", |s| s.counter(RECONNECTS, &key) > before).await;
    g2.release().await.unwrap();
    let _ = g.release().await;
}
