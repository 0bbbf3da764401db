use std::time::Duration;

use super::{assert_kind, mutex, name, within, SHORT, SOON};
use crate::OverlapDetector;
use lockkit_core::{AcquireOptions, ErrorKind, LockState, Locks, Member};

async fn none_locked(locks: &Locks, names: &[&str], what: &str) {
    for n in names {
        assert!(
            !mutex(locks, n).is_locked().await.unwrap(),
            "{what}: member {n} is still held"
        );
    }
}

/// A multi-lock takes all of its members or none: with one member busy it times out within its
/// one budget and holds none of the others; once that member is free it takes all three.
pub async fn multi_takes_all_or_none(locks: &Locks) {
    let (a, b, c) = (name("multi-a"), name("multi-b"), name("multi-c"));
    let names = [c.as_str(), a.as_str(), b.as_str()];
    let busy = mutex(locks, &b).lock().await.unwrap();
    let set = locks.multi(names).unwrap();
    let started = std::time::Instant::now();
    let got = set.lock_for(Duration::from_millis(300)).await.unwrap();
    assert!(got.is_none(), "a multi-lock with a busy member was taken");
    assert!(
        started.elapsed() < SOON,
        "the budget is for the whole set: {:?}",
        started.elapsed()
    );
    none_locked(locks, &[&a, &c], "after a timed-out multi-acquire").await;
    assert!(set.try_lock().await.unwrap().is_none());
    none_locked(locks, &[&a, &c], "after a failed try").await;
    busy.release().await.unwrap();

    let g = within(SOON, "multi try_lock", set.try_lock())
        .await
        .unwrap()
        .expect("every member is free");
    let taken: Vec<&str> = g.tokens().iter().map(|(n, _)| *n).collect();
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    assert_eq!(taken, sorted, "members are taken in the one global order");
    assert!(g.token(&b).is_some() && g.token("not-a-member").is_none());
    for n in &names {
        assert!(mutex(locks, n).is_locked().await.unwrap(), "{n} not held");
    }
    assert_eq!(g.state(), LockState::Held);
    g.release().await.unwrap();
    none_locked(locks, &names, "after release").await;
    // A zero budget is one try of each member, however the backend takes a set.
    let g = set
        .lock_for(Duration::ZERO)
        .await
        .unwrap()
        .expect("a free set on a zero budget");
    g.release().await.unwrap();
}

/// Multi-locks over crossing sets never deadlock and never share a member: six tasks take
/// random two- and three-member subsets of four names, given in random orders.
pub async fn multi_sets_that_cross_do_not_deadlock(locks: &Locks) {
    const TASKS: u64 = 6;
    const ITERS: u64 = 8;
    let names: Vec<String> = (0..4).map(|i| name(&format!("cross-{i}"))).collect();
    let detectors: Vec<OverlapDetector> = names.iter().map(|_| OverlapDetector::new()).collect();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (locks, names, detectors) = (locks.clone(), names.clone(), detectors.clone());
        tasks.push(tokio::spawn(async move {
            let mut seed = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            for _ in 0..ITERS {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let mut picked: Vec<usize> = (0..4).collect();
                picked.rotate_left((seed % 4) as usize);
                if seed & 0x10 != 0 {
                    picked.reverse();
                }
                picked.truncate(2 + (seed >> 8) as usize % 2);
                let members: Vec<&str> = picked.iter().map(|&i| names[i].as_str()).collect();
                let g = locks
                    .multi(&members)
                    .unwrap()
                    .lock()
                    .await
                    .expect("multi lock");
                let inside: Vec<_> = picked.iter().map(|&i| detectors[i].enter()).collect();
                tokio::task::yield_now().await;
                drop(inside);
                g.release().await.expect("multi release");
            }
        }));
    }
    within(
        Duration::from_secs(120),
        "crossing multi-locks (a deadlock?)",
        futures::future::try_join_all(tasks),
    )
    .await
    .expect("task panicked");
    for (n, d) in names.iter().zip(&detectors) {
        assert_eq!(d.max_inside(), 1, "two holders of {n} at once");
    }
}

/// A multi-acquire dropped while it waits for a busy member gives back the members it took.
pub async fn dropped_multi_acquire_leaves_no_member_held(locks: &Locks) {
    let (a, b) = (name("multi-drop-a"), name("multi-drop-b"));
    let busy = mutex(locks, &b).lock().await.unwrap();
    let set = locks.multi([&a, &b]).unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(300), set.lock()).await;
    assert!(waiting.is_err(), "the set was taken while {b} was busy");
    within(SOON, "the dropped acquire's members released", async {
        while mutex(locks, &a).is_locked().await.unwrap() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    busy.release().await.unwrap();
    let g = within(SOON, "multi after the drop", set.lock())
        .await
        .unwrap();
    g.release().await.unwrap();
}

/// Losing any member makes the whole set lost: `lost()` resolves and the state reads Lost;
/// release then answers `LockLost` and still frees the other members.
pub async fn multi_is_lost_when_a_member_is(locks: &Locks) {
    let (a, b) = (name("multi-lost-a"), name("multi-lost-b"));
    let g = locks
        .multi([&a, &b])
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(SHORT))
        .await
        .unwrap()
        .expect("free set");
    let lost = g.lost();
    assert!(mutex(locks, &b).force_unlock().await.unwrap());
    within(Duration::from_secs(10), "the set's lost()", lost).await;
    assert_eq!(g.state(), LockState::Lost);
    // The other members stay held until the guard is released: nobody else gets into them
    // while the code under the guard may still be working.
    assert!(
        mutex(locks, &a).is_locked().await.unwrap(),
        "a live member was released behind the guard's back"
    );
    assert!(
        mutex(locks, &a).try_lock().await.unwrap().is_none(),
        "another holder got a live member of a held set"
    );
    assert_kind(
        g.release().await,
        ErrorKind::LockLost,
        "release of a lost set",
    );
    none_locked(locks, &[&a], "after releasing a lost set").await;
}

/// A multi-acquire never returns a set with a lost member: a member whose fixed lease ran out
/// while a later one was awaited makes the whole set be given back and taken again.
pub async fn multi_never_returns_a_lost_member(locks: &Locks) {
    if !locks.capabilities().mutex.fixed_lease {
        return; // Unsupported: checked by unsupported_capabilities_say_so
    }
    let (a, b) = (name("multi-late-a"), name("multi-late-b"));
    // `b` is busy for longer than `a`'s lease, so `a` runs out while `b` is awaited.
    let busy = mutex(locks, &b)
        .acquire(&AcquireOptions::new().fixed_lease(SHORT * 3))
        .await
        .unwrap()
        .expect("free");
    let freer = tokio::spawn(async move {
        tokio::time::sleep(SHORT * 5 / 2).await;
        busy.release().await
    });
    let g = locks
        .multi([&a, &b])
        .unwrap()
        .acquire(&AcquireOptions::new().fixed_lease(SHORT).wait(SOON * 2))
        .await
        .unwrap()
        .expect("the set comes free within the budget");
    assert_ne!(
        g.state(),
        LockState::Lost,
        "the multi-acquire returned a set with a lost member"
    );
    assert!(freer.await.unwrap().is_ok());
    let _ = g.release().await;
}

/// Members can be read or write holds of RW locks too: two sets that read the same RW lock hold
/// at once, a set that writes it waits. A member given twice, or no member, is refused.
pub async fn multi_mixes_read_and_write_members(locks: &Locks) {
    let (m, r) = (name("multi-mix-m"), name("multi-mix-r"));
    assert_kind(
        locks.multi([&m, &m]),
        ErrorKind::InvalidArgument,
        "a name given twice",
    );
    assert_kind(
        locks.multi(Vec::<String>::new()),
        ErrorKind::InvalidArgument,
        "no member",
    );
    if locks.capabilities().rwlock.is_none() {
        assert_kind(
            locks.multi_of(&[Member::Read(&r)]),
            ErrorKind::Unsupported,
            "an RW member where RW locks are unsupported",
        );
        return;
    }
    assert_kind(
        locks.multi_of(&[Member::Read(&r), Member::Write(&r)]),
        ErrorKind::InvalidArgument,
        "one RW lock read and written",
    );
    let readers = locks
        .multi_of(&[Member::Mutex(&m), Member::Read(&r)])
        .unwrap();
    let first = readers.lock().await.unwrap();
    let second = locks
        .multi_of(&[Member::Read(&r)])
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("readers share");
    let writer = locks.multi_of(&[Member::Write(&r)]).unwrap();
    assert!(
        writer.try_lock().await.unwrap().is_none(),
        "a writer got in"
    );
    first.release().await.unwrap();
    second.release().await.unwrap();
    let w = within(SOON, "the writer set", writer.lock()).await.unwrap();
    w.release().await.unwrap();
}

/// The wait budget is the whole set's, not each member's: three members are busy and come
/// free one after another (at 0.4, 0.8 and 1.2 s); a budget of 0.6 s takes the first, runs out
/// on the second, and returns none (a budget per member would have taken all three by 1.2 s).
pub async fn multi_budget_is_for_the_whole_set(locks: &Locks) {
    let names: Vec<String> = (0..3).map(|i| name(&format!("budget-{i}"))).collect();
    let mut holders = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let g = mutex(locks, n).lock().await.unwrap();
        holders.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400 * (i as u64 + 1))).await;
            g.release().await.unwrap();
        }));
    }
    let set = locks.multi(names.iter().map(String::as_str)).unwrap();
    let budget = Duration::from_millis(600);
    let started = std::time::Instant::now();
    let got = set.lock_for(budget).await.unwrap();
    let took = started.elapsed();
    assert!(
        got.is_none(),
        "taken after {took:?} on a budget of {budget:?}"
    );
    // The kernel's 100 ms for cleanup, and a little for a loaded machine.
    assert!(
        took < budget + Duration::from_millis(100 + 400),
        "a budget of {budget:?} took {took:?}"
    );
    for h in holders {
        within(SOON, "holders", h).await.unwrap();
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    none_locked(locks, &refs, "after a budget that ran out").await;
}

/// The watchdog keeps every member of a set past three leases, however the set was taken (in
/// one step or member by member), and a try of any member meanwhile is refused.
pub async fn multi_watchdog_keeps_every_member(locks: &Locks) {
    let names: Vec<String> = (0..3).map(|i| name(&format!("multi-dog-{i}"))).collect();
    let g = locks
        .multi(&names)
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(SHORT))
        .await
        .unwrap()
        .expect("a free set");
    tokio::time::sleep(SHORT * 3).await;
    assert_eq!(g.state(), LockState::Held, "the set after three leases");
    for n in &names {
        assert!(
            mutex(locks, n).try_lock().await.unwrap().is_none(),
            "{n} was free while the set was held"
        );
    }
    g.release().await.unwrap();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    none_locked(locks, &refs, "after release").await;
}

/// Multi-locks over crossing sets in two processes never deadlock: a child process takes
/// `[b, a]` 15 times while this one takes `[a, b]` over and over, until the child, its rounds
/// done, holds the set; that keeps this process out of both members until the child is killed
/// and its lease ends.
///
/// This process goes on taking the set until the child holds it, so the child's every round
/// meets this one's (a fixed count of rounds here would often end before the child process
/// even started, and, on a loaded machine, could still be short of its last round when the
/// child takes the set for good). A pause between rounds, as work between two uses of a set
/// would be, lets a backend without a fair queue (`file://` polls its OS locks) serve the child
/// too.
pub async fn multi_sets_that_cross_between_processes_do_not_deadlock(h: &crate::Harness) {
    let locks = h.locks().await;
    if !locks.capabilities().cross_process {
        return; // one process only
    }
    let (a, b) = (name("xproc-a"), name("xproc-b"));
    let (child_holds, mut told) = tokio::sync::watch::channel(false);
    let mine = {
        let set = locks.multi([a.as_str(), b.as_str()]).unwrap();
        tokio::spawn(async move {
            let mut rounds = 0u32;
            loop {
                tokio::select! {
                    biased;
                    () = async { drop(told.wait_for(|held| *held).await) } => return rounds,
                    g = set.lock_for(Duration::from_secs(20)) => {
                        let g = g.unwrap().unwrap_or_else(|| {
                            panic!("the set within 20 s, in round {rounds}, while the child \
                                    process takes it in turns")
                        });
                        g.release().await.unwrap();
                        rounds += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let lease = SHORT * 2;
    let mut child = h
        .spawn(
            &format!("{a}\n{b}"),
            crate::Hold::Multi { rounds: 15 },
            lease,
        )
        .await;
    child_holds.send_replace(true);
    let rounds = within(SOON, "this process's rounds", mine).await.unwrap();
    assert!(rounds > 0, "this process never took the set");
    for n in [&a, &b] {
        assert!(
            mutex(&locks, n).try_lock().await.unwrap().is_none(),
            "{n} free while the child process holds the set"
        );
    }
    child.kill().await;
    let set = locks.multi([a.as_str(), b.as_str()]).unwrap();
    let g = within(
        Duration::from_secs(20),
        "the set after the child's lease",
        set.lock_for(Duration::from_secs(15)),
    )
    .await
    .unwrap()
    .expect("the set once the killed child's lease ended");
    g.release().await.unwrap();
}
