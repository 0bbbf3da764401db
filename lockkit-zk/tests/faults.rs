//! The lost signal against a real server: stop and restart it (Suspect, then Held again), and
//! expire the session (Lost). The tests that stop the shared ZooKeeper run one at a time; those
//! that freeze a server start their own (`PrivateZk`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use lockkit_core::{LockConfig, LockState};
use lockkit_testing::failover::free_soon_after;
use lockkit_testing::proxy::Proxy;
use zookeeper_client as zk;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Restarts ZooKeeper if a test fails while it is stopped.
struct Restart(bool);
impl Drop for Restart {
    fn drop(&mut self) {
        if self.0 {
            services("start");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_loss_makes_guard_suspect_then_held_again() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let url = with_params(&url, &format!("session_timeout=15s&prefix={}", prefix()));
    let locks = backend(&url).await.into_locks();
    let other = backend(&url).await.into_locks();
    let guard = locks.mutex("restart").unwrap().lock().await.unwrap();
    let lost = guard.lost();

    services("stop");
    let mut restart = Restart(true);
    wait_state(&guard, LockState::Suspect, Duration::from_secs(10)).await;
    services("start");
    restart.0 = false;
    wait_state(&guard, LockState::Held, Duration::from_secs(15)).await;

    // Still ours, on the server too.
    assert!(other
        .mutex("restart")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_none());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), lost)
            .await
            .is_err(),
        "lost() fired although the session survived"
    );
    guard.release().await.unwrap();
    assert!(other
        .mutex("restart")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_some());
}

/// Two handles on one prefix: the first reaches the server through a proxy with a 1 s session
/// (cutting the proxy is a partition: the server expires that session while everyone else
/// carries on), the second directly.
async fn partitionable(url: &str) -> (Proxy, lockkit_core::Locks, lockkit_core::Locks) {
    let proxy = Proxy::start(server_addr(url)).await.unwrap();
    let pre = prefix();
    let via_proxy = format!("zk://{}?session_timeout=1s&prefix={pre}", proxy.addr());
    let direct = with_params(url, &format!("prefix={pre}"));
    let cut_off = backend(&via_proxy).await.into_locks();
    let other = backend(&direct).await.into_locks();
    (proxy, cut_off, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expiry_makes_guard_lost_and_handle_recovers() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    // The holder is the one behind the proxy.
    let (proxy, locks, other) = partitionable(&url).await;
    let guard = locks.mutex("expire").unwrap().lock().await.unwrap();
    let token = guard.token();
    let waiter = other.mutex("expire").unwrap();
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        let g = waiter.lock_for(Duration::from_secs(10)).await.unwrap();
        (g, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let cut = Instant::now();
    proxy.cut();
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost() after session expiry");
    assert_eq!(reason, lockkit_core::LostReason::SessionExpired);
    assert_eq!(guard.state(), LockState::Lost);
    let lost_after = cut.elapsed();
    assert!(
        lost_after < Duration::from_secs(3),
        "lost after {lost_after:?}"
    );

    // The server expired the session: the waiter got the lock without the holder's help.
    let (g2, _) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    let g2 = g2.expect("lock free after the holder's session expired");
    assert!(g2.token() > token);
    assert_eq!(
        guard.release().await.unwrap_err().kind(),
        lockkit_core::ErrorKind::LockLost
    );

    // After the partition heals this handle opens a new session and works again.
    proxy.heal();
    g2.release().await.unwrap();
    let start = Instant::now();
    let again = loop {
        match locks.mutex("expire").unwrap().try_lock().await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && start.elapsed() < Duration::from_secs(15) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("handle did not recover: {e}"),
        }
    };
    again.expect("free").release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_disconnection_makes_guard_lost() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let url = with_params(&url, &format!("session_timeout=1s&prefix={}", prefix()));
    let locks = lockkit_zk::connect(&LockConfig::new(url)).await.unwrap();
    let guard = locks.mutex("long-outage").unwrap().lock().await.unwrap();
    services("stop");
    let restart = Restart(true);
    // Suspect once the client sees the connection go (how soon `stop` returns decides whether
    // that is still to be seen before the deadline).
    for _ in 0..1000 {
        if guard.state() != LockState::Held {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_ne!(guard.state(), LockState::Held, "the disconnection is seen");
    // Past the session timeout without contact, the server may have expired us: Lost.
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() after a disconnection longer than the session timeout");
    assert_eq!(reason, lockkit_core::LostReason::SessionExpired);
    drop(restart);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_interrupted_by_connection_loss_leaves_one_node() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let proxy = Proxy::start(server_addr(&url)).await.unwrap();
    let b = backend(&format!(
        "zk://{}?session_timeout=10s&prefix={}",
        proxy.addr(),
        prefix()
    ))
    .await;
    let direct = backend(&url).await;
    let dir = b.mutex_path("interrupted");
    let locks = b.clone().into_locks();
    // Make the directory first, so the creates below are single requests.
    drop(locks.mutex("interrupted").unwrap().lock().await.unwrap());
    let mut acquired = 0;
    for round in 0..40u64 {
        let lock = locks.mutex("interrupted").unwrap();
        let task = tokio::spawn(async move { lock.lock_for(Duration::from_secs(10)).await });
        // Cut the connection at different moments around the create's round trip.
        tokio::time::sleep(Duration::from_micros(round * 50)).await;
        proxy.cut();
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.heal();
        let result = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("acquire finished")
            .unwrap();
        let names = children(&direct, &dir).await;
        match result {
            Ok(Some(g)) => {
                acquired += 1;
                assert_eq!(names.len(), 1, "round {round}: duplicate nodes {names:?}");
                g.release().await.unwrap();
            }
            Ok(None) => panic!("round {round}: lock busy"),
            Err(e) => {
                assert!(e.is_retryable(), "round {round}: {e}");
                let start = Instant::now();
                while !children(&direct, &dir).await.is_empty() {
                    assert!(
                        start.elapsed() < Duration::from_secs(5),
                        "round {round}: node left behind"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        assert!(children(&direct, &dir).await.is_empty(), "round {round}");
    }
    eprintln!(
        "{acquired}/40 acquired through cuts; {} creates found again by their protected prefix",
        b.protected_lookups()
    );
    assert!(
        b.protected_lookups() > 0,
        "no cut hit a create: the protected lookup was not exercised"
    );
}

/// A waiter whose wait runs out while the server is frozen (SIGSTOP) for longer than the command
/// timeout, but shorter than the session timeout, must not leave its node on its live session:
/// once the server is back and the holder releases, a third client gets the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_timing_out_during_a_freeze_leaves_no_node() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let url = with_params(
        &url,
        &format!("lease=15s&command_timeout=1s&prefix={}", prefix()),
    );
    let (a, b, c) = (
        backend(&url).await.into_locks(),
        backend(&url).await.into_locks(),
        backend(&url).await.into_locks(),
    );
    let held = a.mutex("frozen-waiter").unwrap().lock().await.unwrap();
    let waiter = {
        let m = b.mutex("frozen-waiter").unwrap();
        tokio::spawn(async move {
            let started = Instant::now();
            (
                m.lock_for(Duration::from_millis(1200)).await,
                started.elapsed(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await; // its node is in place
    let frozen = lockkit_testing::failover::Outage::pause("zk");
    let (r, took) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter's acquire ends")
        .unwrap();
    assert!(!matches!(r, Ok(Some(_))), "the waiter got a held lock");
    // Its wait budget holds, whatever the server does (the kernel allows 100 ms for cleanup).
    assert!(
        took < Duration::from_millis(2000),
        "a 1.2 s wait took {took:?}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    frozen.end();
    wait_state(&held, LockState::Held, Duration::from_secs(10)).await;
    held.release().await.unwrap();
    let g = free_soon_after(
        &c.mutex("frozen-waiter").unwrap(),
        "a timed-out waiter's node",
    )
    .await;
    g.release().await.unwrap();
}

/// Releases, a dropped release and a timed-out permit wait in a freeze leave no node on the live
/// sessions (see `releases_and_permit_waits_in_a_freeze_leave_nothing`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_and_permit_waits_in_a_freeze_leave_no_node() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let url = with_params(
        &url,
        &format!("lease=15s&command_timeout=1s&prefix={}", prefix()),
    );
    let (a, b, c) = (
        backend(&url).await.into_locks(),
        backend(&url).await.into_locks(),
        backend(&url).await.into_locks(),
    );
    lockkit_testing::failover::releases_and_permit_waits_in_a_freeze_leave_nothing(
        (&a, &b, &c),
        "zk",
        "frozen",
    )
    .await;
}

/// A downgrade sent to a frozen server (SIGSTOP, past the command timeout) gets no reply, and
/// neither does the lookup after it; when the server resumes it commits the multi, which puts a
/// read node on our live session. That node must not keep writers out: the reaper deletes it
/// and the write node is released, so another client's writer gets the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_lost_in_a_freeze_leaves_no_read_node() {
    let Some(_) = url() else { return };
    let zk = PrivateZk::start().await;
    let url = format!(
        "{}?lease=15s&command_timeout=1s&prefix={}",
        zk.url,
        prefix()
    );
    let (a, c) = (
        backend(&url).await.into_locks(),
        backend(&url).await.into_locks(),
    );
    let w = a
        .rwlock("frozen-downgrade")
        .unwrap()
        .write_lock()
        .await
        .unwrap();
    zk.pause();
    let r = tokio::time::timeout(Duration::from_secs(15), w.downgrade())
        .await
        .expect("a downgrade returns within its bound");
    assert!(r.is_err(), "a frozen server confirmed a downgrade");
    tokio::time::sleep(Duration::from_secs(2)).await;
    zk.resume();
    let started = Instant::now();
    let g = c
        .rwlock("frozen-downgrade")
        .unwrap()
        .write(&lockkit_core::AcquireOptions::new().wait(Duration::from_secs(20)))
        .await
        .unwrap()
        .expect("the lock comes free");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the downgrade's read node kept a writer out: {:?}",
        started.elapsed()
    );
    g.release().await.unwrap();
}

/// A downgrade future dropped while the server is frozen (its multi sent, no reply yet) must not
/// leave the read node the multi creates when the server resumes: nothing owns that node, and it
/// would keep writers out for the life of the session. The write lock the downgrade consumed is
/// released too, so a writer on another session gets the lock while this session lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_downgrade_leaves_no_read_node() {
    let Some(_) = url() else { return };
    let zk = PrivateZk::start().await;
    let url = format!(
        "{}?lease=15s&command_timeout=1s&prefix={}",
        zk.url,
        prefix()
    );
    let b = backend(&url).await;
    let dir = b.rwlock_path("dropped-downgrade");
    let (a, c) = (b.clone().into_locks(), backend(&url).await.into_locks());
    let w = a
        .rwlock("dropped-downgrade")
        .unwrap()
        .write_lock()
        .await
        .unwrap();
    zk.pause();
    let r = tokio::time::timeout(Duration::from_millis(200), w.downgrade()).await;
    assert!(r.is_err(), "a frozen server answered a downgrade: {r:?}");
    // Well within the session's timeout: the connection survives the freeze, and the server
    // commits the multi when it resumes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    zk.resume();
    let Some(g) = c
        .rwlock("dropped-downgrade")
        .unwrap()
        .write(&lockkit_core::AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap()
    else {
        let left = children(&b, &dir).await;
        panic!("a node of the dropped downgrade kept a writer out: {left:?}");
    };
    assert_eq!(
        children(&b, &dir).await.len(),
        1,
        "only the new writer's node"
    );
    g.release().await.unwrap();
    drop(a);
}

/// An observer whose session expires (its link cut past the session timeout) while the leader
/// changes misses those changes, and says so with an `Err` item; once the link heals it follows
/// on a new session, ends on the current leader and sees the later changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_observer_follows_across_its_session_loss() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    // The observer is the one behind the proxy.
    let (proxy, watching, leading) = partitionable(&url).await;
    let e = leading.election("observed").unwrap();
    let a = e.campaign("a").await.unwrap();
    let mut changes = watching
        .election("observed")
        .unwrap()
        .observe()
        .await
        .unwrap();
    lockkit_testing::observe_until(&mut changes, Some(b"a")).await;

    proxy.cut();
    // Past the observer's session timeout: the server expires its session meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(a.resign().await.unwrap());
    let b = e.campaign("b").await.unwrap();
    proxy.heal();
    let missed = lockkit_testing::observe_until(&mut changes, Some(b"b")).await;
    assert!(
        missed > 0,
        "the observer did not say that it may have missed changes"
    );
    assert!(b.resign().await.unwrap());
    lockkit_testing::observe_until(&mut changes, None).await;
}

/// A waiter whose look (the listing after its watch fired) is in flight when its connection
/// drops fails that request with a connection loss: the acquire driver bears it (the session,
/// and so the waiter's node, lives on) and looks again once the client reconnected, and the
/// waiter gets the lock it was next for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_cut_off_in_flight_is_borne() {
    let Some(url) = url() else { return };
    assert!(
        lockkit_testing::spans::capture(),
        "lockkit's events are seen"
    );
    let proxy = Proxy::start(server_addr(&url)).await.unwrap();
    let pre = prefix();
    let via_proxy = format!(
        "zk://{}?session_timeout=10s&command_timeout=5s&prefix={pre}",
        proxy.addr()
    );
    let waiter_locks = backend(&via_proxy).await.into_locks();
    let other = backend(&with_params(&url, &format!("prefix={pre}")))
        .await
        .into_locks();
    let held = other.mutex("look").unwrap().lock().await.unwrap();
    let mutex = waiter_locks.mutex("look").unwrap();
    let waiter = tokio::spawn(async move { mutex.lock_for(Duration::from_secs(30)).await });
    lockkit_testing::network::waiters_reach(&other, "look", 1).await;
    let g = lockkit_testing::network::cut_off_a_look(&proxy, "look", held, waiter).await;
    g.release().await.unwrap();
}

/// The children of `dir` that do not start with `but`, once there is one (within 5 s).
async fn newcomer(direct: &lockkit_zk::ZkLocks, dir: &str, but: &str) -> String {
    let start = Instant::now();
    loop {
        let names = children(direct, dir).await;
        if let Some(n) = names.into_iter().find(|n| !n.starts_with(but)) {
            return n;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "no node came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A create the ensemble applies late, after its acquire gave up, lands on the live session of
/// a client that no longer waits. `b`'s create is applied but its reply held up, its acquire is
/// dropped and its node deleted by prefix, and then (as a partitioned follower can let happen)
/// a node with the same prefix appears on `b`'s session. `b`'s heartbeat finds and deletes it,
/// so `c` is not kept out for as long as `b`'s session lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_applied_after_its_acquire_gave_up_keeps_no_one_out() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let params = format!("session_timeout=4s&command_timeout=1s&prefix={}", prefix());
    let proxy = Proxy::start(server_addr(&url)).await.unwrap();
    let b = backend(&format!("zk://{}?{params}", proxy.addr())).await;
    let url = with_params(&url, &params);
    let (a, c) = (backend(&url).await, backend(&url).await);
    let dir = a.mutex_path("late-create");
    let held = a.mutex("late-create").unwrap().lock().await.unwrap();
    let ours = children(&a, &dir).await.remove(0);
    let a_prefix = &ours[..ours.len() - 10];

    proxy.update(|t| t.hold_down = true);
    let m = b.mutex("late-create").unwrap();
    let waiting = tokio::spawn(async move { m.lock_for(Duration::from_secs(10)).await });
    let name = newcomer(&a, &dir, a_prefix).await;
    let b_prefix = name[..name.len() - 10].to_string();
    // Dropped before the create's reply comes: its node is deleted by prefix once the reply
    // path is back.
    waiting.abort();
    let _ = waiting.await;
    proxy.heal();
    let start = Instant::now();
    while children(&a, &dir).await.len() > 1 {
        assert!(start.elapsed() < Duration::from_secs(10), "b's node stays");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    applied_late(&b, &c, "late-create", &b_prefix, held).await;
}

/// The create with protected prefix `prefix` that `b` sent on lock `name` is applied (again)
/// late; then `held` is released and `c`, waiting, must get the lock within 8 s (b's session
/// lives on, with a 4 s timeout: its heartbeat comes every second).
async fn applied_late(
    b: &lockkit_zk::ZkLocks,
    c: &lockkit_zk::ZkLocks,
    name: &str,
    prefix: &str,
    held: lockkit_core::LockGuard,
) {
    let dir = b.mutex_path(name);
    let opts = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    b.zk_client()
        .unwrap()
        .create(&format!("{dir}/{prefix}"), b"lockkit", &opts)
        .await
        .unwrap();
    let m = c.mutex(name).unwrap();
    let waiting = tokio::spawn(async move { m.lock_for(Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(8), waiting)
        .await
        .expect("c is kept out by b's late node")
        .unwrap()
        .unwrap()
        .expect("c gets the lock");
    let left = children(c, &dir).await;
    assert!(
        !left.iter().any(|n| n.starts_with(prefix)),
        "b's late node is still there: {left:?}"
    );
    g.release().await.unwrap();
}

/// A create whose reply was lost and whose node the acquire then found by its protected prefix
/// may still be applied a second time, late, after the guard took the first node. `b`'s
/// heartbeat deletes that duplicate, so after `b` releases, `c` is not kept out behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_duplicate_of_a_held_node_keeps_no_one_out() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let params = format!("session_timeout=4s&command_timeout=3s&prefix={}", prefix());
    let proxy = Proxy::start(server_addr(&url)).await.unwrap();
    let b = backend(&format!("zk://{}?{params}", proxy.addr())).await;
    let c = backend(&with_params(&url, &params)).await;
    let dir = b.mutex_path("late-dup-held");
    // The directory first, so the create below is a single request.
    let g = b.mutex("late-dup-held").unwrap().lock().await.unwrap();
    g.release().await.unwrap();

    proxy.update(|t| t.hold_down = true);
    let m = b.mutex("late-dup-held").unwrap();
    let acquiring = tokio::spawn(async move { m.lock_for(Duration::from_secs(10)).await });
    let name = newcomer(&c, &dir, "\u{0}").await;
    let b_prefix = name[..name.len() - 10].to_string();
    // The reply is lost with the connection (held until the create has failed, so the reset
    // cannot lose the race with the heal); the acquire finds its node by prefix.
    proxy.reset();
    let start = Instant::now();
    while b.protected_lookups() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the create did not fail"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.heal();
    let g = tokio::time::timeout(Duration::from_secs(10), acquiring)
        .await
        .expect("b's acquire ends")
        .unwrap()
        .unwrap()
        .expect("b gets the lock");
    // The same create applied a second time, late, behind b's node.
    applied_late(&b, &c, "late-dup-held", &b_prefix, g).await;
}
