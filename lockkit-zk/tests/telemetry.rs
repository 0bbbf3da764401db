//! Session renewals and reconnects show in the metrics, and a connection cut makes a guard
//! Suspect, then Held again, one event each.

mod common;

use std::time::Duration;

use common::*;
use lockkit_core::telemetry::names::{RECONNECTS, RENEWALS, RENEWAL_DURATION, SUSPECT};
use lockkit_core::LockState;
use lockkit_testing::metrics::{self, until};
use lockkit_testing::proxy::Proxy;
use lockkit_testing::spans;

const OK: [(&str, &str); 2] = [("backend", "zk"), ("result", "ok")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_renewals_are_counted() {
    let Some(url) = url() else { return };
    assert!(metrics::install());
    // A 2 s session is renewed every 500 ms.
    let locks = backend(&with_params(
        &url,
        &format!("session_timeout=2s&prefix={}", prefix()),
    ))
    .await
    .into_locks();
    let before = metrics::read();
    let g = locks.mutex("renewals").unwrap().lock().await.unwrap();
    until("two renewals", |s| {
        s.counter(RENEWALS, &OK) >= before.counter(RENEWALS, &OK) + 2.0
            && s.samples(RENEWAL_DURATION, &OK) >= before.samples(RENEWAL_DURATION, &OK) + 2.0
    })
    .await;
    assert_eq!(g.state(), LockState::Held);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_connection_is_suspect_then_held_and_counts_a_reconnect() {
    let Some(url) = url() else { return };
    assert!(metrics::install());
    assert!(spans::capture());
    let proxy = Proxy::start(server_addr(&url)).await.unwrap();
    let locks = backend(&format!(
        "zk://{}?session_timeout=10s&prefix={}",
        proxy.addr(),
        prefix()
    ))
    .await
    .into_locks();
    let name = lockkit_testing::unique_name("cut");
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    let key = [("backend", "zk")];
    let mine = [("lock", name.as_str())];
    let before = metrics::read().counter(RECONNECTS, &key);

    proxy.cut();
    wait_state(&g, LockState::Suspect, Duration::from_secs(10)).await;
    proxy.heal();
    wait_state(&g, LockState::Held, Duration::from_secs(10)).await;
    until("a reconnect", |s| s.counter(RECONNECTS, &key) > before).await;
    until("one suspect", |s| s.counter(SUSPECT, &mine) == 1.0).await;

    let end = std::time::Instant::now() + Duration::from_secs(5);
    let changes = loop {
        let changes: Vec<_> = spans::events_of_lock(&name)
            .into_iter()
            .filter(|e| e.fields.contains_key("state"))
            .collect();
        if changes.len() >= 2 || std::time::Instant::now() > end {
            break changes;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let states: Vec<&str> = changes.iter().map(|e| e.fields["state"].as_str()).collect();
    assert_eq!(states, ["suspect", "held"], "{changes:?}");
    for e in &changes {
        assert_eq!(
            e.fields.keys().map(String::as_str).collect::<Vec<_>>(),
            ["backend", "lock", "message", "primitive", "state", "token"]
        );
        assert_eq!(e.fields["backend"], "zk");
    }
    g.release().await.unwrap();
}
