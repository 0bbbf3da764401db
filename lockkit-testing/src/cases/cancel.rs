use std::time::{Duration, Instant};

use super::{mutex, name, within, SOON};
use lockkit_core::{AcquireOptions, Locks};

/// A dropped guard releases its lock in the background.
pub async fn drop_releases_in_background(locks: &Locks) {
    let n = name("drop");
    drop(mutex(locks, &n).lock().await.unwrap());
    let next = within(SOON, "acquire after drop", mutex(locks, &n).lock_for(SOON))
        .await
        .unwrap();
    assert!(next.is_some(), "a dropped guard kept its lock");
}

/// Dropping a waiting acquire leaves nothing behind, and the next acquirer is not delayed.
pub async fn dropped_waiting_acquire_leaves_no_trace(locks: &Locks) {
    let n = name("cancel");
    let holder = mutex(locks, &n).lock().await.unwrap();
    let waiter = mutex(locks, &n);
    {
        let acquire = waiter.lock();
        tokio::select! {
            _ = acquire => panic!("waiter got a held lock"),
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
    }
    // Also cancel from another task, the way a timeout or an aborted task would.
    let w2 = mutex(locks, &n);
    let task = tokio::spawn(async move { w2.lock().await.map(drop) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    task.abort();
    let _ = task.await;
    holder.release().await.unwrap();
    let started = Instant::now();
    let next = within(SOON, "next acquirer", mutex(locks, &n).lock_for(SOON))
        .await
        .unwrap();
    assert!(
        next.is_some(),
        "a cancelled waiter kept the lock from the next acquirer"
    );
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "next acquirer delayed {took:?} by a cancelled waiter"
    );
    next.unwrap().release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !mutex(locks, &n).is_locked().await.unwrap(),
        "a cancelled acquire left the lock held"
    );
}

/// A waiter queued behind one that gives up still gets the lock when the holder releases: a
/// backend whose waiters each wait on the one before them (etcd's mutex, ZooKeeper) must move
/// on to the next one before.
pub async fn waiter_behind_one_that_gave_up_gets_the_lock(locks: &Locks) {
    let n = name("behind-quitter");
    let holder = mutex(locks, &n).lock().await.unwrap();
    let quitter = mutex(locks, &n);
    let quits = tokio::spawn(async move {
        quitter
            .acquire(&AcquireOptions::new().wait(Duration::from_millis(700)))
            .await
            .map(|g| g.is_some())
    });
    // Plain (not fair) acquires: a backend need not show them as queued, so a pause.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let behind = mutex(locks, &n);
    let waits = tokio::spawn(async move {
        let g = behind.lock_for(Duration::from_secs(30)).await?;
        match g {
            Some(g) => g.release().await.map(|()| true),
            None => Ok(false),
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !quits.await.unwrap().unwrap(),
        "the quitter got a held lock"
    );
    // The one behind now waits on the holder alone.
    tokio::time::sleep(Duration::from_millis(200)).await;
    holder.release().await.unwrap();
    let got = within(SOON, "the waiter behind the quitter", waits)
        .await
        .unwrap()
        .unwrap();
    assert!(got, "the waiter behind the quitter never got the lock");
}

/// An acquire that ran out of budget leaves nothing behind: right after the holder releases, a
/// no-wait attempt succeeds.
pub async fn timed_out_acquire_leaves_no_trace(locks: &Locks) {
    let n = name("timeout-clean");
    let holder = mutex(locks, &n).lock().await.unwrap();
    for _ in 0..3 {
        let got = mutex(locks, &n)
            .acquire(&AcquireOptions::new().wait(Duration::from_millis(150)))
            .await
            .unwrap();
        assert!(got.is_none());
    }
    holder.release().await.unwrap();
    let next = mutex(locks, &n).try_lock().await.unwrap();
    assert!(next.is_some(), "a timed-out waiter still stands in the way");
}

/// Waiters queued one after another get the lock in that order, where the backend is fair.
pub async fn fifo_order_of_ten_waiters(locks: &Locks) {
    let n = name("fifo");
    let fair = AcquireOptions::new().fair(true);
    if !locks.capabilities().mutex.fair {
        super::assert_kind(
            mutex(locks, &n).acquire(&fair).await,
            lockkit_core::ErrorKind::Unsupported,
            "fair",
        );
        return;
    }
    let holder = mutex(locks, &n).acquire(&fair).await.unwrap().unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let (lock, order) = (mutex(locks, &n), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = lock.acquire(&fair).await.unwrap().unwrap();
            order.lock().unwrap().push(i);
            g.release().await.unwrap();
        }));
        // This waiter reaches the queue before the next one starts.
        super::queued(locks, &n, lockkit_core::Primitive::Mutex, i + 1).await;
    }
    holder.release().await.unwrap();
    within(
        Duration::from_secs(30),
        "fifo waiters",
        futures::future::try_join_all(tasks),
    )
    .await
    .unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        (0..10).collect::<Vec<_>>(),
        "waiters not served in arrival order"
    );
}
