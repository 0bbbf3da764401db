//! Issue 3, point 3: the watchdog renews every held lock every lease/3 with at most one round
//! trip per 100 locks, marks a guard Lost at once when the lock is gone, and leaves fixed leases
//! alone.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lockkit_core::{AcquireOptions, LockState};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_are_batched_one_call_per_100_locks() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let other = connect(&server.url(), &[]).await;
    let mut admin = admin(&server.url()).await;
    let lease = Duration::from_millis(900);
    let opts = AcquireOptions::new().watchdog_lease(lease).no_wait();
    let mut guards = Vec::new();
    for i in 0..250 {
        let g = locks
            .mutex(&format!("batch/{i}"))
            .unwrap()
            .acquire(&opts)
            .await
            .unwrap();
        guards.push(g.unwrap());
    }
    let before = command_calls(&mut admin, &["evalsha"]).await;
    let started = Instant::now();
    tokio::time::sleep(lease * 3).await;
    let renewals = command_calls(&mut admin, &["evalsha"]).await - before;
    let intervals = (started.elapsed().as_millis() / (lease / 3).as_millis()) as u64 + 1;
    // 250 locks = 3 calls per interval; allow the early-renewal window to split a batch.
    assert!(
        renewals <= intervals * 3 * 2,
        "{renewals} renewal calls in {intervals} intervals for 250 locks"
    );
    assert!(renewals >= 3, "no renewals at all");
    for (i, g) in guards.iter().enumerate().step_by(50) {
        assert_eq!(g.state(), LockState::Held);
        let busy = other
            .mutex(&format!("batch/{i}"))
            .unwrap()
            .try_lock()
            .await
            .unwrap();
        assert!(busy.is_none(), "lock {i} expired although renewed");
    }
    for g in guards {
        g.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_that_finds_another_owner_marks_lost_at_once() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let name = lockkit_testing::unique_name("wd-lost");
    let lease = Duration::from_secs(3);
    let g = locks
        .mutex(&name)
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(lease))
        .await
        .unwrap()
        .unwrap();
    let lost = g.lost();
    // Someone else takes the lock: the key deleted behind lockkit's back (a force-unlock would
    // tell the holder on its channel, which this test is not about), then a new holder.
    let deleted: i64 = redis::cmd("DEL")
        .arg(lockkit_redis::LockKeys::mutex("lockkit", &name).lock)
        .query_async(&mut admin(&url).await)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let other = connect(&url, &[]).await;
    let g2 = other
        .mutex(&name)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .unwrap();
    let started = Instant::now();
    tokio::time::timeout(lease / 3 + Duration::from_millis(700), lost)
        .await
        .expect("lost() within one renewal interval");
    assert!(started.elapsed() < lease, "lost only at the deadline");
    assert_eq!(g.state(), LockState::Lost);
    assert_eq!(g2.state(), LockState::Held);
    g2.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lease_is_not_renewed_and_extend_never_recreates() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let name = lockkit_testing::unique_name("fixed");
    let lock = locks.mutex(&name).unwrap();
    let g = lock
        .acquire(&AcquireOptions::new().fixed_lease(Duration::from_millis(600)))
        .await
        .unwrap()
        .unwrap();
    g.extend(Duration::from_millis(800)).await.unwrap();
    let left = lock.remaining_lease().await.unwrap().unwrap();
    assert!(left > Duration::from_millis(600), "{left:?}");
    tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .unwrap();
    // Lost fires a margin (18 ms here) before the server's expiry, and the kernel's release
    // follows it: the lock is free soon after.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !lock.is_locked().await.unwrap(),
        "a fixed lease was renewed"
    );
    assert!(g.extend(Duration::from_secs(5)).await.is_err());
    assert!(
        !lock.is_locked().await.unwrap(),
        "extend re-created the lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_errors_make_suspect_then_held_again() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let mut admin = admin(&server.url()).await;
    let lease = Duration::from_secs(6);
    let g = locks
        .mutex("suspect")
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(lease))
        .await
        .unwrap()
        .unwrap();
    // Pause the server's writes for longer than a renewal may take (lease/3): renewals time out, the guard turns Suspect, and
    // Held again once a renewal gets through (before the deadline).
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(4500)
        .arg("WRITE")
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut rx_state = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(5500) {
        let s = g.state();
        if rx_state.last() != Some(&s) {
            rx_state.push(s);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(rx_state.contains(&LockState::Suspect), "{rx_state:?}");
    assert_eq!(g.state(), LockState::Held, "{rx_state:?}");
    g.release().await.unwrap();
}

/// A lock handed to a waiter starts with a short server expiry (3 heartbeats, here 600 ms), so a
/// waiter that died in the queue blocks it briefly; the watchdog extends it to the lease soon
/// after, and the holder keeps it for as long as it likes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_lock_is_extended_to_its_lease() {
    let Some(url) = shared_url() else { return };
    let opts = [("waiter_heartbeat", "200ms")];
    let (a, b) = (connect(&url, &opts).await, connect(&url, &opts).await);
    let name = lockkit_testing::unique_name("handed");
    let g = a.mutex(&name).unwrap().lock().await.unwrap();
    let lock = b.mutex(&name).unwrap();
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(150)).await;
    g.release().await.unwrap();
    let g2 = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    // Well past the hand-off's 600 ms: still held, by us, with (close to) the whole lease left.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(g2.state(), LockState::Held);
    let left = b
        .mutex(&name)
        .unwrap()
        .remaining_lease()
        .await
        .unwrap()
        .expect("still locked");
    assert!(left > Duration::from_secs(20), "{left:?} of a 30 s lease");
    assert!(a.mutex(&name).unwrap().try_lock().await.unwrap().is_none());
    g2.release().await.unwrap();
}
