use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{assert_kind, mutex, name, within, HEARD, SOON};
use crate::OverlapDetector;
use lockkit_core::{AcquireOptions, ErrorKind, Locks};

/// 8 tasks × 25 iterations, each through its own handle, over a non-atomic read-modify-write.
pub async fn mutex_excludes_many_tasks(locks: &Locks) {
    const TASKS: u64 = 8;
    const ITERS: u64 = 25;
    let n = name("exclusion");
    let counter = Arc::new(AtomicU64::new(0));
    let detector = OverlapDetector::new();
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let lock = mutex(locks, &n);
        let (counter, detector, tokens) = (counter.clone(), detector.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ITERS {
                let guard = lock.lock().await.expect("lock");
                {
                    let _inside = detector.enter();
                    tokens.lock().unwrap().push(guard.token());
                    let v = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(v + 1, Ordering::SeqCst);
                }
                guard.release().await.expect("release");
            }
        }));
    }
    within(
        Duration::from_secs(120),
        "exclusion tasks",
        futures::future::try_join_all(tasks),
    )
    .await
    .expect("task panicked");
    assert_eq!(detector.max_inside(), 1, "two holders were inside at once");
    assert_eq!(
        counter.load(Ordering::SeqCst),
        TASKS * ITERS,
        "lost updates"
    );
    let tokens = tokens.lock().unwrap();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing: {tokens:?}"
    );
}

/// `try_lock` on a held lock answers `None` without waiting.
pub async fn try_lock_on_held_returns_none_at_once(locks: &Locks) {
    let n = name("try-held");
    let guard = mutex(locks, &n).lock().await.unwrap();
    let started = Instant::now();
    let other = within(SOON, "try_lock", mutex(locks, &n).try_lock())
        .await
        .unwrap();
    assert!(other.is_none(), "try_lock got a held lock");
    assert!(started.elapsed() < SOON);
    guard.release().await.unwrap();
}

/// `try_lock` on a free lock succeeds.
pub async fn try_lock_on_free_lock_succeeds(locks: &Locks) {
    let n = name("try-free");
    let guard = mutex(locks, &n)
        .try_lock()
        .await
        .unwrap()
        .expect("free lock");
    assert_eq!(guard.state(), lockkit_core::LockState::Held);
    assert_eq!(guard.name(), n);
    guard.release().await.unwrap();
}

/// A bounded wait on a held lock gives `None` after about its budget.
pub async fn wait_budget_is_honoured(locks: &Locks) {
    let n = name("budget");
    let guard = mutex(locks, &n).lock().await.unwrap();
    let started = Instant::now();
    let budget = Duration::from_millis(500);
    let got = within(SOON, "lock_for", mutex(locks, &n).lock_for(budget))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(got.is_none(), "acquired a held lock");
    assert!(
        took >= budget - Duration::from_millis(50),
        "gave up early, after {took:?}"
    );
    guard.release().await.unwrap();
}

/// A forever wait wakes when the holder releases.
pub async fn forever_wait_wakes_on_release(locks: &Locks) {
    let n = name("forever");
    let guard = mutex(locks, &n).lock().await.unwrap();
    let waiter = mutex(locks, &n);
    let task = tokio::spawn(async move { waiter.lock().await.map(|g| g.token()) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!task.is_finished(), "waiter got a held lock");
    let held_token = guard.token();
    guard.release().await.unwrap();
    let token = within(SOON, "woken waiter", task).await.unwrap().unwrap();
    assert!(token > held_token);
}

/// A timed wait wakes on release, well before its budget.
pub async fn timed_wait_wakes_on_release(locks: &Locks) {
    let n = name("timed");
    let guard = mutex(locks, &n).lock().await.unwrap();
    let waiter = mutex(locks, &n);
    let task = tokio::spawn(async move {
        let started = Instant::now();
        let g = waiter.lock_for(Duration::from_secs(30)).await.unwrap();
        (g.is_some(), started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.release().await.unwrap();
    let (got, took) = within(SOON, "timed waiter", task).await.unwrap();
    assert!(got, "timed waiter did not get the released lock");
    assert!(took < Duration::from_secs(10), "woke only after {took:?}");
}

/// Ownership belongs to the guard: the same handle, same task, must wait like anyone else.
pub async fn same_handle_second_acquire_waits(locks: &Locks) {
    let lock = mutex(locks, &name("same-handle"));
    let guard = lock.lock().await.unwrap();
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "same handle shared the hold"
    );
    assert!(lock
        .lock_for(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    guard.release().await.unwrap();
    assert!(lock.try_lock().await.unwrap().is_some());
}

/// `reenter` adds holds to the same ownership; the lock stays held until the last one goes.
pub async fn reenter_counts_holds(locks: &Locks) {
    let n = name("reenter");
    let g1 = mutex(locks, &n).lock().await.unwrap();
    let g2 = g1.reenter().await.unwrap();
    assert_eq!(g1.hold_count(), 2);
    assert_eq!(
        g2.token(),
        g1.token(),
        "a reentered hold is the same ownership"
    );
    g2.release().await.unwrap();
    assert_eq!(g1.hold_count(), 1);
    assert!(
        mutex(locks, &n).try_lock().await.unwrap().is_none(),
        "released with a hold left"
    );
    g1.release().await.unwrap();
    assert!(mutex(locks, &n).try_lock().await.unwrap().is_some());
}

/// Releasing the first guard before the reentered one keeps the lock until the last.
pub async fn reenter_release_last_hold_unlocks(locks: &Locks) {
    let n = name("reenter-order");
    let g1 = mutex(locks, &n).lock().await.unwrap();
    let g2 = g1.reenter().await.unwrap();
    let g3 = g2.reenter().await.unwrap();
    assert_eq!(g3.hold_count(), 3);
    g1.release().await.unwrap();
    drop(g2);
    assert!(mutex(locks, &n).try_lock().await.unwrap().is_none());
    assert_eq!(g3.hold_count(), 1);
    g3.release().await.unwrap();
    let again = within(
        SOON,
        "acquire after last hold",
        mutex(locks, &n).lock_for(SOON),
    )
    .await
    .unwrap();
    assert!(again.is_some());
}

/// `hold_count()` on a handle counts the holds acquired through that handle only.
pub async fn handle_hold_count_tracks_guards(locks: &Locks) {
    let n = name("hold-count");
    let (lock, other) = (mutex(locks, &n), mutex(locks, &n));
    assert_eq!(lock.hold_count(), 0);
    let g1 = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count(), 1);
    let g2 = g1.reenter().await.unwrap();
    assert_eq!(lock.hold_count(), 2);
    assert_eq!(other.hold_count(), 0);
    g2.release().await.unwrap();
    g1.release().await.unwrap();
    assert_eq!(lock.hold_count(), 0);
}

/// `is_locked` follows acquire and release.
pub async fn is_locked_reflects_holder(locks: &Locks) {
    let lock = mutex(locks, &name("is-locked"));
    assert!(!lock.is_locked().await.unwrap());
    let g = lock.lock().await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    g.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

/// `force_unlock` frees a held lock, and the old holder's guard turns Lost.
pub async fn force_unlock_frees_lock_and_marks_holder_lost(locks: &Locks) {
    let n = name("force");
    let admin = mutex(locks, &n);
    assert!(
        !admin.force_unlock().await.unwrap(),
        "force_unlock of a free lock said it was held"
    );
    let g = mutex(locks, &n)
        .acquire(&AcquireOptions::new().watchdog_lease(Duration::from_secs(1)))
        .await
        .unwrap()
        .unwrap();
    assert!(admin.force_unlock().await.unwrap());
    let next = within(SOON, "acquire after force_unlock", admin.lock_for(SOON))
        .await
        .unwrap();
    assert!(next.is_some(), "lock still held after force_unlock");
    within(
        Duration::from_secs(10),
        "lost() after force_unlock",
        g.lost(),
    )
    .await;
    assert_eq!(g.state(), lockkit_core::LockState::Lost);
    assert_kind(
        g.release().await,
        ErrorKind::LockLost,
        "release after force_unlock",
    );
    drop(next);
}

/// A force-unlocked holder hears of it at once, not at its next renewal (a third of its 30 s
/// lease away): its guard is Lost with `Deleted` within a few seconds, and its release
/// says `LockLost`.
pub async fn force_unlock_is_heard_at_once(locks: &Locks) {
    let n = name("force-heard");
    let g = mutex(locks, &n)
        .acquire(&AcquireOptions::new().watchdog_lease(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    assert!(mutex(locks, &n).force_unlock().await.unwrap());
    let reason = within(HEARD, "lost() after force_unlock", g.lost()).await;
    assert_eq!(reason, lockkit_core::LostReason::Deleted);
    assert_kind(
        g.release().await,
        ErrorKind::LockLost,
        "release after force_unlock",
    );
}

/// Locks of different names never block each other.
pub async fn independent_names_do_not_block(locks: &Locks) {
    let base = name("independent");
    let a = mutex(locks, &format!("{base}/a")).lock().await.unwrap();
    let b = mutex(locks, &format!("{base}/b")).try_lock().await.unwrap();
    assert!(b.is_some(), "lock b blocked by lock a");
    a.release().await.unwrap();
}
