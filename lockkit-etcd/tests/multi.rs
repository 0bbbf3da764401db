//! Issue 29, part 3: a multi-lock of mutexes is taken by one transaction when every member's
//! queue is empty (every member's token is its revision); a set with a busy member takes
//! nothing; a set with fixed leases goes member by member.

mod common;

use std::time::Duration;

use common::*;

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

    let g = set.try_lock().await.unwrap().expect("a free set");
    // One revision for every member: one transaction created every key.
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

    // A busy member: nothing is taken.
    let busy = other.mutex(&names[2]).unwrap().lock().await.unwrap();
    assert!(set.try_lock().await.unwrap().is_none());
    for n in [&names[0], &names[1], &names[3]] {
        assert!(
            !other.mutex(n).unwrap().is_locked().await.unwrap(),
            "{n} held"
        );
    }
    busy.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_with_fixed_leases_goes_member_by_member() {
    let Some(url) = url() else { return };
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
    let g = set.acquire(&opts).await.unwrap().expect("a free set");
    // One create transaction per member, one revision each (a fixed lease is a lease of each
    // key's own).
    let tokens: Vec<u64> = g.tokens().iter().map(|(_, t)| t.0).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    g.release().await.unwrap();
}
