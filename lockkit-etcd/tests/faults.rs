//! Server outages: these tests stop and restart the shared test etcd (`scripts/services.sh stop
//! etcd` / `start etcd`), one at a time.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{eventually, name, url};
use lockkit_core::{AcquireOptions, ErrorKind, LockConfig, LockState};
use lockkit_testing::failover::free_soon_after;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn services(action: &str) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/services.sh");
    let out = Command::new("bash")
        .arg(script)
        .args([action, "etcd"])
        .output()
        .expect("run services.sh");
    assert!(
        out.status.success(),
        "services.sh {action} etcd: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stops etcd; starts it again when dropped, even if the test panics.
struct Outage;

impl Outage {
    fn begin() -> Outage {
        services("stop");
        Outage
    }
    fn end(self) {}
}

impl Drop for Outage {
    fn drop(&mut self) {
        services("start");
    }
}

async fn connect(url: &str, query: &str) -> lockkit_core::Locks {
    let mut cfg = LockConfig::new(format!("{url}?{query}"));
    cfg.command_timeout = Some(Duration::from_secs(1));
    cfg.connect_timeout = Some(Duration::from_secs(1));
    lockkit_etcd::connect(&cfg).await.unwrap()
}

/// With the server down, an acquire fails quickly with a retryable error, and works again once
/// the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_down_at_acquire_is_a_quick_retryable_error() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let locks = connect(&url, "lease_ttl=5s").await;
    let n = name("down");
    locks
        .mutex(&n)
        .unwrap()
        .lock()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let outage = Outage::begin();
    for lock in [n.clone(), name("down-new")] {
        let started = Instant::now();
        let e = locks
            .mutex(&lock)
            .unwrap()
            .lock_for(Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Connection | ErrorKind::Timeout),
            "{e}"
        );
        assert!(e.is_retryable(), "{e}");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(4), "took {took:?}");
    }
    outage.end();
    let g = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match locks.mutex(&n).unwrap().try_lock().await {
                Ok(g) => return g.expect("free"),
                Err(e) => {
                    assert!(e.is_retryable(), "{e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    })
    .await
    .expect("acquire after the server came back");
    g.release().await.unwrap();
}

/// An outage longer than the session TTL: the guard goes Suspect, then Lost at the local deadline;
/// once the server is back the next acquire works on a new lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_past_the_lease_makes_guards_lost_then_recovers() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let locks = connect(&url, "lease_ttl=2s").await;
    let n = name("outage");
    let m = locks.mutex(&n).unwrap();
    let g = m.lock().await.unwrap();
    let outage = Outage::begin();
    eventually(Duration::from_secs(3), "guard turns Suspect", || async {
        g.state() != LockState::Held
    })
    .await;
    let reason = tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("Lost at the local lease deadline");
    assert_eq!(reason, lockkit_core::LostReason::SessionExpired);
    outage.end();
    let g2 = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match m.lock_for(Duration::from_secs(5)).await {
                Ok(Some(g)) => return g,
                Ok(None) => panic!("the dead session's key still blocks the lock"),
                Err(e) => {
                    assert!(e.is_retryable(), "{e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    })
    .await
    .expect("acquire after the outage");
    assert!(g2.token() > g.token());
    assert_eq!(g2.state(), LockState::Held);
    g2.release().await.unwrap();
}

/// A short outage: the guard may turn Suspect but comes back Held and keeps the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_outage_keeps_the_lock() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let locks = connect(&url, "lease_ttl=10s").await;
    let n = name("blip");
    let g = locks.mutex(&n).unwrap().lock().await.unwrap();
    let outage = Outage::begin();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    outage.end();
    eventually(Duration::from_secs(15), "guard Held again", || async {
        g.state() == LockState::Held
    })
    .await;
    let other = connect(&url, "").await;
    let busy = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match other.mutex(&n).unwrap().try_lock().await {
                Ok(x) => return x.is_none(),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    })
    .await
    .unwrap();
    assert!(busy, "the lock was lost in a short outage");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(g.state(), LockState::Held);
    g.release().await.unwrap();
}

/// A waiter whose wait runs out while the server is frozen (SIGSTOP) for longer than the command
/// timeout, but shorter than the lease, must not leave its key on its live session lease (etcd
/// issue 9715): once the server is back and the holder releases, a third client gets the lock at
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_timing_out_during_a_freeze_leaves_no_key() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let (a, b, c) = (
        connect(&url, "lease=15s").await,
        connect(&url, "lease=15s").await,
        connect(&url, "lease=15s").await,
    );
    let n = name("frozen-waiter");
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
    tokio::time::sleep(Duration::from_millis(300)).await; // its key is in place
    let frozen = lockkit_testing::failover::Outage::pause("etcd");
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
    tokio::time::sleep(Duration::from_secs(6)).await;
    frozen.end();
    held.release().await.unwrap();
    // The reaper tries again at most every 2 s; a key left behind would block until b's handle
    // goes away.
    let g = free_soon_after(&c.mutex(&n).unwrap(), "a timed-out waiter's key").await;
    g.release().await.unwrap();
}

/// Releases, a dropped release and a timed-out permit wait in a freeze leave no key on the live
/// session leases (see `releases_and_permit_waits_in_a_freeze_leave_nothing`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_and_permit_waits_in_a_freeze_leave_no_key() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let (a, b, c) = (
        connect(&url, "lease=15s").await,
        connect(&url, "lease=15s").await,
        connect(&url, "lease=15s").await,
    );
    lockkit_testing::failover::releases_and_permit_waits_in_a_freeze_leave_nothing(
        (&a, &b, &c),
        "etcd",
        &name("frozen"),
    )
    .await;
}

/// An extend future dropped after it was sent to a frozen server may still be applied when the
/// server wakes: the guard keeps no later deadline than the 2 s it asked for, counted from the
/// send, and the key it leaves on the server goes with the guard (issue 25, item 2, on etcd).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_extend_leaves_the_guard_no_later_than_the_server() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let (locks, other) = (
        connect(&url, "lease=15s").await,
        connect(&url, "lease=15s").await,
    );
    let n = name("extend-dropped");
    let g = locks
        .mutex(&n)
        .unwrap()
        .acquire(&AcquireOptions::new().fixed_lease(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    let frozen = lockkit_testing::failover::Outage::pause("etcd");
    let sent = Instant::now();
    let dropped =
        tokio::time::timeout(Duration::from_millis(50), g.extend(Duration::from_secs(2))).await;
    assert!(dropped.is_err(), "the extend finished on a frozen server");
    let left = g.remaining().expect("a fixed lease has a deadline");
    assert!(
        left + sent.elapsed() <= Duration::from_secs(2),
        "after a dropped extend(2s) the guard still has {left:?} of its 60 s lease"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    frozen.end();
    // Whatever the server made of it, the guard is done by the end of the 2 s.
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(sent.elapsed())).await;
    assert_ne!(
        g.state(),
        LockState::Held,
        "held past the lease it asked for"
    );
    drop(g);
    let next = free_soon_after(&other.mutex(&n).unwrap(), "a dropped extend's key").await;
    next.release().await.unwrap();
}

/// An election's observer across a server outage: its watch breaks and restarts, and it goes on
/// to the current leader (which kept its lease) and the later changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_observer_follows_across_an_outage() {
    let Some(url) = url() else { return };
    let _serial = SERIAL.lock().await;
    let leading = connect(&url, "lease_ttl=10s").await;
    let watching = connect(&url, "").await;
    let n = name("observe-outage");
    let e = leading.election(&n).unwrap();
    let a = e.campaign("a").await.unwrap();
    let mut changes = watching.election(&n).unwrap().observe().await.unwrap();
    lockkit_testing::observe_until(&mut changes, Some(b"a")).await;
    let outage = Outage::begin();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    outage.end();
    let missed = lockkit_testing::observe_until(&mut changes, Some(b"a")).await;
    assert!(
        missed > 0,
        "the observer did not say that its watch restarted"
    );
    eventually(Duration::from_secs(15), "the leader Held again", || async {
        a.state() == LockState::Held
    })
    .await;
    assert!(a.resign().await.unwrap());
    lockkit_testing::observe_until(&mut changes, None).await;
    let b = e.campaign("b").await.unwrap();
    lockkit_testing::observe_until(&mut changes, Some(b"b")).await;
    assert!(b.resign().await.unwrap());
    lockkit_testing::observe_until(&mut changes, None).await;
}
