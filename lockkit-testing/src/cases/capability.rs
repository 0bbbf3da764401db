use std::time::Duration;

use super::{assert_kind, fixed, mutex, name};
use lockkit_core::{AcquireOptions, ErrorKind, Locks, Primitive, Result, MAX_NAME_LEN};

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

/// Everything `capabilities()` denies answers `Unsupported`; everything it grants works, for
/// every primitive.
pub async fn unsupported_capabilities_say_so(locks: &Locks) {
    let caps = locks.capabilities();
    let n = name("caps");
    /// One claim: `granted` must match whether `outcome` worked; a denial must be typed.
    fn check<T>(granted: bool, what: &str, outcome: Result<T>) -> Option<T> {
        match outcome {
            Ok(v) => {
                assert!(granted, "{what} works but capabilities say it does not");
                Some(v)
            }
            Err(e) => {
                assert!(!granted, "{what} failed: {e}");
                assert_eq!(e.kind(), ErrorKind::Unsupported, "{what}: {e}");
                None
            }
        }
    }
    let m = mutex(locks, &format!("{n}/m"));
    for (what, support, opts) in [
        (
            "fair mutex",
            caps.mutex.fair,
            AcquireOptions::new().fair(true).no_wait(),
        ),
        (
            "fixed-lease mutex",
            caps.mutex.fixed_lease,
            fixed(Duration::from_secs(5)).no_wait(),
        ),
    ] {
        if let Some(g) = check(support, what, m.acquire(&opts).await) {
            g.expect("free lock").release().await.unwrap();
        }
    }
    check(
        caps.mutex.remaining_lease,
        "remaining_lease",
        m.remaining_lease().await,
    );
    check(
        caps.mutex.inspect,
        "mutex inspect",
        locks.inspect(&n, Primitive::Mutex).await,
    );
    let plain = m.try_lock().await.unwrap();
    plain
        .expect("a mutex is always supported")
        .release()
        .await
        .unwrap();

    if let Some(rw) = check(caps.rwlock.is_some(), "rwlock", locks.rwlock(&n)) {
        let s = caps.rwlock.unwrap_or_default();
        for (what, support, opts) in [
            (
                "fair rwlock",
                s.fair,
                AcquireOptions::new().fair(true).no_wait(),
            ),
            (
                "fixed-lease rwlock",
                s.fixed_lease,
                fixed(Duration::from_secs(5)).no_wait(),
            ),
        ] {
            if let Some(g) = check(support, what, rw.write(&opts).await) {
                g.expect("free lock").release().await.unwrap();
            }
            if let Some(g) = check(support, what, rw.read(&opts).await) {
                g.expect("free lock").release().await.unwrap();
            }
        }
        check(
            s.inspect,
            "rwlock inspect",
            locks.inspect(&n, Primitive::RwLock).await,
        );
    }
    if let Some(sem) = check(
        caps.semaphore.is_some(),
        "semaphore",
        locks.semaphore(&n, 2),
    ) {
        let s = caps.semaphore.unwrap_or_default();
        for (what, support, opts) in [
            (
                "fair semaphore",
                s.fair,
                AcquireOptions::new().fair(true).no_wait(),
            ),
            (
                "fixed-lease semaphore",
                s.fixed_lease,
                fixed(Duration::from_secs(5)).no_wait(),
            ),
        ] {
            if let Some(p) = check(support, what, sem.acquire(1, &opts).await) {
                p.expect("free permit").release().await.unwrap();
            }
        }
        check(
            s.inspect,
            "semaphore inspect",
            locks.inspect(&n, Primitive::Semaphore).await,
        );
    }
}
