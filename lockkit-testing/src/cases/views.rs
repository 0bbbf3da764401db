//! Operator views: listing the locks under a prefix and inspecting one.

use lockkit_core::{ErrorKind, HoldMode, LockEntry, Locks, Primitive};

use super::{assert_kind, mutex, name, within, SOON};

/// `list` finds every held mutex, RW lock, semaphore and led election under a prefix (and
/// nothing outside it), `inspect` shows a mutex holder with its guard's token and a leader with
/// its term, and released locks and resigned elections leave the list.
pub async fn list_finds_the_locks_under_a_prefix(locks: &Locks) {
    let base = name("list");
    let under = format!("{base}/");
    let caps = locks.capabilities();
    if !caps.list {
        assert_kind(locks.list(&under).await, ErrorKind::Unsupported, "list");
        return;
    }
    let m_name = format!("{base}/a {{x}}*");
    let m = mutex(locks, &m_name).lock().await.unwrap();
    let outside = mutex(locks, &format!("{base}x/b")).lock().await.unwrap();
    let mut expected = vec![LockEntry::new(m_name.clone(), Primitive::Mutex)];
    let read = match caps.rwlock {
        Some(_) => {
            let n = format!("{base}/rw");
            expected.push(LockEntry::new(n.clone(), Primitive::RwLock));
            Some(locks.rwlock(&n).unwrap().read_lock().await.unwrap())
        }
        None => None,
    };
    let permit = match caps.semaphore {
        Some(_) => {
            let n = format!("{base}/sem");
            expected.push(LockEntry::new(n.clone(), Primitive::Semaphore));
            Some(locks.semaphore(&n, 2).unwrap().acquire_one().await.unwrap())
        }
        None => None,
    };
    let lead = match caps.election {
        Some(_) => {
            let n = format!("{base}/elect");
            expected.push(LockEntry::new(n.clone(), Primitive::Election));
            Some(locks.election(&n).unwrap().campaign("v").await.unwrap())
        }
        None => None,
    };
    expected.sort();
    let listed = within(SOON, "list", locks.list(&under)).await.unwrap();
    assert_eq!(listed, expected);

    if caps.mutex.inspect {
        let info = locks.inspect(&m_name, Primitive::Mutex).await.unwrap();
        assert_eq!(info.holders.len(), 1, "{info:?}");
        assert_eq!(info.holders[0].mode, HoldMode::Exclusive);
        assert_eq!(info.holders[0].token, Some(m.token()), "{info:?}");
    }
    if caps.rwlock.is_some_and(|s| s.inspect) {
        let info = locks
            .inspect(&format!("{base}/rw"), Primitive::RwLock)
            .await
            .unwrap();
        let modes: Vec<HoldMode> = info.holders.iter().map(|h| h.mode).collect();
        assert_eq!(modes, [HoldMode::Shared], "{info:?}");
    }
    if caps.semaphore.is_some_and(|s| s.inspect) {
        let info = locks
            .inspect(&format!("{base}/sem"), Primitive::Semaphore)
            .await
            .unwrap();
        let modes: Vec<HoldMode> = info.holders.iter().map(|h| h.mode).collect();
        assert_eq!(modes, [HoldMode::Permits(1)], "{info:?}");
    }

    if let (Some(lead), true) = (&lead, caps.election.is_some_and(|s| s.inspect)) {
        let info = locks
            .inspect(&format!("{base}/elect"), Primitive::Election)
            .await
            .unwrap();
        assert_eq!(info.holders.len(), 1, "{info:?}");
        assert_eq!(info.holders[0].token, Some(lead.term()), "{info:?}");
    }

    m.release().await.unwrap();
    outside.release().await.unwrap();
    if let Some(l) = lead {
        assert!(l.resign().await.unwrap());
    }
    if let Some(r) = read {
        r.release().await.unwrap();
    }
    if let Some(p) = permit {
        p.release().await.unwrap();
    }
    let listed = within(SOON, "list", locks.list(&under)).await.unwrap();
    assert_eq!(listed, [], "released locks are still listed");
    assert_kind(
        locks.list("bad\nprefix").await,
        ErrorKind::InvalidName,
        "a prefix with a control character",
    );
}
