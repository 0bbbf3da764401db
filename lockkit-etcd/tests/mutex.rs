//! The etcd mutex's fixes over Go's `concurrency.Mutex` (issue 6), each proven against a real
//! etcd, plus the session, close, cross-process and `is_owner` behaviour.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{connect, eventually, keys, name, raw, url};
use lockkit_core::{ErrorKind, LockState};
use lockkit_etcd::etcd_client::{Compare, PutOptions, Txn, TxnOp};

const SOON: Duration = Duration::from_secs(5);

/// A key name comes back as soon as its session locks again. A waiter that only checked whether
/// its predecessor's key *name* exists would wait forever here; lockkit compares create revisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_key_name_does_not_deadlock() {
    let Some(url) = url() else { return };
    let (a, b) = (connect(&url, "").await, connect(&url, "").await);
    let n = name("reuse");
    let (ma, mb) = (a.mutex(&n).unwrap(), b.mutex(&n).unwrap());
    let g1 = ma.lock().await.unwrap();
    let first_key = a.key_of(&g1).await.unwrap();
    let waiter = tokio::spawn(async move { mb.lock_for(Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A releases and at once queues again: its new key has the same name as before.
    g1.release().await.unwrap();
    let ma2 = ma.clone();
    let again = tokio::spawn(async move { ma2.lock_for(Duration::from_secs(20)).await });
    let gb = tokio::time::timeout(SOON, waiter)
        .await
        .expect("B woke up")
        .unwrap()
        .unwrap()
        .expect("B got the lock");
    let ga = {
        gb.release().await.unwrap();
        tokio::time::timeout(SOON, again)
            .await
            .expect("A woke up")
            .unwrap()
            .unwrap()
            .expect("A got the lock again")
    };
    assert_eq!(
        a.key_of(&ga).await.unwrap(),
        first_key,
        "the test needs the key name to come back"
    );
    ga.release().await.unwrap();
}

/// Our own key deleted while we wait (etcd issue 11456): we must not believe we hold the lock when
/// our predecessors go away. Here, in one transaction, W's key is deleted and a foreign holder F
/// (a Go client, say) queues; when H leaves, F holds, and W, which queued again behind F, waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_whose_key_vanished_does_not_think_it_holds() {
    let Some(url) = url() else { return };
    let mut r = raw(&url).await;
    let (h, w) = (connect(&url, "").await, connect(&url, "").await);
    let n = name("vanished");
    let holder = h.mutex(&n).unwrap().lock().await.unwrap();
    let mw = w.mutex(&n).unwrap();
    let waiter = tokio::spawn(async move { mw.lock_for(Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ks = keys(&mut r, &n).await;
    assert_eq!(ks.len(), 2, "holder and waiter: {ks:?}");
    let foreign = format!("{}foreign", common::prefix(&n));
    let swap = Txn::new().and_then([
        TxnOp::delete(ks[1].0.clone(), None),
        TxnOp::put(foreign.clone(), "", None),
    ]);
    r.txn(swap).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiter.is_finished(),
        "W believed it held the lock while the foreign key held it"
    );
    let now = keys(&mut r, &n).await;
    assert_eq!(now[0].0, foreign, "{now:?}");
    assert!(now[1].1 > ks[1].1, "W queued again with a new key: {now:?}");
    r.delete(foreign, None).await.unwrap();
    let gw = tokio::time::timeout(SOON, waiter)
        .await
        .expect("W woke up")
        .unwrap()
        .unwrap()
        .expect("W holds after F");
    gw.release().await.unwrap();
}

/// Unlock deletes only our key with our create revision (etcd issue 22082): a stale guard cannot
/// delete a newer key of the same name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_guard_cannot_delete_a_newer_key_of_the_same_name() {
    let Some(url) = url() else { return };
    let mut r = raw(&url).await;
    let a = connect(&url, "").await;
    let n = name("stale");
    let g = a.mutex(&n).unwrap().lock().await.unwrap();
    let key = a.key_of(&g).await.unwrap();
    // Someone deletes our key and a key of the same name is created again (newer revision).
    r.delete(key.clone(), None).await.unwrap();
    eventually(SOON, "guard turns Lost", || async {
        g.state() == LockState::Lost
    })
    .await;
    r.put(key.clone(), "", None).await.unwrap();
    let e = g.release().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LockLost, "{e}");
    let ks = keys(&mut r, &n).await;
    assert_eq!(ks.len(), 1, "the newer key was deleted by a stale unlock");
    r.delete(key, None).await.unwrap();
}

/// A dropped or timed-out acquire deletes its key (etcd issue 9715).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_and_timed_out_acquires_leave_no_key() {
    let Some(url) = url() else { return };
    let mut r = raw(&url).await;
    let (h, w) = (connect(&url, "").await, connect(&url, "").await);
    let n = name("cancel-keys");
    let holder = h.mutex(&n).unwrap().lock().await.unwrap();
    let m = w.mutex(&n).unwrap();
    // Timed out: the key is gone before the acquire returns.
    assert!(m
        .lock_for(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        keys(&mut r, &n).await.len(),
        1,
        "a timed-out acquire left its key"
    );
    // Dropped while waiting, in this task and in an aborted task.
    let _ = tokio::time::timeout(Duration::from_millis(200), m.lock()).await;
    let m2 = w.mutex(&n).unwrap();
    let t = tokio::spawn(async move { m2.lock().await.map(drop) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    t.abort();
    let _ = t.await;
    // Dropped at once, while the create transaction is still in flight.
    for _ in 0..20 {
        let f = m.lock();
        let _ = tokio::time::timeout(Duration::from_micros(300), f).await;
    }
    eventually(SOON, "only the holder's key is left", || {
        let mut r = r.clone();
        let n = n.clone();
        async move { keys(&mut r, &n).await.len() == 1 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(keys(&mut r, &n).await.len(), 1, "a late create came back");
    holder.release().await.unwrap();
    assert!(keys(&mut r, &n).await.is_empty());
}

/// The session lease revoked behind our back: the guard turns Lost, and the next acquire gets a
/// new lease transparently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_session_marks_guards_lost_and_next_acquire_uses_a_new_lease() {
    let Some(url) = url() else { return };
    let mut r = raw(&url).await;
    let a = connect(&url, "").await;
    let n = name("session-lost");
    let g = a.mutex(&n).unwrap().lock().await.unwrap();
    let other = a
        .mutex(&format!("{n}/other"))
        .unwrap()
        .lock()
        .await
        .unwrap();
    let lease = keys(&mut r, &n).await[0].2;
    r.lease_revoke(lease).await.unwrap();
    let reason = tokio::time::timeout(SOON, g.lost()).await.expect("lost()");
    // The watch usually sees the revoke's deletes before the keepalive sees the lease gone.
    assert!(
        matches!(
            reason,
            lockkit_core::LostReason::Deleted | lockkit_core::LostReason::SessionExpired
        ),
        "{reason:?}"
    );
    tokio::time::timeout(SOON, other.lost())
        .await
        .expect("every guard of the session turns Lost");
    let g2 = a
        .mutex(&n)
        .unwrap()
        .lock_for(SOON)
        .await
        .unwrap()
        .expect("next acquire");
    let ks = keys(&mut r, &n).await;
    assert_ne!(ks[0].2, lease, "the next acquire reused the dead lease");
    assert_eq!(g2.state(), LockState::Held);
    g2.release().await.unwrap();
    assert_eq!(g.release().await.unwrap_err().kind(), ErrorKind::LockLost);
}

/// `close()` revokes the session lease: keys gone, guards Lost, later calls fail with `Closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_revokes_the_lease() {
    let Some(url) = url() else { return };
    let mut r = raw(&url).await;
    let a = connect(&url, "").await;
    let n = name("close");
    let g = a.mutex(&n).unwrap().lock().await.unwrap();
    let lease = keys(&mut r, &n).await[0].2;
    a.close().await.unwrap();
    assert!(keys(&mut r, &n).await.is_empty(), "close left the key");
    let ttl = r.lease_time_to_live(lease, None).await.unwrap().ttl();
    assert_eq!(ttl, -1, "the lease still exists");
    assert_eq!(g.state(), LockState::Lost);
    assert_eq!(a.mutex(&n).unwrap_err().kind(), ErrorKind::Closed);
}

/// `is_owner()` guards a user transaction: it passes while we hold the lock, fails after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_owner_guards_a_user_transaction() {
    let Some(url) = url() else { return };
    let a = connect(&url, "").await;
    let n = name("is-owner");
    let m = a.mutex(&n).unwrap();
    let g = m.lock().await.unwrap();
    let data = format!("lockkit-test-data/{n}");
    let write = |v: &'static str| TxnOp::put(data.clone(), v, Some(PutOptions::new()));
    let cmp = a.is_owner(&g).await.unwrap();
    assert!(common::txn_if(&mut a.client(), cmp.clone(), write("one")).await);
    assert!(m.force_unlock().await.unwrap());
    assert!(
        !common::txn_if(&mut a.client(), cmp, write("two")).await,
        "a write guarded by is_owner() went through after the lock was lost"
    );
    a.client().delete(data, None).await.unwrap();
}

/// A closed port: connect fails fast with a retryable Connection error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_port_is_a_quick_retryable_connection_error() {
    let port = lockkit_testing::free_port();
    let started = Instant::now();
    let e = lockkit_etcd::connect(&lockkit_core::LockConfig::new(format!(
        "etcd://127.0.0.1:{port}"
    )))
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    assert!(e.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

const CHILD_ENV: &str = "LOCKKIT_ETCD_TEST_CHILD_LOCK";

/// A holder in another process is killed mid-hold: the lock comes free after the session TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_process_frees_the_lock_after_its_lease() {
    let Some(url) = url() else { return };
    let n = name("killed");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holder", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &n)
        .env("LOCKKIT_TEST_ETCD_URL", &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("child output").unwrap();
        if line.contains("CHILD-HOLDS") {
            break;
        }
    }
    let a = connect(&url, "").await;
    let m = a.mutex(&n).unwrap();
    assert!(m.try_lock().await.unwrap().is_none(), "child does not hold");
    child.kill().unwrap(); // SIGKILL: no cleanup at all
    child.wait().unwrap();
    let started = Instant::now();
    let g = m
        .lock_for(Duration::from_secs(15))
        .await
        .unwrap()
        .expect("lock freed by the lease");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(6),
        "took {took:?} with a 2 s lease"
    );
    g.release().await.unwrap();
}

/// The child side of the test above (does nothing unless re-executed with the variable set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_holder() {
    let Ok(n) = std::env::var(CHILD_ENV) else {
        return;
    };
    let url = std::env::var("LOCKKIT_TEST_ETCD_URL").unwrap();
    let a = connect(&url, "lease_ttl=2s").await;
    let g = a.mutex(&n).unwrap().lock().await.unwrap();
    println!("CHILD-HOLDS {}", g.token());
    tokio::time::sleep(Duration::from_secs(120)).await;
}

/// Several endpoints, the first one dead: connect, acquire and release fail over to the live one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_first_endpoint_fails_over() {
    let Some(url) = url() else { return };
    let port = lockkit_testing::free_port();
    let live = url.trim_start_matches("etcd://");
    let mut cfg = lockkit_core::LockConfig::new(format!("etcd://127.0.0.1:{port},{live}"));
    cfg.command_timeout = Some(Duration::from_secs(1));
    let locks = lockkit_etcd::connect(&cfg)
        .await
        .expect("fail over at connect");
    let n = name("failover");
    let g = tokio::time::timeout(SOON, locks.mutex(&n).unwrap().lock())
        .await
        .expect("acquire through the live endpoint")
        .unwrap();
    assert!(locks.mutex(&n).unwrap().try_lock().await.unwrap().is_none());
    g.release().await.unwrap();
    assert!(!locks.mutex(&n).unwrap().is_locked().await.unwrap());
}

/// `is_owner()` works for write guards and permits too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_owner_covers_write_guards_and_permits() {
    let Some(url) = url() else { return };
    let a = connect(&url, "").await;
    let n = name("is-owner-kinds");
    let w = a.rwlock(&n).unwrap().write_lock().await.unwrap();
    let p = a.semaphore(&n, 2).unwrap().acquire_one().await.unwrap();
    for cmp in [a.is_owner(&w).await.unwrap(), a.is_owner(&p).await.unwrap()] {
        let txn = Txn::new().when([cmp]);
        assert!(a.client().txn(txn).await.unwrap().succeeded());
    }
    w.release().await.unwrap();
    p.release().await.unwrap();
}

/// `remaining_lease()` reports the holder's lease (the session TTL for watchdog leases).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remaining_lease_reports_the_holders_lease() {
    let Some(url) = url() else { return };
    let a = connect(&url, "lease_ttl=5s").await;
    let m = a.mutex(&name("remaining")).unwrap();
    assert_eq!(m.remaining_lease().await.unwrap(), None);
    let g = m.lock().await.unwrap();
    let left = m.remaining_lease().await.unwrap().expect("held");
    assert!(
        left <= Duration::from_secs(5) && left >= Duration::from_secs(2),
        "{left:?}"
    );
    g.release().await.unwrap();
    assert_eq!(m.remaining_lease().await.unwrap(), None);
}

/// A waiter's watch can lag the server. Here B's watch sees everything 100 ms late. H's key and then B's
/// (its lease revoked) are deleted one after the other; W, queued behind B with a watch in
/// step, sees both and takes the lock. B's watch shows H's delete first, so B's turn seems to
/// have come; taking it on the watch's word would give B the lock after W, with a lower token
/// and a key that no longer exists. B must read its key again first, find it gone and queue
/// anew behind W.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_whose_turn_comes_on_a_lagging_watch_confirms_it_first() {
    let Some(url) = url() else { return };
    let server = common::server(&url);
    let proxy = common::lagging_proxy(&server, Duration::from_millis(100)).await;
    let lagging = format!("etcd://{}", proxy.addr());
    let (h, w) = (connect(&url, "").await, connect(&url, "").await);
    let b = connect(&lagging, "").await;
    let mut r = raw(&url).await;
    let n = name("lagging-watch");
    let gh = h.mutex(&n).unwrap().lock().await.unwrap();
    let mb = b.mutex(&n).unwrap();
    let waiter_b = tokio::spawn(async move { mb.lock_for(Duration::from_secs(10)).await });
    common::until_keys(&r, &n, 2).await;
    let mw = w.mutex(&n).unwrap();
    let waiter_w = tokio::spawn(async move { mw.lock_for(Duration::from_secs(10)).await });
    common::until_keys(&r, &n, 3).await;
    let b_lease = keys(&mut r, &n).await[1].2;
    // B's watch has shown it its own key by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    gh.release().await.unwrap();
    // Apart enough to reach B's watch in two messages, well within its lag.
    tokio::time::sleep(Duration::from_millis(30)).await;
    r.lease_revoke(b_lease).await.unwrap();
    let gw = tokio::time::timeout(SOON, waiter_w)
        .await
        .expect("W woke up")
        .unwrap()
        .unwrap()
        .expect("W got the lock");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter_b.is_finished() || gw.state() != LockState::Held,
        "B returned while W holds the lock: {:?}",
        waiter_b.await.unwrap().map(|g| g.map(|g| g.token()))
    );
    let w_token = gw.token();
    gw.release().await.unwrap();
    let gb = tokio::time::timeout(SOON, waiter_b)
        .await
        .expect("B woke up")
        .unwrap()
        .unwrap()
        .expect("B got the lock after W");
    assert!(
        gb.token() > w_token,
        "B's token {:?} must follow W's {w_token:?}",
        gb.token()
    );
    assert_eq!(gb.state(), LockState::Held);
    gb.release().await.unwrap();
}

/// A waiter whose watch lags past its wait budget: H lets go shortly before B's budget runs out,
/// and B's watch (800 ms behind) would say so only after it. The lock is free and B is first in line, so B must
/// take it (the wait's end is settled by a read of the queue) rather than give up and leave the
/// lock to whoever comes next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_whose_watch_lags_past_its_budget_still_takes_its_turn() {
    let Some(url) = url() else { return };
    let server = common::server(&url);
    let proxy = common::lagging_proxy(&server, Duration::from_millis(800)).await;
    let h = connect(&url, "").await;
    let b = connect(&format!("etcd://{}", proxy.addr()), "").await;
    let n = name("lagging-budget");
    let gh = h.mutex(&n).unwrap().lock().await.unwrap();
    let mb = b.mutex(&n).unwrap();
    // B's session and watch are set up before the timed wait.
    assert!(mb.try_lock().await.unwrap().is_none());
    let started = Instant::now();
    let waiter = tokio::spawn(async move { mb.lock_for(Duration::from_millis(1200)).await });
    tokio::time::sleep_until((started + Duration::from_millis(1000)).into()).await;
    gh.release().await.unwrap();
    let gb = tokio::time::timeout(SOON, waiter)
        .await
        .expect("B's acquire ended")
        .unwrap()
        .unwrap();
    let gb = gb.expect("B, first in line when its budget ran out, got the lock");
    assert_eq!(gb.state(), LockState::Held);
    gb.release().await.unwrap();
}

/// A create that timed out on our side can still be applied later (a stopped member takes it up
/// when it resumes), after the acquire gave up and deleted its key. The key that appears is ours
/// (our session's lease and key name, in a slot no acquisition holds) and would block the lock
/// for as long as our session lives. Here that late create is played by a plain client: the
/// name's watch must find the stray key and delete it, so that C gets the lock after B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_applied_after_its_acquire_gave_up_does_not_block_the_lock() {
    let Some(url) = url() else { return };
    let (b, c) = (connect(&url, "").await, connect(&url, "").await);
    let mut r = raw(&url).await;
    let n = name("stray-key");
    let gb = b.mutex(&n).unwrap().lock().await.unwrap();
    let (key, _, lease) = keys(&mut r, &n).await[0].clone();
    let stray = format!("{key}_1");
    r.put(stray.clone(), "", Some(PutOptions::new().with_lease(lease)))
        .await
        .unwrap();
    eventually(SOON, "the stray key deleted", || {
        let mut r = r.clone();
        let n = n.clone();
        let stray = stray.clone();
        async move { !keys(&mut r, &n).await.iter().any(|k| k.0 == stray) }
    })
    .await;
    gb.release().await.unwrap();
    let gc = c
        .mutex(&n)
        .unwrap()
        .lock_for(SOON)
        .await
        .unwrap()
        .expect("C got the lock");
    gc.release().await.unwrap();
    assert!(keys(&mut r, &n).await.is_empty());
}

/// More waiters on one name in one client than the narrow watch keeps idle (32): every one of
/// them gets the lock in turn, and nothing is left behind. A waiter's watch of the key before
/// it must never be the one the cache lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_waiters_in_one_client_all_get_the_lock() {
    let Some(url) = url() else { return };
    let locks = connect(&url, "").await;
    let mut r = raw(&url).await;
    let n = name("forty-waiters");
    let holder = locks.mutex(&n).unwrap().lock().await.unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let (m, done) = (locks.mutex(&n).unwrap(), done.clone());
        tasks.push(tokio::spawn(async move {
            let g = m.lock_for(Duration::from_secs(60)).await.unwrap().unwrap();
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            g.release().await.unwrap();
        }));
    }
    eventually(SOON, "forty waiters queued", || {
        let mut r = r.clone();
        let n = n.clone();
        async move { keys(&mut r, &n).await.len() == 41 }
    })
    .await;
    holder.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .expect("every waiter got the lock");
    assert_eq!(done.load(std::sync::atomic::Ordering::SeqCst), 40);
    assert!(keys(&mut r, &n).await.is_empty());
}

/// An extend whose move lost its answer leaves its new lease to run out, and the move may land
/// later (a slow member). The next extend finds our key on that lease rather than the one it
/// knows: it moves the key from there, and the guard keeps the lock on the lease it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_moves_a_key_a_late_move_put_on_another_lease() {
    let Some(url) = url() else { return };
    let locks = connect(&url, "").await;
    let n = name("late-extend");
    let g = locks
        .mutex(&n)
        .unwrap()
        .acquire(&lockkit_core::AcquireOptions::new().fixed_lease(Duration::from_secs(20)))
        .await
        .unwrap()
        .unwrap();
    let mut raw = raw(&url).await;
    let (key, rev, _) = keys(&mut raw, &n).await.remove(0);
    // The earlier extend's late move: our key onto a lease of ours the guard does not know.
    let other = raw.lease_grant(40, None).await.unwrap().id();
    let ours = Compare::create_revision(
        key.clone(),
        lockkit_etcd::etcd_client::CompareOp::Equal,
        rev,
    );
    let put = TxnOp::put(
        key.clone(),
        "",
        Some(PutOptions::new().with_lease(other).with_ignore_value()),
    );
    assert!(common::txn_if(&mut raw, ours, put).await);
    g.extend(Duration::from_secs(30)).await.unwrap();
    assert_eq!(g.state(), LockState::Held);
    let (_, still, on) = keys(&mut raw, &n).await.remove(0);
    assert_eq!(still, rev, "the same key");
    assert_ne!(on, other, "moved off the lease the late move put it on");
    let ttl = raw.lease_time_to_live(on, None).await.unwrap();
    assert_eq!(ttl.granted_ttl(), 30, "on the lease extend asked for");
    g.release().await.unwrap();
    raw.lease_revoke(other).await.unwrap();
}

/// A fixed-lease waiter parks its key on the handle's session lease while it waits. With that
/// lease revoked on the server before the keepalive noticed, the move failed with "lease not
/// found", a non-retryable error: the acquire failed instead of waiting. It now takes a new
/// session, as a create on a dead lease does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_waiter_outlives_a_revoked_session_lease() {
    let Some(url) = url() else { return };
    let mut r = raw(&url).await;
    let (a, b) = (connect(&url, "").await, connect(&url, "").await);
    let n = name("park-revoked");
    let probe = format!("{n}-probe");
    let g = a.mutex(&probe).unwrap().lock().await.unwrap();
    let session = keys(&mut r, &probe).await[0].2;
    g.release().await.unwrap();
    let held = b.mutex(&n).unwrap().lock().await.unwrap();
    r.lease_revoke(session).await.unwrap();
    let m = a.mutex(&n).unwrap();
    let opts = lockkit_core::AcquireOptions::new()
        .fixed_lease(Duration::from_secs(5))
        .wait(Duration::from_secs(20));
    let waiting = tokio::spawn(async move { m.acquire(&opts).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(25), waiting)
        .await
        .unwrap()
        .unwrap();
    let g = got
        .expect("waits through the revoked session")
        .expect("the lock");
    g.release().await.unwrap();
    assert!(keys(&mut r, &n).await.is_empty());
}
