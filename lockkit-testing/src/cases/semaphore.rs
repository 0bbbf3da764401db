use std::time::Duration;

use super::{assert_kind, fixed, name, within, SHORT, SOON};
use crate::OverlapDetector;
use lockkit_core::{AcquireOptions, ErrorKind, HoldMode, LockState, Locks, Primitive, Semaphore};

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

/// Where the backend keeps the size with the semaphore: the first acquire stores it, a handle
/// asking for another size is refused naming the stored one, and an opened handle adopts it.
/// Elsewhere the calls that need a stored size answer `Unsupported`.
pub async fn semaphore_size_is_stored_with_it(locks: &Locks) {
    let Some((n, s)) = sem(locks, "sem-size", 3) else {
        return;
    };
    if !locks.capabilities().semaphore_size {
        assert_kind(locks.open_semaphore(&n), ErrorKind::Unsupported, "open");
        assert_kind(s.size().await, ErrorKind::Unsupported, "size");
        assert_kind(s.set_permits(4).await, ErrorKind::Unsupported, "set");
        return;
    }
    let opened = locks.open_semaphore(&n).unwrap();
    assert_eq!(opened.permits(), None);
    assert_eq!(s.permits(), Some(3));
    assert_eq!(s.size().await.unwrap(), None, "a size before any acquire");
    let e = assert_kind(
        opened.try_acquire(1).await,
        ErrorKind::InvalidArgument,
        "open with no size stored",
    );
    assert!(e.to_string().contains("no size"), "{e}");
    let p = s.try_acquire(1).await.unwrap().expect("a free permit");
    assert_eq!(s.size().await.unwrap(), Some(3));
    assert_eq!(opened.size().await.unwrap(), Some(3));
    let five = locks.semaphore(&n, 5).unwrap();
    let e = assert_kind(
        five.try_acquire(1).await,
        ErrorKind::InvalidArgument,
        "a handle of 5 where 3 are stored",
    );
    assert!(e.to_string().contains("has 3 permits"), "{e}");
    assert_kind(
        five.available().await,
        ErrorKind::InvalidArgument,
        "available of 5",
    );
    assert_eq!(opened.available().await.unwrap(), 2);
    assert_kind(
        opened.try_acquire(4).await,
        ErrorKind::InvalidArgument,
        "4 of the stored 3",
    );
    let two = opened.try_acquire(2).await.unwrap().expect("2 more of 3");
    assert!(opened.try_acquire(1).await.unwrap().is_none(), "a fourth");
    assert_kind(s.set_permits(0).await, ErrorKind::InvalidArgument, "set 0");
    two.release().await.unwrap();
    p.release().await.unwrap();
}

/// `set_permits` changes the size for everyone: growing admits a waiter at once, shrinking
/// keeps holders and admits no one until the permits in use plus the request fit, and a
/// waiter asking for more than the new size is refused.
pub async fn semaphore_set_permits_changes_the_size(locks: &Locks) {
    let Some((n, s)) = sem(locks, "sem-set", 1) else {
        return;
    };
    if !locks.capabilities().semaphore_size {
        return; // Unsupported: checked by semaphore_size_is_stored_with_it
    }
    let first = s.acquire_one().await.unwrap();
    let opened = locks.open_semaphore(&n).unwrap();
    let waiter = {
        let opened = opened.clone();
        tokio::spawn(async move {
            opened
                .acquire(1, &AcquireOptions::new().wait(Duration::from_secs(30)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "a second permit of one");
    assert_eq!(opened.set_permits(2).await.unwrap(), Some(1));
    let second = within(SOON, "a waiter after growing", waiter)
        .await
        .unwrap()
        .unwrap()
        .expect("a permit after growing");
    let e = assert_kind(
        s.try_acquire(1).await,
        ErrorKind::InvalidArgument,
        "the handle of 1 after set_permits(2)",
    );
    assert!(e.to_string().contains("has 2 permits"), "{e}");

    // Shrink to 1 with 2 held: both keep their permits; nobody else gets in until both left.
    assert_eq!(opened.set_permits(1).await.unwrap(), Some(2));
    assert_eq!(opened.size().await.unwrap(), Some(1));
    assert!(
        first.state() == LockState::Held && second.state() == LockState::Held,
        "a holder lost by a shrink"
    );
    assert_eq!(opened.available().await.unwrap(), 0);
    first.release().await.unwrap();
    assert!(
        opened.try_acquire(1).await.unwrap().is_none(),
        "admitted with 1 in use of 1"
    );
    second.release().await.unwrap();
    let p = opened.try_acquire(1).await.unwrap().expect("free again");

    // A waiter for more than a shrunk size is refused, not left waiting for ever.
    opened.set_permits(3).await.unwrap();
    let big = {
        let opened = opened.clone();
        tokio::spawn(async move {
            opened
                .acquire(3, &AcquireOptions::new().wait(Duration::from_secs(30)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!big.is_finished(), "3 of 3 with 1 held");
    opened.set_permits(2).await.unwrap();
    assert_kind(
        within(SOON, "a waiter for 3 after shrinking to 2", big)
            .await
            .unwrap(),
        ErrorKind::InvalidArgument,
        "3 of a shrunk 2",
    );
    p.release().await.unwrap();
    assert_eq!(opened.available().await.unwrap(), 2);
}

/// Handles that disagree on the size race to a fresh semaphore: one size is stored, every
/// handle of the other size is refused, and never more than the stored size hold at once.
pub async fn semaphore_disagreeing_handles_never_oversubscribe(locks: &Locks) {
    let Some((n, _)) = sem(locks, "sem-race", 1) else {
        return;
    };
    if !locks.capabilities().semaphore_size {
        return; // each handle counts against its own size there, as documented
    }
    let detector = OverlapDetector::new();
    let mut tasks = Vec::new();
    for i in 0..8u32 {
        let size = if i % 2 == 0 { 1 } else { 3 };
        let (s, detector) = (locks.semaphore(&n, size).unwrap(), detector.clone());
        tasks.push(tokio::spawn(async move {
            let mut held = 0;
            for _ in 0..5 {
                match s.acquire_one().await {
                    Ok(p) => {
                        {
                            let _inside = detector.enter();
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        p.release().await.unwrap();
                        held += 1;
                    }
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
                        return (size, held, true);
                    }
                }
            }
            (size, held, false)
        }));
    }
    let results = within(
        Duration::from_secs(120),
        "disagreeing semaphore handles",
        futures::future::try_join_all(tasks),
    )
    .await
    .unwrap();
    let stored = locks
        .open_semaphore(&n)
        .unwrap()
        .size()
        .await
        .unwrap()
        .expect("a size stored");
    for (size, held, refused) in results {
        if size == stored {
            assert!(!refused && held == 5, "a handle of the stored size refused");
        } else {
            assert!(
                refused && held == 0,
                "a handle of {size} held where {stored} are stored"
            );
        }
    }
    let max = detector.max_inside();
    assert!(max <= stored as usize, "{max} holders of {stored} permits");
}

/// For a backend's own test: semaphore `name`'s size is something foreign on the server (a key,
/// node or file of another kind or content), so every call that reads it fails with `WrongType`,
/// a handle of a size and an opened one alike, and nothing is taken.
pub async fn foreign_size_is_refused(locks: &Locks, name: &str) {
    let s = locks.semaphore(name, 3).unwrap();
    let opened = locks.open_semaphore(name).unwrap();
    let errors = [
        s.try_acquire(1).await.map(drop).unwrap_err(),
        opened.try_acquire(1).await.map(drop).unwrap_err(),
        s.available().await.map(drop).unwrap_err(),
        s.size().await.map(drop).unwrap_err(),
        s.set_permits(2).await.map(drop).unwrap_err(),
    ];
    for e in errors {
        assert_eq!(e.kind(), ErrorKind::WrongType, "{e}");
    }
}

/// A handle's size is checked when its acquire starts: an acquire already waiting when an
/// operator grows the size counts against the new size and gets its permit at once, while a
/// new acquire of that handle is refused, naming the new size.
pub async fn semaphore_waiter_follows_a_size_change(locks: &Locks) {
    let Some((n, s)) = sem(locks, "sem-follow", 1) else {
        return;
    };
    if !locks.capabilities().semaphore_size {
        return; // Unsupported: checked by semaphore_size_is_stored_with_it
    }
    let held = s.acquire_one().await.unwrap();
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            s.acquire(1, &AcquireOptions::new().wait(Duration::from_secs(30)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "a second permit of one");
    let admin = locks.open_semaphore(&n).unwrap();
    assert_eq!(admin.set_permits(2).await.unwrap(), Some(1));
    let second = within(SOON, "a waiting handle of 1 after growing to 2", waiter)
        .await
        .unwrap()
        .unwrap()
        .expect("the waiter's permit");
    let e = assert_kind(
        s.try_acquire(1).await,
        ErrorKind::InvalidArgument,
        "a new acquire of the handle of 1",
    );
    assert!(e.to_string().contains("has 2 permits"), "{e}");
    held.release().await.unwrap();
    second.release().await.unwrap();
}

/// After a shrink, the holders that no longer fit keep their permits and are still counted:
/// one permit and two of three are held, the size shrinks to 2, and `available()` says none is
/// free (not the one a count of "what fits" would give), `inspect` still lists both holders,
/// and nobody else gets in until both have let go.
pub async fn semaphore_holders_past_a_shrink_are_counted(locks: &Locks) {
    let Some((n, s)) = sem(locks, "sem-past", 3) else {
        return;
    };
    if !locks.capabilities().semaphore_size {
        return; // Unsupported: checked by semaphore_size_is_stored_with_it
    }
    let one = s.try_acquire(1).await.unwrap().expect("1 of 3");
    let two = s.try_acquire(2).await.unwrap().expect("2 more of 3");
    let admin = locks.open_semaphore(&n).unwrap();
    admin.set_permits(2).await.unwrap();
    assert_eq!(admin.available().await.unwrap(), 0, "3 held of 2");
    if locks.capabilities().semaphore.is_some_and(|c| c.inspect)
        && locks.capabilities().cross_process
    {
        let info = locks.inspect(&n, Primitive::Semaphore).await.unwrap();
        let held: u32 = info
            .holders
            .iter()
            .map(|h| match h.mode {
                HoldMode::Permits(k) => k,
                _ => 1,
            })
            .sum();
        assert_eq!(held, 3, "{info:?}");
    }
    one.release().await.unwrap();
    assert!(admin.try_acquire(1).await.unwrap().is_none(), "2 held of 2");
    assert_eq!(admin.available().await.unwrap(), 0);
    two.release().await.unwrap();
    assert_eq!(admin.available().await.unwrap(), 2);
    admin
        .try_acquire(2)
        .await
        .unwrap()
        .expect("2 of 2")
        .release()
        .await
        .unwrap();
}
