//! Issue 3, point 8: bad input and faults: a key of another type, wrong credentials, a server
//! that is down at acquire, a server restarted while a lock is held or waited for, a server
//! gone for good while a waiter is queued.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lockkit_core::{AcquireOptions, ErrorKind, LockConfig, LockState, Primitive};
use lockkit_redis::LockKeys;
use lockkit_testing::failover::free_soon_after;
use lockkit_testing::unique_name;

#[tokio::test]
async fn key_of_another_type_is_a_typed_error_and_untouched() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let mut admin = admin(&url).await;
    let name = unique_name("wrongtype");
    let k = LockKeys::mutex("lockkit", &name);
    let _: () = redis::cmd("SET")
        .arg(&k.lock)
        .arg("precious")
        .arg("EX")
        .arg(60)
        .query_async(&mut admin)
        .await
        .unwrap();
    let lock = locks.mutex(&name).unwrap();
    for r in [
        lock.try_lock().await.map(drop),
        lock.lock_for(Duration::from_millis(50)).await.map(drop),
    ] {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WrongType, "{e}");
        assert!(!e.is_retryable());
    }
    assert_eq!(
        lock.is_locked().await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    assert_eq!(
        lock.force_unlock().await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    let v: String = redis::cmd("GET")
        .arg(&k.lock)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(v, "precious", "lockkit overwrote a foreign key");
    let _: () = redis::cmd("DEL")
        .arg(&k.lock)
        .query_async(&mut admin)
        .await
        .unwrap();

    // A foreign fencing counter is not overwritten either: a hash (SET ... GET fails on it), or
    // a string that is not a number (SET ... GET replaces it, and the script puts it back).
    let foreign = [
        redis::cmd("HSET").arg(&k.fence).arg("f").arg("v").clone(),
        redis::cmd("SET").arg(&k.fence).arg("precious").clone(),
    ];
    for cmd in &foreign {
        foreign_value_survives(&mut admin, &k.fence, cmd, async {
            let e = lock.try_lock().await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::WrongType, "{e}");
            assert!(!lock.is_locked().await.unwrap(), "left a half-made lock");
        })
        .await;
    }
}

#[tokio::test]
async fn wrong_password_and_unknown_user_are_auth_errors() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let user = format!("lktest-{}", std::process::id());
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(">right-pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .query_async(&mut admin)
        .await
        .unwrap();
    let base = url.trim_start_matches("redis://").to_string();
    let with = move |u: &str, p: &str| {
        let mut cfg = LockConfig::new(format!("redis://{base}"));
        cfg.username = Some(u.to_string());
        cfg.password = Some(lockkit_core::Secret::new(p));
        cfg
    };
    let u2 = user.clone();
    let result = async move {
        let user = u2;
        for cfg in [with(&user, "wrong-pw"), with("lktest-no-such-user", "x")] {
            let started = Instant::now();
            let e = lockkit_redis::connect(&cfg).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
            assert!(!e.is_retryable());
            assert!(!format!("{e:?}").contains("wrong-pw"));
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "{:?}",
                started.elapsed()
            );
        }
        let locks = lockkit_redis::connect(&with(&user, "right-pw"))
            .await
            .unwrap();
        let g = locks
            .mutex(&unique_name("acl"))
            .unwrap()
            .lock()
            .await
            .unwrap();
        g.release().await.unwrap();
    };
    let outcome = tokio::spawn(result).await;
    let _: i64 = redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&user)
        .query_async(&mut admin)
        .await
        .unwrap();
    outcome.unwrap();
}

#[tokio::test]
async fn server_down_at_connect_is_a_fast_retryable_connection_error() {
    let port = free_port(); // nothing listens here
    let started = Instant::now();
    let e = lockkit_redis::connect(&LockConfig::new(format!("redis://127.0.0.1:{port}")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    assert!(e.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_down_at_acquire_is_a_fast_retryable_connection_error() {
    let mut server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let lock = locks.mutex("down").unwrap();
    lock.lock().await.unwrap().release().await.unwrap();
    server.stop();
    for opts in [AcquireOptions::new().no_wait(), AcquireOptions::new()] {
        let started = Instant::now();
        let e = lock.acquire(&opts).await.unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Connection),
            "{e} ({:?})",
            e.kind()
        );
        assert!(e.is_retryable());
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }
    // And the client recovers when the server is back.
    server.start_again();
    let started = Instant::now();
    loop {
        match lock.try_lock().await {
            Ok(g) => {
                g.expect("free").release().await.unwrap();
                break;
            }
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "no recovery: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_while_held_makes_suspect_then_lost() {
    let mut server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let lease = Duration::from_secs(2);
    let g = locks
        .mutex("restart")
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(lease))
        .await
        .unwrap()
        .unwrap();
    let mut rx = Vec::new();
    server.stop();
    let started = Instant::now();
    eventually(
        Duration::from_secs(3),
        "Suspect after the server went away",
        || g.state() == LockState::Suspect,
    )
    .await;
    rx.push(g.state());
    // The server comes back empty (no persistence): the next renewal finds the lock gone.
    server.start_again();
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("lost()");
    assert_eq!(g.state(), LockState::Lost);
    assert!(
        started.elapsed() < lease + Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(rx, vec![LockState::Suspect]);
    assert_eq!(g.release().await.unwrap_err().kind(), ErrorKind::LockLost);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_down_past_the_deadline_makes_lost_without_a_reply() {
    let mut server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let lease = Duration::from_secs(1);
    let g = locks
        .mutex("down-long")
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(lease))
        .await
        .unwrap()
        .unwrap();
    let started = Instant::now();
    server.stop();
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("lost() at the deadline");
    assert!(
        started.elapsed() <= lease + Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
}

/// One client of `server` holds `name` with a watchdog lease of `lease`; another queues for it
/// (waiting up to `wait`) and is given 300 ms to queue. Returns both clients (keep them: a
/// client's tasks stop when it is dropped), the holder's guard and the waiter. Both clients
/// heartbeat every 200 ms and give a command 300 ms.
async fn held_and_queued(
    server: &PrivateRedis,
    name: &str,
    lease: Duration,
    wait: Duration,
) -> (
    [lockkit_core::Locks; 2],
    lockkit_core::LockGuard,
    tokio::task::JoinHandle<lockkit_core::Result<Option<lockkit_core::LockGuard>>>,
) {
    let opts = [("waiter_heartbeat", "200ms"), ("command_timeout", "300ms")];
    let (a, b) = (
        connect(&server.url(), &opts).await,
        connect(&server.url(), &opts).await,
    );
    let lease = AcquireOptions::new().watchdog_lease(lease);
    let g = a
        .mutex(name)
        .unwrap()
        .acquire(&lease)
        .await
        .unwrap()
        .unwrap();
    let lock = b.mutex(name).unwrap();
    let waiting = tokio::spawn(async move { lock.acquire(&lease.wait(wait)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ([a, b], g, waiting)
}

/// A waiter queued for a lock keeps waiting through a short outage (its attempts fail while the
/// server restarts), then gets the lock: the restarted server is empty, so the holder is told
/// its lock is gone and the waiter takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiter_rides_out_a_server_restart() {
    let mut server = PrivateRedis::start(&[]);
    let (_clients, g, waiting) = held_and_queued(
        &server,
        "ride-out",
        Duration::from_secs(3),
        Duration::from_secs(20),
    )
    .await;
    server.stop();
    // Several of the waiter's heartbeats fail meanwhile.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    server.start_again();
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter finished")
        .unwrap()
        .expect("the outage did not end the wait")
        .expect("the waiter got the lock");
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("the old holder was told");
    got.release().await.unwrap();
}

/// A waiter whose server stays away gets the connection error once the holder's lease (as it
/// last saw it) has run out, instead of waiting its whole budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiter_of_a_server_gone_for_good_gets_the_error() {
    let mut server = PrivateRedis::start(&[]);
    let (_clients, _g, waiting) = held_and_queued(
        &server,
        "gone",
        Duration::from_secs(2),
        Duration::from_secs(60),
    )
    .await;
    let stopped = Instant::now();
    server.stop();
    let e = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter gave up")
        .unwrap()
        .expect_err("no lock without a server");
    assert!(e.is_retryable(), "{e}");
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped.elapsed()
    );
}

/// After an outage longer than the client library's own reconnect attempts, the pub/sub
/// connection comes back and resubscribes by itself, although no command is sent on it: the
/// lock and the waiter's queue entry survive the restart (AOF), so the waiter stays queued, its
/// subscription standing all along. The server shows the subscription again, and then the
/// release hands the lock to that waiter at once, not at its next heartbeat (3 s). (The hand-off
/// is timed only once the subscription is back: the reconnect pings up to a second apart, and
/// a hand-off published before it returns waits for it. A waiter that stopped waiting would
/// drop the subscription after its linger, so the waiter must still be queued when the server
/// is asked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_connection_comes_back_after_a_long_outage() {
    let mut server = PrivateRedis::start(&["--appendonly", "yes"]);
    // Heartbeats far apart: a hand-off that only a heartbeat picks up would take 3 s.
    let opts = [
        ("waiter_heartbeat", "3s"),
        ("command_timeout", "300ms"),
        ("wait_replicas", "0"),
    ];
    let (b, y) = (
        connect(&server.url(), &opts).await,
        connect(&server.url(), &opts).await,
    );
    let name = "comes-back";
    let g = y.mutex(name).unwrap().lock().await.unwrap(); // 30 s lease
    let waiter = {
        let lock = b.mutex(name).unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await; // queued and subscribed
                                                          // Away for longer than the client's own reconnect attempts.
    server.stop();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.start_again();
    // The holder's handle finds the server again (its lock came back from the AOF).
    let probe = y.mutex(name).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match probe.is_locked().await {
            Ok(true) => break,
            Ok(false) => panic!("the lock did not survive the restart"),
            Err(_) => {
                assert!(Instant::now() < until, "the holder did not reconnect");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    until_subscribed(
        &mut admin(&server.url()).await,
        &format!("*{name}*"),
        Duration::from_secs(10),
        "the pub/sub connection did not come back with its subscription",
    )
    .await;
    assert!(!waiter.is_finished(), "the waiter stopped waiting");
    let released = Instant::now();
    g.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter got the lock")
        .unwrap()
        .expect("the outage did not end its wait");
    assert!(
        released.elapsed() < Duration::from_millis(1000),
        "the hand-off took {:?}: it came at a heartbeat, not by pub/sub",
        released.elapsed()
    );
    got.release().await.unwrap();
}

/// A holder hears of a force-unlock on its client's holder channel, which comes back with the
/// pub/sub connection after an outage longer than the client library's own reconnect attempts:
/// after the restart (the lock survives it, AOF) a force-unlock turns the guard Lost within
/// 3 s, not at its next renewal (40 s into a 120 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_after_an_outage_is_heard_at_once() {
    let mut server = PrivateRedis::start(&["--appendonly", "yes"]);
    let opts = [("command_timeout", "300ms"), ("wait_replicas", "0")];
    let y = connect(&server.url(), &opts).await;
    let name = "force-heard";
    // A long lease: its first renewal (40 s away) cannot be what tells the holder.
    let g = y
        .mutex(name)
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(Duration::from_secs(120)))
        .await
        .unwrap()
        .unwrap();
    server.stop();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.start_again();
    until_subscribed(
        &mut admin(&server.url()).await,
        "lockkit:holder:*",
        Duration::from_secs(10),
        "the holder channel did not come back",
    )
    .await;
    // The admin connects afresh (an old connection's first command after the restart fails).
    let admin_locks = connect(&server.url(), &opts).await;
    let forced = Instant::now();
    assert!(admin_locks
        .mutex(name)
        .unwrap()
        .force_unlock()
        .await
        .unwrap());
    tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("the holder did not hear of the force-unlock");
    assert!(
        forced.elapsed() < Duration::from_secs(3),
        "heard after {:?}",
        forced.elapsed()
    );
    assert_eq!(g.state(), LockState::Lost);
}

/// A queued waiter whose wait runs out while the server is down leaves the queue once the
/// server is back (the leave goes to the reaper instead of being tried once): the release then
/// hands the lock to the next client at once, not to the dead waiter's entry, which with a 5 s
/// heartbeat would hold everyone off for 15 s. (A frozen server would not show it: it runs the
/// commands buffered on its sockets when it resumes, the timed-out leave among them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_timing_out_during_an_outage_leaves_the_queue_afterwards() {
    let mut server = PrivateRedis::start(&["--appendonly", "yes"]);
    let opts = [("command_timeout", "1s"), ("waiter_heartbeat", "5s")];
    let (a, b, c) = (
        connect(&server.url(), &opts).await,
        connect(&server.url(), &opts).await,
        connect(&server.url(), &opts).await,
    );
    let n = lockkit_testing::unique_name("waiter-outage");
    let held = a.mutex(&n).unwrap().lock().await.unwrap();
    let waiter = {
        let m = b.mutex(&n).unwrap();
        tokio::spawn(async move {
            let started = Instant::now();
            (
                m.lock_for(Duration::from_millis(1200)).await,
                started.elapsed(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await; // queued
    server.stop();
    let (r, took) = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the waiter's acquire ends")
        .unwrap();
    assert!(!matches!(r, Ok(Some(_))), "the waiter got a held lock");
    // Its wait budget holds, whatever the server does (the kernel allows 100 ms for cleanup).
    assert!(
        took < Duration::from_millis(2000),
        "a 1.2 s wait took {took:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.start_again();
    // The holder's watchdog and the reaper find the server again; the third client's idle
    // connection learns of the restart at its first command.
    let probe = c.mutex(&n).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while probe.is_locked().await.is_err() {
        assert!(Instant::now() < until, "the third client did not reconnect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    held.release().await.unwrap();
    // The reaper tries again at most every 2 s; a dead entry would keep the lock 15 s.
    let g = free_soon_after(&c.mutex(&n).unwrap(), "the dead waiter's queue entry").await;
    g.release().await.unwrap();
}

/// An extend to a shorter lease whose answer is lost in a freeze (SIGSTOP past the command
/// timeout) may or may not be applied when the server resumes: if it is, the key ends 2 s after
/// the extend was sent. So the guard keeps the earlier of the two deadlines until an extend
/// settles it: it reads Lost by then, and never Held while another client holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_lost_in_a_freeze_keeps_the_earlier_deadline() {
    let server = PrivateRedis::start(&[]);
    let opts = [("command_timeout", "500ms"), ("wait_replicas", "0")];
    let (a, b) = (
        connect(&server.url(), &opts).await,
        connect(&server.url(), &opts).await,
    );
    let n = unique_name("extend-freeze");
    let g = a
        .mutex(&n)
        .unwrap()
        .acquire(&AcquireOptions::new().fixed_lease(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    server.pause();
    let sent = Instant::now();
    let extended = g.extend(Duration::from_secs(2)).await;
    assert!(extended.is_err(), "an extend answered by a frozen server");
    server.resume();
    let other = b.mutex(&n).unwrap();
    let mut taken = None;
    while sent.elapsed() < Duration::from_secs(4) {
        if let Some(t) = other.try_lock().await.unwrap() {
            taken = Some(t);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        g.state(),
        LockState::Lost,
        "Held past the deadline of an extend that may have been applied"
    );
    if let Some(t) = taken {
        assert!(t.token() > g.token());
        t.release().await.unwrap();
    }
}

/// `close()` finishes the cleanups still pending: a release that failed while the server was
/// down for 4 s sits in the reaper, between retries 1 to 2 s apart, when the server comes back.
/// The close that follows at once waits for it, so the lock is free the moment close returns
/// (else it would stay held until the reaper's next try, or for its 15 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_finishes_a_release_that_failed_in_an_outage() {
    let mut server = PrivateRedis::start(&["--appendonly", "yes"]);
    let opts = [
        ("command_timeout", "300ms"),
        ("lease", "15s"),
        ("wait_replicas", "0"),
    ];
    let (a, c) = (
        connect(&server.url(), &opts).await,
        connect(&server.url(), &opts).await,
    );
    let n = unique_name("close-drains");
    let g = a.mutex(&n).unwrap().lock().await.unwrap();
    server.stop();
    let r = tokio::time::timeout(Duration::from_secs(5), g.release())
        .await
        .expect("a release returns within its bound");
    assert!(r.is_err(), "a stopped server confirmed a release");
    // Long enough for the reaper's pauses to grow to their 2 s cap.
    tokio::time::sleep(Duration::from_secs(4)).await;
    server.start_again();
    tokio::time::timeout(Duration::from_secs(20), a.close())
        .await
        .expect("close returns within its drain bound")
        .expect("close finished the pending release");
    let probe = c.mutex(&n).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let free = loop {
        // The probe's idle connection learns of the restart at its first command.
        match probe.try_lock().await {
            Ok(got) => break got,
            Err(e) if e.is_retryable() && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("probe: {e}"),
        }
    };
    free.expect("the lock is free once close returned")
        .release()
        .await
        .unwrap();
}

/// Issue 25, item 12: a reentry that fails (the server is frozen past the command timeout)
/// leaves the hold count the server keeps (what `inspect` and `top` read) at the guard's, though
/// the frozen server runs it when it wakes; so does one whose future is dropped mid-call. The
/// next reentry then counts one hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_dropped_reentry_leaves_the_server_hold_count() {
    let server = PrivateRedis::start(&[]);
    let url = server.url();
    let locks = connect(&url, &[("command_timeout", "300ms")]).await;
    let name = unique_name("reenter-freeze");
    let key = LockKeys::mutex("lockkit", &name).lock;
    // The reentry script is loaded first: a frozen server that wakes to an unknown script runs
    // nothing.
    let warm = locks.mutex("warm").unwrap().lock().await.unwrap();
    warm.reenter().await.unwrap().release().await.unwrap();
    warm.release().await.unwrap();
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    let count = |want| server_hold_count(&locks, &url, &name, Primitive::Mutex, &key, want);

    server.pause();
    let e = g.reenter().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    server.resume();
    assert_eq!(g.hold_count(), 1);
    assert_eq!(count(1).await, 1, "a failed reentry counted on the server");

    server.pause();
    let dropped = tokio::time::timeout(Duration::from_millis(100), g.reenter()).await;
    assert!(dropped.is_err(), "a frozen server answered");
    server.resume();
    assert_eq!(count(1).await, 1, "a dropped reentry counted on the server");

    let again = g.reenter().await.unwrap();
    assert_eq!(g.hold_count(), 2);
    assert_eq!(count(2).await, 2);
    again.release().await.unwrap();
    g.release().await.unwrap();
}

/// A queued waiter whose last answer showed the holder's lease about to end paces its retries
/// through an outage on the backoff (50 ms doubling to 400 ms), not at that stale lease. The
/// holder's key is kept at 40 ms to live, then a script that never ends makes the server answer
/// every other command with `BUSY` at once for 2 s: the waiter tries about 8 times meanwhile (it
/// tried every 40 ms, about 50 times, at the stale lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_waiter_paces_retries_through_an_outage_on_the_backoff() {
    assert!(lockkit_testing::spans::capture());
    let server = PrivateRedis::start(&["--lua-time-limit", "10"]);
    let name = unique_name("paced");
    let opts = [("waiter_heartbeat", "1s"), ("command_timeout", "300ms")];
    let (a, b) = (
        connect(&server.url(), &opts).await,
        connect(&server.url(), &opts).await,
    );
    let g = a.mutex(&name).unwrap().lock().await.unwrap();
    let lock = b.mutex(&name).unwrap();
    let waiting = tokio::spawn(async move {
        lock.acquire(&AcquireOptions::new().wait(Duration::from_secs(30)))
            .await
    });
    // The holder's key lives 40 ms at most from now on, so every answer the waiter gets shows
    // a lease about to end.
    let key = LockKeys::mutex("lockkit", &name).lock;
    let mut raw = admin(&server.url()).await;
    let until = tokio::time::Instant::now() + Duration::from_millis(600);
    while tokio::time::Instant::now() < until {
        let set: i64 = redis::cmd("PEXPIRE")
            .arg(&key)
            .arg(40)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(set, 1, "the holder's key is there");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Busy from now on (past the 10 ms limit, every other command is answered `BUSY`).
    let mut busy = admin(&server.url()).await;
    let spinning = tokio::spawn(async move {
        redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query_async::<()>(&mut busy)
            .await
    });
    let failures = || {
        lockkit_testing::spans::events_of_lock_mentioning(&name, "waiting through a failed request")
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = failures();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = failures() - before;
    let mut killer = admin(&server.url()).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("KILL")
        .query_async(&mut killer)
        .await
        .unwrap();
    assert!(spinning.await.unwrap().is_err(), "the script was killed");
    assert!(
        (2..=15).contains(&during),
        "{during} failed attempts in 2 s of BUSY answers: the waiter spun at the stale lease"
    );
    assert!(!waiting.is_finished(), "the waiter bears a 2 s outage");
    waiting.abort();
    drop(g);
}
