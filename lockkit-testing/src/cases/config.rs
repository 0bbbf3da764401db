use std::time::{Duration, Instant};

use super::{assert_kind, mutex, name, within, SHORT, SOON};
use crate::Harness;
use lockkit_core::{AcquireOptions, ErrorKind, Lease};

/// The handle's default lease comes from its config (`LockConfig::lease` or the `lease` option):
/// an acquire that names no lease gets it, on the server too.
pub async fn configured_lease_is_the_default_lease(h: &Harness) {
    let seven = Duration::from_secs(7);
    for cfg in [
        h.config().with_lease(seven),
        h.config().with_option("lease", "7s"),
    ] {
        let locks = h.connect_with(cfg).await.expect("connects");
        assert_eq!(locks.default_lease(), seven);
        let m = mutex(&locks, &name("configured-lease"));
        let g = m.lock().await.unwrap();
        assert_eq!(g.lease(), Lease::Watchdog(seven));
        if let Some(left) = g.remaining() {
            assert!(left <= seven, "the guard's deadline is {left:?} away");
        }
        if locks.capabilities().mutex.remaining_lease {
            let left = m.remaining_lease().await.unwrap().expect("held");
            assert!(
                left <= seven,
                "the server keeps the lock {left:?} without its holder, not the configured {seven:?}"
            );
        }
        g.release().await.unwrap();
    }
}

/// A lease asked for per acquire is the lease the guard gets (on the server, and as its
/// deadline) or a clear `InvalidArgument`; never silently another one. Whole seconds from 1 s
/// up must be honoured: the test servers grant 1 s exactly (ZooKeeper `minSessionTimeout`, etcd's
/// election timeout), so a backend that refuses every lease fails here.
pub async fn asked_for_lease_is_the_lease_you_get(h: &Harness) {
    let locks = h.locks().await;
    let caps = locks.capabilities();
    let must = [
        Lease::Watchdog(SHORT),
        Lease::Fixed(SHORT),
        Lease::Watchdog(SHORT * 2),
        Lease::Fixed(SHORT * 3),
    ];
    let may = [
        Lease::Watchdog(Duration::from_millis(2500)),
        Lease::Fixed(Duration::from_millis(1500)),
        Lease::Fixed(lockkit_core::MIN_LEASE),
    ];
    for (lease, honoured) in must
        .into_iter()
        .map(|l| (l, true))
        .chain(may.into_iter().map(|l| (l, false)))
    {
        if matches!(lease, Lease::Fixed(_)) && !caps.mutex.fixed_lease {
            continue; // Unsupported: checked by unsupported_capabilities_say_so
        }
        let m = mutex(&locks, &name("asked-lease"));
        match m
            .acquire(&AcquireOptions::new().lease(lease).no_wait())
            .await
        {
            Ok(Some(g)) => {
                assert_eq!(g.lease(), lease, "asked for {lease:?}");
                let d = lease.duration();
                if let Some(left) = g.remaining() {
                    assert!(
                        left <= d,
                        "{lease:?}: the guard's deadline is {left:?} away"
                    );
                }
                if caps.mutex.remaining_lease {
                    match m.remaining_lease().await.unwrap() {
                        Some(left) => assert!(
                            left <= d,
                            "{lease:?}: the server keeps the lock for {left:?}"
                        ),
                        // A lease this short may have run out already on a loaded machine.
                        None => assert!(d <= SHORT, "{lease:?}: not held on the server"),
                    }
                }
                let _ = g.release().await;
            }
            Ok(None) => panic!("a free lock was busy"),
            Err(e) if honoured => {
                panic!("{lease:?}, which the test server grants exactly, was refused: {e}")
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{lease:?}: {e}");
                assert!(!e.to_string().is_empty());
            }
        }
    }
}

/// A holder process killed mid-hold (SIGKILL: it releases nothing) frees the lock after the
/// lease it asked for, not after the handle's default lease or a session timeout.
pub async fn killed_holder_frees_the_lock_after_its_lease(h: &Harness) {
    let locks = h.locks().await;
    if !locks.capabilities().cross_process {
        return; // an in-process table dies with its process: nobody is left to take over
    }
    let n = name("killed-holder");
    let lease = SHORT * 2;
    let mut child = h.spawn_holder(&n, lease).await;
    let m = mutex(&locks, &n);
    assert!(
        m.try_lock().await.unwrap().is_none(),
        "the holder process does not hold the lock"
    );
    child.kill().await;
    let killed = Instant::now();
    let g = m
        .lock_for(Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the lock is freed after its holder died");
    let took = killed.elapsed();
    assert!(
        took < lease + Duration::from_secs(3),
        "the lock came free {took:?} after its holder died, with a {lease:?} lease (the handle's \
         default lease is {:?})",
        locks.default_lease()
    );
    assert!(g.token() > child.token());
    g.release().await.unwrap();
}

fn with_query(url: &str, pair: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{pair}")
}

/// An unknown option, in `LockConfig::options` or in the URL, is a `Config` error that names it
/// and the known ones; a known one is taken.
pub async fn unknown_options_are_refused(h: &Harness) {
    let mut in_url = h.config();
    in_url.url = with_query(&in_url.url, "lease_tll=5s");
    for (cfg, key) in [
        (
            h.config().with_option("no_such_option", "1"),
            "no_such_option",
        ),
        (in_url, "lease_tll"),
    ] {
        let e = h.connect_with(cfg).await.expect_err("an unknown option");
        assert_eq!(e.kind(), ErrorKind::Config, "{e}");
        let msg = e.to_string();
        assert!(msg.contains(key), "the error does not name {key:?}: {msg}");
        assert!(
            msg.contains("lease"),
            "the error does not list the known options: {msg}"
        );
    }
    let mut known = h.config();
    known.url = with_query(&known.url, "lease=5s");
    let locks = h
        .connect_with(known)
        .await
        .expect("a known option connects");
    assert_eq!(locks.default_lease(), Duration::from_secs(5));
}

/// `Locks::close` means the same everywhere: guards turn Lost (reason `Closed`), everything
/// made from the handle answers `Closed`, and the lock is free for others at once.
pub async fn close_loses_guards_and_refuses_acquires(h: &Harness) {
    let locks = h.locks().await;
    let n = name("close");
    let m = mutex(&locks, &n);
    let g = m.lock().await.unwrap();
    let lost = g.lost();
    let clone = locks.clone();
    locks.close().await.unwrap();
    assert_eq!(g.state(), lockkit_core::LockState::Lost);
    assert_eq!(
        within(SOON, "lost() after close", lost).await,
        lockkit_core::LostReason::Closed
    );
    assert_kind(m.try_lock().await, ErrorKind::Closed, "acquire after close");
    assert_kind(
        m.is_locked().await,
        ErrorKind::Closed,
        "is_locked after close",
    );
    assert_kind(
        clone.mutex(&n),
        ErrorKind::Closed,
        "a clone's mutex after close",
    );
    assert_kind(
        g.release().await,
        ErrorKind::LockLost,
        "release after close",
    );
    let other = h.locks().await;
    let again = within(
        SOON,
        "acquire after close",
        mutex(&other, &n).lock_for(SOON),
    )
    .await
    .unwrap()
    .expect("close gave the lock back");
    again.release().await.unwrap();
}

/// `close()` racing acquires under way: every guard any of them got reads Lost (Closed) once
/// `close()` returned, and nothing they took is left held for another handle.
pub async fn close_racing_acquires_leaves_nothing_held(h: &Harness) {
    for round in 0..5 {
        let locks = h.locks().await;
        let tried = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        for task in 0..4 {
            let (locks, tried) = (locks.clone(), tried.clone());
            tasks.spawn(async move {
                let mut guards = Vec::new();
                for i in 0..40 {
                    let n = name(&format!("close-race-{round}-{task}-{i}"));
                    tried.lock().unwrap().push(n.clone());
                    let m = match locks.mutex(&n) {
                        Ok(m) => m,
                        Err(e) if e.kind() == ErrorKind::Closed => break,
                        Err(e) => panic!("mutex(): {e}"),
                    };
                    match m.try_lock().await {
                        Ok(Some(g)) => guards.push(g),
                        Ok(None) => panic!("{n} was busy"),
                        Err(e) if e.kind() == ErrorKind::Closed => break,
                        Err(e) => panic!("try_lock during close: {e}"),
                    }
                }
                guards
            });
        }
        // Let the tasks get going, then close under them.
        tokio::time::sleep(Duration::from_millis(2 * round)).await;
        locks.close().await.unwrap();
        while let Some(guards) = tasks.join_next().await {
            for g in guards.unwrap() {
                assert_eq!(
                    g.state(),
                    lockkit_core::LockState::Lost,
                    "{}: a guard is live after close() returned",
                    g.name()
                );
                assert_eq!(
                    within(SOON, "lost() after close", g.lost()).await,
                    lockkit_core::LostReason::Closed
                );
            }
        }
        let other = h.locks().await;
        let tried = tried.lock().unwrap().clone();
        for n in &tried {
            assert!(
                !mutex(&other, n).is_locked().await.unwrap(),
                "{n} is still held after close() returned"
            );
        }
        other.close().await.unwrap();
    }
}

/// Dropping the `Locks` handle does not end the mutexes and guards made from it: only `close`
/// does.
pub async fn handles_and_guards_outlive_the_locks_handle(h: &Harness) {
    let n = name("outlive");
    let m = h.locks().await.mutex(&n).unwrap();
    let g = m.lock().await.unwrap();
    drop(m);
    tokio::time::sleep(SHORT).await;
    assert_eq!(g.state(), lockkit_core::LockState::Held);
    let other = h.locks().await;
    assert!(
        mutex(&other, &n).try_lock().await.unwrap().is_none(),
        "the lock came free while its guard lives"
    );
    g.release().await.unwrap();
    let g = h.locks().await.mutex(&n).unwrap().lock().await.unwrap();
    assert_eq!(g.state(), lockkit_core::LockState::Held);
    g.release().await.unwrap();
}

/// Two `connect`s to the same URL exclude each other, as two processes would (for `mem://`:
/// parts of one process that connect separately).
pub async fn separate_connects_exclude_each_other(h: &Harness) {
    let (a, b) = (h.locks().await, h.locks().await);
    let n = name("two-connects");
    let g = mutex(&a, &n).lock().await.unwrap();
    assert!(
        mutex(&b, &n).try_lock().await.unwrap().is_none(),
        "a second connect took a held lock"
    );
    g.release().await.unwrap();
    let g = mutex(&b, &n)
        .try_lock()
        .await
        .unwrap()
        .expect("free after release");
    g.release().await.unwrap();
}
