//! The embedded backend follows tokio's clock, so users' tests can run leases in paused time.

use std::time::Duration;

use lockkit_core::{AcquireOptions, HoldMode, LockState, Locks, Primitive};

#[tokio::test(start_paused = true)]
async fn fixed_lease_expires_in_paused_time() {
    let locks = Locks::memory();
    let lock = locks.mutex("job").unwrap();
    let g = lock
        .acquire(&AcquireOptions::new().fixed_lease(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    let started = tokio::time::Instant::now();
    // Resolves when virtual time reaches the guard's deadline: the lease minus its safety margin,
    // so the holder hears of the loss before the table frees the lock.
    g.lost().await;
    let at = started.elapsed();
    assert!(
        at < Duration::from_secs(60) && at > Duration::from_secs(59),
        "{at:?}"
    );
    assert_eq!(g.state(), LockState::Lost);
    tokio::time::sleep_until(started + Duration::from_secs(60)).await;
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn watchdog_renews_for_an_hour_of_virtual_time() {
    let locks = Locks::memory();
    let lock = locks.mutex("leader").unwrap();
    let g = lock.lock().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(g.state(), LockState::Held);
    let left = lock.remaining_lease().await.unwrap().unwrap();
    assert!(
        left > Duration::from_secs(15) && left <= Duration::from_secs(30),
        "{left:?}"
    );
    g.release().await.unwrap();
    assert_eq!(lock.remaining_lease().await.unwrap(), None);
}

#[tokio::test]
async fn inspect_shows_holders_and_queue_in_order() {
    let locks = Locks::memory();
    let rw = locks.rwlock("doc").unwrap();
    let r = rw.read(&AcquireOptions::new()).await.unwrap().unwrap();
    let rw2 = locks.rwlock("doc").unwrap();
    let writer =
        tokio::spawn(async move { rw2.write(&AcquireOptions::new()).await.map(|g| g.map(drop)) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let info = locks.inspect("doc", Primitive::RwLock).await.unwrap();
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].mode, HoldMode::Shared);
    assert_eq!(info.holders[0].token, Some(r.token()));
    assert_eq!(info.waiters.len(), 1);
    assert_eq!(info.waiters[0].mode, HoldMode::Exclusive);
    r.release().await.unwrap();
    writer.await.unwrap().unwrap();
    assert!(locks
        .inspect("doc", Primitive::RwLock)
        .await
        .unwrap()
        .holders
        .is_empty());
}

#[test]
fn dropping_a_guard_outside_a_runtime_does_not_panic() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let locks = Locks::memory();
    let g = rt.block_on(async { locks.mutex("x").unwrap().lock().await.unwrap() });
    drop(rt);
    drop(g);
}

/// A guard dropped where no tokio runtime runs (a plain thread) still releases its lock: the
/// core's release needs a runtime, the engine does not.
#[test]
fn a_guard_dropped_on_a_plain_thread_releases_the_lock() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let locks = Locks::memory();
    let lock = locks.mutex("handed-to-a-thread").unwrap();
    let g = rt.block_on(lock.lock()).unwrap();
    std::thread::spawn(move || drop(g)).join().unwrap();
    let again = rt.block_on(lock.try_lock()).unwrap();
    assert!(again.is_some(), "the dropped guard's lock is free");
}

/// A fixed lease ends on time for a waiter in another runtime even when the holder's runtime no
/// longer runs (its expiry task went with it): the waiter ends it.
#[test]
fn a_fixed_lease_ends_for_waiters_when_the_holders_runtime_is_gone() {
    let locks = Locks::memory();
    let holder_rt = tokio::runtime::Runtime::new().unwrap();
    let g = holder_rt
        .block_on(async {
            let opts = AcquireOptions::new().fixed_lease(Duration::from_millis(500));
            locks.mutex("stranded").unwrap().acquire(&opts).await
        })
        .unwrap()
        .expect("free");
    drop(holder_rt);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let started = std::time::Instant::now();
    let got = rt
        .block_on(
            locks
                .mutex("stranded")
                .unwrap()
                .lock_for(Duration::from_secs(5)),
        )
        .unwrap();
    assert!(
        got.is_some(),
        "the waiter got the lock once the lease ended"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(g.state(), LockState::Lost);
}

/// The same for a fixed lease granted while the waiter already waits (behind a watchdog holder
/// and the fixed-lease waiter that gets the lock next): the grant tells the waiter its end.
#[test]
fn a_fixed_lease_granted_while_a_waiter_waits_ends_for_it_too() {
    let locks = Locks::memory();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let first = rt.block_on(locks.mutex("later").unwrap().lock()).unwrap();
    let waiters = |n: usize| {
        let info = rt
            .block_on(locks.inspect("later", Primitive::Mutex))
            .unwrap();
        info.waiters.len() == n
    };
    let b_rt = tokio::runtime::Runtime::new().unwrap();
    let b = b_rt.spawn({
        let m = locks.mutex("later").unwrap();
        async move {
            let opts = AcquireOptions::new()
                .fixed_lease(Duration::from_millis(500))
                .wait(Duration::from_secs(10));
            m.acquire(&opts).await
        }
    });
    while !waiters(1) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = rt.spawn({
        let m = locks.mutex("later").unwrap();
        async move { m.lock_for(Duration::from_secs(8)).await }
    });
    while !waiters(2) {
        std::thread::sleep(Duration::from_millis(5));
    }
    rt.block_on(first.release()).unwrap();
    let g = b_rt.block_on(b).unwrap().unwrap().expect("b is next");
    drop(b_rt);
    let started = std::time::Instant::now();
    let got = rt.block_on(c).unwrap().unwrap();
    assert!(got.is_some(), "c got the lock once b's lease ended");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(g.state(), LockState::Lost);
}
