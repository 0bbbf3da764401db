use std::time::Duration;

use super::{assert_kind, fixed, mutex, name};
use crate::{AcquireOptions, DistLockExt, ErrorKind, Locks, MAX_NAME_LEN};

/// Bad names fail with `InvalidName` for every primitive, before any capability check.
pub async fn invalid_names_are_rejected(locks: &Locks) {
    let long = "n".repeat(MAX_NAME_LEN + 1);
    for bad in ["", "line\nbreak", "nul\0", long.as_str()] {
        assert_kind(locks.mutex(bad), ErrorKind::InvalidName, "mutex");
        assert_kind(locks.rwlock(bad), ErrorKind::InvalidName, "rwlock");
        assert_kind(locks.semaphore(bad, 2), ErrorKind::InvalidName, "semaphore");
    }
}

/// Names with separators, spaces, Unicode, hash-tag braces or at the length limit work, and
/// names that differ only by such characters are different locks.
pub async fn unusual_valid_names_work(locks: &Locks) {
    let base = name("names");
    let max = format!("{base}/{}", "m".repeat(MAX_NAME_LEN - base.len() - 1));
    let names = [
        format!("{base}/a/b"),
        format!("{base}/a%2Fb"),
        format!("{base}/a b"),
        format!("{base}/ünï 锁"),
        format!("{base}/{{tag}}"),
        format!("{base}/.."),
        format!("{base}/*?[]"),
        format!("{base}/a:b"),
        max,
    ];
    let mut guards = Vec::new();
    for n in &names {
        let g = mutex(locks, n).try_lock().await.unwrap();
        guards.push(
            g.unwrap_or_else(|| panic!("lock {n:?} was busy: it collides with another name")),
        );
    }
    for g in guards {
        g.release().await.unwrap();
    }
}

/// Everything `capabilities()` denies answers `Unsupported`; everything it grants works.
pub async fn unsupported_capabilities_say_so(locks: &Locks) {
    let caps = locks.capabilities();
    let n = name("caps");
    match locks.rwlock(&n) {
        Ok(_) => assert!(caps.rwlock, "rwlock works but capabilities say it does not"),
        Err(e) => {
            assert!(!caps.rwlock, "rwlock failed: {e}");
            assert_eq!(e.kind(), &ErrorKind::Unsupported);
        }
    }
    match locks.semaphore(&n, 2) {
        Ok(_) => assert!(
            caps.semaphore,
            "semaphore works but capabilities say it does not"
        ),
        Err(e) => {
            assert!(!caps.semaphore, "semaphore failed: {e}");
            assert_eq!(e.kind(), &ErrorKind::Unsupported);
        }
    }
    let fair = mutex(locks, &format!("{n}/fair"))
        .acquire(&AcquireOptions::new().fair(true).no_wait())
        .await;
    match fair {
        Ok(g) => {
            assert!(
                caps.fair,
                "fair acquire works but capabilities say it does not"
            );
            g.expect("free lock").release().await.unwrap();
        }
        Err(e) => {
            assert!(!caps.fair, "fair acquire failed: {e}");
            assert_eq!(e.kind(), &ErrorKind::Unsupported);
        }
    }
    match mutex(locks, &format!("{n}/fixed"))
        .acquire(&fixed(Duration::from_secs(5)).no_wait())
        .await
    {
        Ok(g) => {
            assert!(
                caps.fixed_lease,
                "fixed lease works but capabilities say it does not"
            );
            g.expect("free lock").release().await.unwrap();
        }
        Err(e) => {
            assert!(!caps.fixed_lease, "fixed lease failed: {e}");
            assert_eq!(e.kind(), &ErrorKind::Unsupported);
        }
    }
    let plain = mutex(locks, &format!("{n}/plain"))
        .try_lock()
        .await
        .unwrap();
    plain
        .expect("a mutex is always supported")
        .release()
        .await
        .unwrap();
}
