use std::time::Duration;

use super::{assert_kind, name, within, HEARD, SOON};
use lockkit_core::{ErrorKind, Locks, RwLock};

/// The rwlock for a case, or `None` after checking that an unsupported backend says so.
fn rw(locks: &Locks, case: &str) -> Option<(String, RwLock)> {
    let n = name(case);
    if locks.capabilities().rwlock.is_none() {
        assert_kind(locks.rwlock(&n), ErrorKind::Unsupported, "rwlock");
        return None;
    }
    let lock = locks.rwlock(&n).expect("rwlock");
    Some((n, lock))
}

/// Readers share.
pub async fn rw_readers_share(locks: &Locks) {
    let Some((n, a)) = rw(locks, "rw-share") else {
        return;
    };
    let b = locks.rwlock(&n).unwrap();
    let r1 = a.read_lock().await.unwrap();
    let r2 = b.try_read().await.unwrap().expect("second reader shut out");
    assert!(a.is_locked().await.unwrap());
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    assert!(!a.is_locked().await.unwrap());
}

/// A writer excludes readers and writers.
pub async fn rw_writer_is_exclusive(locks: &Locks) {
    let Some((n, a)) = rw(locks, "rw-excl") else {
        return;
    };
    let b = locks.rwlock(&n).unwrap();
    let w = a.write_lock().await.unwrap();
    assert!(
        b.try_read().await.unwrap().is_none(),
        "reader entered under a writer"
    );
    assert!(b.try_write().await.unwrap().is_none(), "two writers");
    w.release().await.unwrap();
    let r = b
        .try_read()
        .await
        .unwrap()
        .expect("reader after writer left");
    assert!(
        a.try_write().await.unwrap().is_none(),
        "writer entered under a reader"
    );
    r.release().await.unwrap();
}

/// A waiting writer blocks readers that arrive after it (writers are not starved).
pub async fn rw_waiting_writer_blocks_new_readers(locks: &Locks) {
    let Some((n, a)) = rw(locks, "rw-writer-first") else {
        return;
    };
    let r1 = a.read_lock().await.unwrap();
    let writer_lock = locks.rwlock(&n).unwrap();
    let writer = tokio::spawn(async move {
        let w = writer_lock.write_lock().await.unwrap();
        let token = w.token();
        tokio::time::sleep(Duration::from_millis(100)).await;
        w.release().await.unwrap();
        token
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!writer.is_finished());
    let late = locks.rwlock(&n).unwrap().try_read().await.unwrap();
    assert!(late.is_none(), "a new reader overtook a waiting writer");
    r1.release().await.unwrap();
    within(SOON, "writer after readers left", writer)
        .await
        .unwrap();
    let r = within(SOON, "reader after writer", a.read_lock())
        .await
        .unwrap();
    r.release().await.unwrap();
}

/// A write lock downgrades to a read lock: other readers may join, writers stay out.
pub async fn rw_downgrade_keeps_readers_out_of_write(locks: &Locks) {
    let Some((n, a)) = rw(locks, "rw-downgrade") else {
        return;
    };
    let w = a.write_lock().await.unwrap();
    let token = w.token();
    let r = w.downgrade().await.unwrap();
    assert_eq!(r.state(), lockkit_core::LockState::Held);
    assert!(r.token() >= token);
    let b = locks.rwlock(&n).unwrap();
    assert!(
        b.try_write().await.unwrap().is_none(),
        "writer entered under a downgraded reader"
    );
    let r2 = b
        .try_read()
        .await
        .unwrap()
        .expect("reader shut out by a downgraded lock");
    r.release().await.unwrap();
    r2.release().await.unwrap();
    let w2 = within(SOON, "writer after downgrade", b.write_lock())
        .await
        .unwrap();
    assert!(w2.token() > token);
    w2.release().await.unwrap();
}

/// Upgrading a read lock fails at once with a typed error.
pub async fn rw_upgrade_fails_typed(locks: &Locks) {
    let Some((_, a)) = rw(locks, "rw-upgrade") else {
        return;
    };
    let r = a.read_lock().await.unwrap();
    assert_kind(r.upgrade(), ErrorKind::UpgradeNotSupported, "upgrade");
    assert_eq!(
        r.state(),
        lockkit_core::LockState::Held,
        "a failed upgrade must keep the read lock"
    );
    r.release().await.unwrap();
}

/// Reads are reentrant through `reenter`.
pub async fn rw_reentrant_reads(locks: &Locks) {
    let Some((n, a)) = rw(locks, "rw-reenter") else {
        return;
    };
    let r1 = a.read_lock().await.unwrap();
    let r2 = r1.reenter().await.unwrap();
    assert_eq!(r1.hold_count(), 2);
    r1.release().await.unwrap();
    let b = locks.rwlock(&n).unwrap();
    assert!(
        b.try_write().await.unwrap().is_none(),
        "read released with a hold left"
    );
    r2.release().await.unwrap();
    let w = within(SOON, "writer after reads", b.write_lock())
        .await
        .unwrap();
    w.release().await.unwrap();
}

/// `extend` keeps the mode: an extended read lock is still a read lock, which other readers
/// share.
pub async fn rw_extend_keeps_a_reader_a_reader(locks: &Locks) {
    let Some((_, rw)) = rw(locks, "rw-extend") else {
        return;
    };
    if !locks.capabilities().rwlock.is_some_and(|c| c.fixed_lease) {
        return; // Unsupported: checked by unsupported_capabilities_say_so
    }
    let opts = lockkit_core::AcquireOptions::new()
        .fixed_lease(Duration::from_secs(5))
        .no_wait();
    let r = rw.read(&opts).await.unwrap().expect("free");
    r.extend(Duration::from_secs(6)).await.unwrap();
    let other = within(SOON, "a second reader", rw.try_read())
        .await
        .unwrap()
        .expect("an extended read lock keeps other readers out");
    assert!(rw.try_write().await.unwrap().is_none());
    other.release().await.unwrap();
    r.release().await.unwrap();
}

/// A write lock extended and then downgraded keeps the extended lease for its read hold (Redis
/// once gave it the lease the write lock was acquired with).
pub async fn rw_downgrade_after_an_extend_keeps_the_extended_lease(locks: &Locks) {
    let Some((_, rw)) = rw(locks, "rw-extend-downgrade") else {
        return;
    };
    if !locks.capabilities().rwlock.is_some_and(|c| c.fixed_lease) {
        return; // Unsupported: checked by unsupported_capabilities_say_so
    }
    let opts = lockkit_core::AcquireOptions::new()
        .fixed_lease(Duration::from_secs(2))
        .no_wait();
    let w = rw.write(&opts).await.unwrap().expect("free");
    w.extend(Duration::from_secs(30)).await.unwrap();
    let r = w.downgrade().await.unwrap();
    let left = r.remaining().expect("a fixed lease has a deadline");
    assert!(left > Duration::from_secs(20), "{left:?}");
    r.release().await.unwrap();
}

/// A downgrade gives the write lock up on purpose: the write guard's `lost()` must not fire
/// (ZooKeeper reports the write node's deletion before the downgrade's reply).
pub async fn rw_downgrade_does_not_fire_lost(locks: &Locks) {
    let Some((_, rw)) = rw(locks, "rw-downgrade-lost") else {
        return;
    };
    let w = rw.write_lock().await.unwrap();
    // Long enough for a backend to watch the write lock for deletion.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lost = w.lost();
    let r = w.downgrade().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), lost)
            .await
            .is_err(),
        "the downgraded write guard's lost() fired"
    );
    assert_eq!(r.state(), lockkit_core::LockState::Held);
    r.release().await.unwrap();
}

/// A force-unlock of a read-write lock reaches its readers and its writer at once, not at their
/// next renewal (a third of a 30 s lease away).
pub async fn rw_force_unlock_is_heard_at_once(locks: &Locks) {
    let Some((n, a)) = rw(locks, "rw-force-heard") else {
        return;
    };
    let long = lockkit_core::AcquireOptions::new().watchdog_lease(Duration::from_secs(30));
    let b = locks.rwlock(&n).unwrap();
    let r1 = a.read(&long).await.unwrap().expect("first reader");
    let r2 = b.read(&long).await.unwrap().expect("second reader");
    assert!(a.force_unlock().await.unwrap());
    for r in [&r1, &r2] {
        within(HEARD, "a reader's lost() after force_unlock", r.lost()).await;
    }
    let w = a
        .write(&long)
        .await
        .unwrap()
        .expect("writer after force_unlock");
    assert!(b.force_unlock().await.unwrap());
    within(HEARD, "the writer's lost() after force_unlock", w.lost()).await;
    assert_kind(
        w.release().await,
        ErrorKind::LockLost,
        "writer's release after force_unlock",
    );
}
