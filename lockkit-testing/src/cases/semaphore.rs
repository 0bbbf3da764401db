use std::time::Duration;

use super::{assert_kind, fixed, name, within, SHORT, SOON};
use crate::OverlapDetector;
use lockkit_core::{AcquireOptions, ErrorKind, Locks, Semaphore};

fn sem(locks: &Locks, case: &str, permits: u32) -> Option<(String, Semaphore)> {
    let n = name(case);
    if locks.capabilities().semaphore.is_none() {
        assert_kind(
            locks.semaphore(&n, permits),
            ErrorKind::Unsupported,
            "semaphore",
        );
        return None;
    }
    let s = locks.semaphore(&n, permits).expect("semaphore");
    Some((n, s))
}

/// 12 tasks on 3 permits: never more than 3 inside.
pub async fn semaphore_never_exceeds_permits(locks: &Locks) {
    let Some((n, _)) = sem(locks, "sem-bound", 3) else {
        return;
    };
    let detector = OverlapDetector::new();
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let (s, detector) = (locks.semaphore(&n, 3).unwrap(), detector.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let p = s.acquire_one().await.unwrap();
                {
                    let _inside = detector.enter();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                p.release().await.unwrap();
            }
        }));
    }
    within(
        Duration::from_secs(120),
        "semaphore tasks",
        futures::future::try_join_all(tasks),
    )
    .await
    .unwrap();
    let max = detector.max_inside();
    assert!(max <= 3, "{max} holders of 3 permits");
}

/// Dropped permits come back.
pub async fn semaphore_permits_return_on_drop(locks: &Locks) {
    let Some((n, s)) = sem(locks, "sem-drop", 3) else {
        return;
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(s.try_acquire(1).await.unwrap().expect("free permit"));
    }
    let other = locks.semaphore(&n, 3).unwrap();
    assert!(
        other.try_acquire(1).await.unwrap().is_none(),
        "a fourth permit out of three"
    );
    drop(held.pop());
    let p = within(
        SOON,
        "permit after drop",
        other.acquire(1, &AcquireOptions::new().wait(SOON)),
    )
    .await
    .unwrap();
    assert!(p.is_some(), "a dropped permit did not come back");
}

/// A permit whose fixed lease ran out comes back, and its holder sees Lost.
pub async fn semaphore_permits_return_on_lease_expiry(locks: &Locks) {
    let Some((n, s)) = sem(locks, "sem-expiry", 1) else {
        return;
    };
    if !locks
        .capabilities()
        .semaphore
        .is_some_and(|s| s.fixed_lease)
    {
        assert_kind(
            s.acquire(1, &fixed(SHORT)).await,
            ErrorKind::Unsupported,
            "fixed lease",
        );
        return;
    }
    let p = s.acquire(1, &fixed(SHORT)).await.unwrap().unwrap();
    let other = locks.semaphore(&n, 1).unwrap();
    let next = within(
        Duration::from_secs(15),
        "permit after expiry",
        other.acquire(1, &AcquireOptions::new().wait(Duration::from_secs(10))),
    )
    .await
    .unwrap();
    assert!(next.is_some(), "an expired permit did not come back");
    within(SOON, "lost() of expired permit", p.lost()).await;
    assert!(next.unwrap().token() > p.token());
}

/// `available()` counts free permits.
pub async fn semaphore_available_counts(locks: &Locks) {
    let Some((_, s)) = sem(locks, "sem-avail", 3) else {
        return;
    };
    assert_eq!(s.available().await.unwrap(), 3);
    let p = s.acquire(2, &AcquireOptions::new()).await.unwrap().unwrap();
    assert_eq!(p.permits(), 2);
    assert_eq!(s.available().await.unwrap(), 1);
    p.release().await.unwrap();
    assert_eq!(s.available().await.unwrap(), 3);
}

/// `acquire(n)` takes n permits at once or none.
pub async fn semaphore_acquire_n_at_once(locks: &Locks) {
    let Some((_, s)) = sem(locks, "sem-n", 3) else {
        return;
    };
    let two = s.acquire(2, &AcquireOptions::new()).await.unwrap().unwrap();
    assert!(
        s.try_acquire(2).await.unwrap().is_none(),
        "2 more of 3 with 2 taken"
    );
    let one = s.try_acquire(1).await.unwrap().expect("the last permit");
    two.release().await.unwrap();
    let again = s
        .try_acquire(2)
        .await
        .unwrap()
        .expect("2 permits after release");
    one.release().await.unwrap();
    again.release().await.unwrap();
}

/// Zero permits, or more than exist, is `InvalidArgument`.
pub async fn semaphore_bad_counts_are_invalid(locks: &Locks) {
    let Some((n, s)) = sem(locks, "sem-bad", 3) else {
        return;
    };
    assert_kind(
        s.acquire(0, &AcquireOptions::new()).await,
        ErrorKind::InvalidArgument,
        "0 permits",
    );
    assert_kind(
        s.acquire(4, &AcquireOptions::new()).await,
        ErrorKind::InvalidArgument,
        "4 of 3 permits",
    );
    assert_kind(
        locks.semaphore(&n, 0),
        ErrorKind::InvalidArgument,
        "semaphore of 0",
    );
}

/// A dropped waiter for permits leaves nothing behind.
pub async fn semaphore_dropped_waiter_leaves_no_trace(locks: &Locks) {
    let Some((n, s)) = sem(locks, "sem-cancel", 2) else {
        return;
    };
    let all = s.acquire(2, &AcquireOptions::new()).await.unwrap().unwrap();
    let other = locks.semaphore(&n, 2).unwrap();
    let opts = AcquireOptions::new();
    let waiting = other.acquire(1, &opts);
    assert!(tokio::time::timeout(Duration::from_millis(300), waiting)
        .await
        .is_err());
    all.release().await.unwrap();
    let both = within(
        SOON,
        "all permits after cancel",
        other.acquire(2, &AcquireOptions::new().wait(SOON)),
    )
    .await
    .unwrap();
    assert!(both.is_some(), "a cancelled waiter kept a permit");
    both.unwrap().release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(s.available().await.unwrap(), 2);
}

/// `extend` keeps what a permit holds: a holder of all permits that extends still holds all of
/// them (an extend that forgot the weight would let others in).
pub async fn semaphore_extend_keeps_the_permits(locks: &Locks) {
    let Some((_, s)) = sem(locks, "sem-extend", 3) else {
        return;
    };
    if !locks
        .capabilities()
        .semaphore
        .is_some_and(|c| c.fixed_lease)
    {
        return; // Unsupported: checked by unsupported_capabilities_say_so
    }
    let p = s.acquire(3, &fixed(SHORT * 5)).await.unwrap().unwrap();
    p.extend(SHORT * 6).await.unwrap();
    assert!(
        s.try_acquire(1).await.unwrap().is_none(),
        "an extended holder of 3 of 3 permits left room for more"
    );
    assert_eq!(s.available().await.unwrap(), 0);
    assert_eq!(p.permits(), 3);
    p.release().await.unwrap();
}
