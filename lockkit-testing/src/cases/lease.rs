use std::time::Duration;

use super::{assert_kind, fixed, mutex, name, within, SHORT, SOON};
use lockkit_core::{AcquireOptions, ErrorKind, LockState, Locks, LostReason};

/// A fixed lease runs out: another acquirer gets the lock and the old guard turns Lost.
pub async fn fixed_lease_expires_and_old_guard_is_lost(locks: &Locks) {
    let n = name("fixed-expiry");
    if !locks.capabilities().mutex.fixed_lease {
        assert_kind(
            mutex(locks, &n).acquire(&fixed(SHORT)).await,
            ErrorKind::Unsupported,
            "fixed lease",
        );
        return;
    }
    let old = mutex(locks, &n)
        .acquire(&fixed(SHORT))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(old.state(), LockState::Held);
    let new = within(
        Duration::from_secs(15),
        "takeover",
        mutex(locks, &n).lock_for(Duration::from_secs(10)),
    )
    .await
    .unwrap()
    .expect("expired lock taken over");
    // Lost before anyone else can hold the lock: the guard's deadline comes before the server's.
    assert_eq!(
        old.state(),
        LockState::Lost,
        "the old guard read Held while another client held the lock"
    );
    let reason = within(SOON, "old guard's lost()", old.lost()).await;
    assert_eq!(
        reason,
        LostReason::LeaseExpired,
        "why the old guard was lost"
    );
    assert_eq!(old.lost_reason(), Some(LostReason::LeaseExpired));
    assert_eq!(old.state(), LockState::Lost);
    assert!(new.token() > old.token());
    new.release().await.unwrap();
}

/// The watchdog keeps a 1 s lease alive for more than 3 s.
pub async fn watchdog_keeps_lock_past_three_leases(locks: &Locks) {
    let n = name("watchdog");
    let g = mutex(locks, &n)
        .acquire(&AcquireOptions::new().watchdog_lease(SHORT))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(SHORT * 3 + Duration::from_millis(500)).await;
    assert_eq!(g.state(), LockState::Held);
    assert!(
        mutex(locks, &n).try_lock().await.unwrap().is_none(),
        "watchdog let the lease expire"
    );
    g.release().await.unwrap();
}

/// A renewed guard stays Held and its lost() does not fire.
pub async fn state_stays_held_while_renewed(locks: &Locks) {
    let g = mutex(locks, &name("stays-held"))
        .acquire(&AcquireOptions::new().watchdog_lease(SHORT))
        .await
        .unwrap()
        .unwrap();
    let lost = g.lost();
    let fired = tokio::time::timeout(SHORT + Duration::from_millis(500), lost)
        .await
        .is_ok();
    assert!(!fired, "lost() fired on a renewed lock");
    assert_eq!(g.state(), LockState::Held);
    g.release().await.unwrap();
}

/// `extend` moves a fixed lease forward.
pub async fn extend_pushes_fixed_lease(locks: &Locks) {
    let n = name("extend");
    if !locks.capabilities().mutex.fixed_lease {
        assert_kind(
            mutex(locks, &n).acquire(&fixed(SHORT * 2)).await,
            ErrorKind::Unsupported,
            "fixed lease",
        );
        return;
    }
    let g = mutex(locks, &n)
        .acquire(&fixed(SHORT * 2))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(SHORT).await;
    g.extend(SHORT * 4).await.unwrap();
    tokio::time::sleep(SHORT * 2).await;
    assert_eq!(
        g.state(),
        LockState::Held,
        "extended lease ran out at the old deadline"
    );
    assert!(mutex(locks, &n).try_lock().await.unwrap().is_none());
    g.release().await.unwrap();
}

/// `extend` after expiry fails and never re-creates the lock.
pub async fn extend_after_expiry_fails_and_does_not_recreate(locks: &Locks) {
    let n = name("extend-late");
    if !locks.capabilities().mutex.fixed_lease {
        assert_kind(
            mutex(locks, &n).acquire(&fixed(SHORT)).await,
            ErrorKind::Unsupported,
            "fixed lease",
        );
        return;
    }
    let g = mutex(locks, &n)
        .acquire(&fixed(SHORT))
        .await
        .unwrap()
        .unwrap();
    within(Duration::from_secs(10), "lost() at lease end", g.lost()).await;
    let e = g.extend(SHORT * 5).await.expect_err("extend after expiry");
    assert_eq!(e.kind(), ErrorKind::LockLost, "{e}");
    // The guard turns Lost a safety margin before the server ends the lease.
    tokio::time::sleep(SHORT / 2).await;
    assert!(
        !mutex(locks, &n).is_locked().await.unwrap(),
        "extend re-created an expired lock"
    );
}

/// `extend` is for fixed leases only.
pub async fn extend_on_watchdog_lease_is_invalid(locks: &Locks) {
    let g = mutex(locks, &name("extend-watchdog")).lock().await.unwrap();
    assert_kind(
        g.extend(SHORT).await,
        ErrorKind::InvalidArgument,
        "extend on a watchdog lease",
    );
    g.release().await.unwrap();
}

/// A guard whose lock was taken over gets `LockLost` on release; the new holder is untouched.
pub async fn release_after_takeover_is_lost(locks: &Locks) {
    let n = name("takeover-release");
    let old = mutex(locks, &n)
        .acquire(&AcquireOptions::new().watchdog_lease(SHORT))
        .await
        .unwrap()
        .unwrap();
    assert!(mutex(locks, &n).force_unlock().await.unwrap());
    let new = within(SOON, "takeover", mutex(locks, &n).lock_for(SOON))
        .await
        .unwrap()
        .expect("free after force");
    assert_kind(
        old.release().await,
        ErrorKind::LockLost,
        "release by the old holder",
    );
    assert!(
        mutex(locks, &n).is_locked().await.unwrap(),
        "the old holder released the new holder's lock"
    );
    assert_eq!(new.state(), LockState::Held);
    new.release().await.unwrap();
}

/// Releasing a guard after a force-unlock reports `LockLost` and leaves the lock free.
pub async fn release_after_force_unlock_is_lost(locks: &Locks) {
    let n = name("force-release");
    let g = mutex(locks, &n).lock().await.unwrap();
    assert!(mutex(locks, &n).force_unlock().await.unwrap());
    assert_kind(
        g.release().await,
        ErrorKind::LockLost,
        "release after force_unlock",
    );
    assert!(!mutex(locks, &n).is_locked().await.unwrap());
}

/// Every operation on a lost guard is a typed error, never a panic; a force-unlocked guard is
/// lost with `Deleted`.
pub async fn release_of_lost_guard_is_an_error_not_a_panic(locks: &Locks) {
    let n = name("lost-ops");
    let g = mutex(locks, &n)
        .acquire(&AcquireOptions::new().watchdog_lease(SHORT))
        .await
        .unwrap()
        .unwrap();
    mutex(locks, &n).force_unlock().await.unwrap();
    let reason = within(Duration::from_secs(10), "lost()", g.lost()).await;
    assert_eq!(
        reason,
        LostReason::Deleted,
        "why a force-unlocked guard was lost"
    );
    assert_kind(
        g.reenter().await,
        ErrorKind::LockLost,
        "reenter of a lost guard",
    );
    let e = g.release().await.expect_err("release of a lost guard");
    assert_eq!(e.kind(), ErrorKind::LockLost, "{e}");
}

/// `extend` to a shorter lease moves the guard's deadline too: when another client takes the
/// lock after the shorter lease, the first guard reads Lost.
pub async fn extend_to_a_shorter_lease_moves_the_deadline(locks: &Locks) {
    if !locks.capabilities().mutex.fixed_lease {
        return; // Unsupported: checked by fixed_lease_expires_and_old_guard_is_lost
    }
    let n = name("extend-shorter");
    let g = mutex(locks, &n)
        .acquire(&fixed(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    let t0 = std::time::Instant::now();
    g.extend(SHORT * 2).await.unwrap();
    assert_eq!(g.lease(), lockkit_core::Lease::Fixed(SHORT * 2));
    if let Some(left) = g.remaining() {
        assert!(left <= SHORT * 2, "the deadline stayed {left:?} away");
    }
    let other = within(
        Duration::from_secs(25),
        "takeover after the shorter lease",
        mutex(locks, &n).lock_for(Duration::from_secs(20)),
    )
    .await
    .unwrap()
    .expect("the lock is free after the shorter lease");
    assert_eq!(
        g.state(),
        LockState::Lost,
        "the first guard says Held while another holds the lock"
    );
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the shorter lease lasted {took:?}"
    );
    assert!(other.token() > g.token());
    other.release().await.unwrap();
}

/// A fixed lease starts when the lock is taken, not when the wait for it began: a waiter with a
/// 2 s fixed lease that waits 3 s still holds for 2 s once it gets the lock.
pub async fn fixed_lease_starts_when_the_lock_is_taken(locks: &Locks) {
    if !locks.capabilities().mutex.fixed_lease {
        return; // Unsupported: checked by fixed_lease_expires_and_old_guard_is_lost
    }
    let n = name("fixed-after-wait");
    let holder = mutex(locks, &n).lock().await.unwrap();
    let waiter = {
        let m = mutex(locks, &n);
        tokio::spawn(async move {
            let opts = fixed(SHORT * 2).wait(Duration::from_secs(20));
            m.acquire(&opts).await
        })
    };
    tokio::time::sleep(SHORT * 3).await;
    holder.release().await.unwrap();
    let g = within(SOON, "the waiter's acquire", waiter)
        .await
        .unwrap()
        .unwrap()
        .expect("the waiter gets the lock");
    assert_eq!(g.state(), LockState::Held);
    if let Some(left) = g.remaining() {
        assert!(
            left > SHORT,
            "the fixed lease ran while waiting: {left:?} left of {:?}",
            SHORT * 2
        );
    }
    tokio::time::sleep(SHORT).await;
    assert_eq!(
        g.state(),
        LockState::Held,
        "the fixed lease ran while waiting"
    );
    assert!(mutex(locks, &n).try_lock().await.unwrap().is_none());
    g.release().await.unwrap();
}

/// A budget or lease too large for the clock is a typed answer, never a panic: a wait of
/// `Duration::MAX` waits forever (and takes a free lock at once), a lease beyond `MAX_LEASE` is
/// an `InvalidArgument` (or `Unsupported` where fixed leases are), on the acquire and on extend.
pub async fn huge_budgets_and_leases_are_typed_not_panics(locks: &Locks) {
    let n = name("huge");
    let g = within(
        SOON,
        "lock_for(MAX)",
        mutex(locks, &n).lock_for(Duration::MAX),
    )
    .await
    .unwrap()
    .expect("a free lock");
    if locks.capabilities().mutex.fixed_lease {
        assert_kind(
            g.extend(Duration::MAX).await,
            ErrorKind::InvalidArgument,
            "extend(MAX)",
        );
    }
    g.release().await.unwrap();
    let m = locks.multi([&n]).unwrap();
    let g = within(SOON, "multi lock_for(MAX)", m.lock_for(Duration::MAX))
        .await
        .unwrap()
        .expect("a free set");
    g.release().await.unwrap();
    assert_kind(
        mutex(locks, &n)
            .acquire(&AcquireOptions::new().watchdog_lease(Duration::MAX))
            .await,
        ErrorKind::InvalidArgument,
        "a watchdog lease of Duration::MAX",
    );
    let fixed = mutex(locks, &n)
        .acquire(&AcquireOptions::new().fixed_lease(Duration::MAX))
        .await;
    let e = fixed.expect_err("a fixed lease of Duration::MAX");
    assert!(
        matches!(
            e.kind(),
            ErrorKind::InvalidArgument | ErrorKind::Unsupported
        ),
        "{e}"
    );
}
