//! Issue 29, part 3: a multi-lock of mutexes is taken by one transaction when every member's
//! queue is empty; a set with a busy member takes nothing and then waits member by member; a set
//! with fixed leases goes member by member. One test: it counts the server's transactions.

mod common;

use std::time::Duration;

use common::*;

/// Transactions the server has started.
fn txns(url: &str) -> f64 {
    metric_sum(url, "grpc_server_started_total", &[r#"grpc_method="Txn""#])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_set_is_one_transaction_and_a_busy_one_takes_nothing() {
    let Some(url) = url() else { return };
    let locks = connect(&url, "").await;
    let other = connect(&url, "").await;
    let names: Vec<String> = (0..4).map(|i| name(&format!("multi-{i}"))).collect();
    let set = locks.multi(&names).unwrap();
    // The first take sets up the names' watches.
    let first = set.try_lock().await.unwrap().expect("a free set");
    let first_tokens: Vec<u64> = first.tokens().iter().map(|(_, t)| t.0).collect();
    first.release().await.unwrap();

    let before = txns(&url);
    let g = set.try_lock().await.unwrap().expect("a free set");
    assert_eq!(
        txns(&url) - before,
        1.0,
        "four free members take one transaction"
    );
    let tokens: Vec<u64> = g.tokens().iter().map(|(_, t)| t.0).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] == w[1]),
        "one revision: {tokens:?}"
    );
    assert!(tokens[0] > first_tokens[0]);
    for n in &names {
        assert!(
            other.mutex(n).unwrap().try_lock().await.unwrap().is_none(),
            "{n} free"
        );
    }
    g.release().await.unwrap();

    // A busy member: one transaction that takes nothing.
    let busy = other.mutex(&names[2]).unwrap().lock().await.unwrap();
    let before = txns(&url);
    assert!(set.try_lock().await.unwrap().is_none());
    assert_eq!(
        txns(&url) - before,
        1.0,
        "a try of a busy set is one transaction"
    );
    for n in [&names[0], &names[1], &names[3]] {
        assert!(
            !other.mutex(n).unwrap().is_locked().await.unwrap(),
            "{n} held"
        );
    }
    // A waiting acquire then queues member by member and gets the set once it is free.
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        busy.release().await.unwrap();
    });
    let g = set
        .lock_for(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the set once its busy member is released");
    assert!(g.token(&names[2]).unwrap().0 > tokens[2]);
    release.await.unwrap();
    g.release().await.unwrap();

    a_set_with_fixed_leases_goes_member_by_member(&url).await;
}

/// A set with fixed leases goes member by member. (Called by the one test of this binary: the
/// server's transaction count is server-wide.)
async fn a_set_with_fixed_leases_goes_member_by_member(url: &str) {
    let url = url.to_string();
    let locks = connect(&url, "").await;
    let names: Vec<String> = (0..3).map(|i| name(&format!("multi-fixed-{i}"))).collect();
    let set = locks.multi(&names).unwrap();
    let opts = lockkit_core::AcquireOptions::new()
        .fixed_lease(Duration::from_secs(10))
        .no_wait();
    set.acquire(&opts)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    let before = txns(&url);
    let g = set.acquire(&opts).await.unwrap().expect("a free set");
    // One create transaction per member (a fixed lease is a lease of each key's own).
    assert_eq!(txns(&url) - before, 3.0);
    let tokens: Vec<u64> = g.tokens().iter().map(|(_, t)| t.0).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    g.release().await.unwrap();
}
