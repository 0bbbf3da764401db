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
