use std::time::Duration;

use super::{assert_kind, fixed, mutex, name, within, SHORT, SOON};
use lockkit_core::{ErrorKind, Locks};

/// Tokens strictly increase across 100 holders on alternating handles.
pub async fn tokens_increase_across_100_holders(locks: &Locks) {
    let n = name("tokens-100");
    let handles = [mutex(locks, &n), mutex(locks, &n)];
    let mut last = None;
    for i in 0..100 {
        let g = handles[i % 2].lock().await.unwrap();
        if let Some(prev) = last {
            assert!(
                g.token() > prev,
                "holder {i}: token {} after {prev}",
                g.token()
            );
        }
        last = Some(g.token());
        g.release().await.unwrap();
    }
}

/// A guard released by drop, then a new holder: the token still increases.
pub async fn tokens_increase_across_drop_release(locks: &Locks) {
    let n = name("tokens-drop");
    let g1 = mutex(locks, &n).lock().await.unwrap();
    let t1 = g1.token();
    drop(g1);
    let g2 = within(SOON, "acquire after drop", mutex(locks, &n).lock_for(SOON))
        .await
        .unwrap();
    let g2 = g2.expect("a dropped guard must release its lock");
    assert!(g2.token() > t1);
}

/// A lease that expired, then a new holder: the token still increases.
pub async fn tokens_increase_across_lease_expiry(locks: &Locks) {
    let n = name("tokens-expiry");
    if !locks.capabilities().mutex.fixed_lease {
        assert_kind(
            mutex(locks, &n).acquire(&fixed(SHORT)).await,
            ErrorKind::Unsupported,
            "fixed lease",
        );
        return;
    }
    let g1 = mutex(locks, &n)
        .acquire(&fixed(SHORT))
        .await
        .unwrap()
        .unwrap();
    let g2 = within(
        Duration::from_secs(15),
        "takeover",
        mutex(locks, &n).lock_for(Duration::from_secs(10)),
    )
    .await
    .unwrap()
    .expect("expired lock taken over");
    assert!(
        g2.token() > g1.token(),
        "token {} after expired {}",
        g2.token(),
        g1.token()
    );
}

/// Write-lock tokens order writers.
pub async fn rw_write_tokens_increase(locks: &Locks) {
    let n = name("rw-tokens");
    if locks.capabilities().rwlock.is_none() {
        assert_kind(locks.rwlock(&n), ErrorKind::Unsupported, "rwlock");
        return;
    }
    let rw = locks.rwlock(&n).unwrap();
    let mut last = None;
    for _ in 0..10 {
        let w = rw.write_lock().await.unwrap();
        if let Some(prev) = last {
            assert!(w.token() > prev);
        }
        last = Some(w.token());
        w.release().await.unwrap();
    }
}
