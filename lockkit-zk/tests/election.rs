//! The ZooKeeper election beyond the conformance cases: a leader whose node someone else
//! deletes is told (Curator's LeaderLatch is not), an observer follows a proclamation and a
//! deletion, and the election directory's container being removed does not stop an observer.

mod common;

use std::time::Duration;

use common::*;
use lockkit_core::{ErrorKind, LockState};

const SOON: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_node_is_deleted_is_told_and_observers_follow() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let b = backend(&url).await;
    let e = b.election("deleted").unwrap();
    let mut changes = e.observe().await.unwrap();
    assert_eq!(changes.next().await.unwrap().unwrap(), None);
    let lead = e.campaign("v1").await.unwrap();
    let seen = changes.next().await.unwrap().unwrap().expect("a leader");
    assert_eq!((seen.value(), seen.term()), (&b"v1"[..], lead.term()));
    lead.proclaim("v2").await.unwrap();
    let seen = changes.next().await.unwrap().unwrap().expect("a leader");
    assert_eq!(seen.value(), b"v2");

    let dir = b.election_path("deleted");
    let nodes = children(&b, &dir).await;
    assert_eq!(nodes.len(), 1);
    assert!(
        nodes[0].contains("-latch-"),
        "Curator's LeaderLatch name: {nodes:?}"
    );
    let client = b.zk_client().unwrap();
    client
        .delete(&format!("{dir}/{}", nodes[0]), None)
        .await
        .unwrap();
    tokio::time::timeout(SOON, lead.lost())
        .await
        .expect("a deleted leader is told");
    assert_eq!(lead.state(), LockState::Lost);
    let refused = lead.proclaim("late").await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::LockLost);
    let first_term = lead.term();
    assert!(!lead.resign().await.unwrap(), "it no longer led");
    let seen = tokio::time::timeout(SOON, changes.next()).await.unwrap();
    assert_eq!(seen.unwrap().unwrap(), None, "observers see nobody lead");

    // The emptied directory may go (ZooKeeper reaps containers); a new leader is still seen.
    let _ = client.delete(&dir, None).await;
    let again = e.campaign("v3").await.unwrap();
    let seen = tokio::time::timeout(SOON, changes.next()).await.unwrap();
    let seen = seen.unwrap().unwrap().expect("a leader");
    assert_eq!((seen.value(), seen.term()), (&b"v3"[..], again.term()));
    assert!(again.term() > first_term);
}

/// With `election_layout=selector`, candidates are Curator `LeaderSelector`'s mutex nodes (its
/// `InterProcessMutex`: `-lock-`, the value as data), and leader, observe and hand-over work
/// the same; `inspect` reads that layout too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_selector_layout_uses_mutex_nodes() {
    let Some(url) = url() else { return };
    let url = with_params(
        &url,
        &format!("prefix={}&election_layout=selector", prefix()),
    );
    let b = backend(&url).await;
    let e = b.election("selector").unwrap();
    let mut changes = e.observe().await.unwrap();
    assert_eq!(changes.next().await.unwrap().unwrap(), None);
    let lead = e.campaign("s1").await.unwrap();
    let seen = changes.next().await.unwrap().unwrap().expect("a leader");
    assert_eq!((seen.value(), seen.term()), (&b"s1"[..], lead.term()));
    let dir = b.election_path("selector");
    let nodes = children(&b, &dir).await;
    assert_eq!(nodes.len(), 1);
    assert!(
        nodes[0].contains("-lock-"),
        "Curator's LeaderSelector (InterProcessMutex) name: {nodes:?}"
    );
    let info = b
        .inspect("selector", lockkit_core::Primitive::Election)
        .await
        .unwrap();
    assert_eq!(info.holders.len(), 1);
    let next = tokio::spawn({
        let e = b.election("selector").unwrap();
        async move { e.campaign("s2").await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(lead.resign().await.unwrap());
    let next = tokio::time::timeout(SOON, next)
        .await
        .expect("hand-over")
        .unwrap()
        .unwrap();
    assert!(next.term() > seen.term());
    let mut last = changes.next().await.unwrap().unwrap();
    if last.is_none() {
        last = changes.next().await.unwrap().unwrap();
    }
    assert_eq!(last.map(|l| l.term()), Some(next.term()));
    next.resign().await.unwrap();
}
