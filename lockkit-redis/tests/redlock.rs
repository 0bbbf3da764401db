//! Redlock under faults, against the five independent masters of `scripts/services.sh up
//! --redlock` (`LOCKKIT_TEST_REDLOCK_URL`, members `redlock1` .. `redlock5`): exclusion with
//! every master up, one master down, a majority down, masters restarted empty under a holder,
//! a frozen master, a foreign key, and exclusion with `rslock` on the same keys. The tests stop
//! and restart masters, so they run one at a time (`serial`).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use lockkit_core::{ErrorKind, LockState, Locks, LostReason};
use lockkit_testing::failover::{serial, Outage};
use redis::AsyncCommands;

fn url() -> Option<String> {
    lockkit_testing::server_url("redlock")
}

async fn connect(url: &str, options: &[(&str, &str)]) -> Locks {
    lockkit_redis::connect_redlock(&common::config(url, options))
        .await
        .unwrap()
}

/// `redis://host:port` of each master, in member order (`redlock1` first).
fn masters(url: &str) -> Vec<String> {
    let hosts = url.trim_start_matches("redlock://");
    let hosts = hosts.split(['/', '?']).next().unwrap();
    hosts.split(',').map(|h| format!("redis://{h}")).collect()
}

fn name(what: &str) -> String {
    format!("rl-{what}-{}", uuid::Uuid::new_v4().simple())
}

fn lock_key(name: &str) -> String {
    format!("lockkit:redlock:{{{name}}}")
}

/// The lockkit waiters' keys of lock `name` (their places and deadlines).
fn waiter_keys(name: &str) -> [String; 2] {
    [
        format!("lockkit:redlock-waiters:{{{name}}}"),
        format!("lockkit:redlock-deadlines:{{{name}}}"),
    ]
}

/// Polls until no master has the lock or a waiter's place of `name`, or panics after `within`.
async fn nothing_left(url: &str, name: &str, within: Duration) {
    gone_everywhere(url, &lock_key(name), within).await;
    for key in waiter_keys(name) {
        gone_everywhere(url, &key, within).await;
    }
}

/// Which masters have `key` now.
async fn holding(url: &str, key: &str) -> Vec<bool> {
    let mut out = Vec::new();
    for m in masters(url) {
        let mut c = common::admin(&m).await;
        out.push(c.exists::<_, bool>(key).await.unwrap());
    }
    out
}

/// Polls until no master has `key` (the reaper's releases land), or panics after `within`.
async fn gone_everywhere(url: &str, key: &str, within: Duration) {
    let start = Instant::now();
    loop {
        let left = holding(url, key).await;
        if !left.contains(&true) {
            return;
        }
        assert!(
            start.elapsed() < within,
            "{key} is still on masters {left:?} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion_and_increasing_tokens_with_every_master_up() {
    let Some(url) = url() else { return };
    let _serial = serial().await;
    let n = name("exclusion");
    let held = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(StdMutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let locks = connect(&url, &[]).await;
        let caps = locks.capabilities();
        assert!(!caps.fencing, "Redlock's token is no fencing guarantee");
        assert!(caps.rwlock.is_none() && caps.semaphore.is_none() && !caps.mutex.fair);
        for _ in 0..2 {
            let (m, held, tokens) = (locks.mutex(&n).unwrap(), held.clone(), tokens.clone());
            tasks.spawn(async move {
                for _ in 0..8 {
                    let g = m.lock_for(Duration::from_secs(30)).await.unwrap().unwrap();
                    assert!(!held.swap(true, Ordering::SeqCst), "two holders at once");
                    tokens.lock().unwrap().push(g.token().0);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    held.store(false, Ordering::SeqCst);
                    g.release().await.unwrap();
                }
            });
        }
    }
    while let Some(t) = tasks.join_next().await {
        t.unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 48);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens out of grant order: {tokens:?}"
    );
    nothing_left(&url, &n, Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_master_down_still_locks() {
    let Some(url) = url() else { return };
    let _serial = serial().await;
    let n = name("one-down");
    let down = Outage::stop("redlock5");
    // A handle connects with a quorum up, and the lock excludes.
    let (a, b) = (connect(&url, &[]).await, connect(&url, &[]).await);
    let g = a.mutex(&n).unwrap().lock_for(Duration::from_secs(5)).await;
    let g = g.unwrap().expect("a quorum is up");
    assert!(b.mutex(&n).unwrap().try_lock().await.unwrap().is_none());
    assert!(b.mutex(&n).unwrap().is_locked().await.unwrap());
    g.release().await.unwrap();
    let g = b
        .mutex(&n)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("free");
    g.release().await.unwrap();
    down.end();
    // The master that was down never had it; the others let it go.
    nothing_left(&url, &n, Duration::from_secs(5)).await;
    // Back up, it takes part again (once the client has dialled it): a lock is on all five.
    let start = Instant::now();
    loop {
        let g = a.mutex(&n).unwrap().lock_for(Duration::from_secs(5)).await;
        let g = g.unwrap().unwrap();
        let on = holding(&url, &lock_key(&n)).await;
        g.release().await.unwrap();
        if on == vec![true; 5] {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "only on {on:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_down_is_a_typed_error_and_leaves_nothing() {
    let Some(url) = url() else { return };
    let _serial = serial().await;
    let n = name("majority-down");
    let a = connect(&url, &[]).await;
    let outages: Vec<Outage> = ["redlock1", "redlock2", "redlock3"]
        .iter()
        .map(|m| Outage::stop(m))
        .collect();
    let m = a.mutex(&n).unwrap();
    for attempt in [m.lock_for(Duration::from_secs(2)).await, m.try_lock().await] {
        let e = attempt.expect_err("no quorum, no guard");
        assert!(
            matches!(e.kind(), ErrorKind::Connection | ErrorKind::Timeout),
            "{e}"
        );
        assert!(e.is_retryable(), "{e}");
        assert!(e.to_string().contains("a quorum is 3"), "{e}");
    }
    let e = lockkit_redis::connect_redlock(&common::config(&url, &[]))
        .await
        .expect_err("connect needs a quorum");
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    // The two masters still up took the lock for a moment; it was released there.
    for o in outages {
        o.end();
    }
    nothing_left(&url, &n, Duration::from_secs(5)).await;
    let g = m.try_lock().await.unwrap().expect("free again");
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_restarted_empty_keep_the_guard_only_while_a_quorum_holds_it() {
    let Some(url) = url() else { return };
    let _serial = serial().await;
    let n = name("restarted");
    // Renewed every second.
    let a = connect(&url, &[("lease", "3s")]).await;
    let b = connect(&url, &[("lease", "3s")]).await;
    let g = a.mutex(&n).unwrap().lock().await.unwrap();
    let mut lost = g.lost();
    for (i, member) in ["redlock1", "redlock2"].iter().enumerate() {
        Outage::stop(member).end();
        // Two renewals later: still renewed on 4, then 3 of 5 masters.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(g.state(), LockState::Held, "after {} restarts", i + 1);
        assert!(b.mutex(&n).unwrap().try_lock().await.unwrap().is_none());
    }
    // A third master restarted empty: two hold it, and the next renewal finds no quorum can.
    Outage::stop("redlock3").end();
    let reason = tokio::time::timeout(Duration::from_secs(3), &mut lost)
        .await
        .expect("lost() within a renewal");
    assert_eq!(
        reason,
        LostReason::Deleted,
        "no quorum can hold it any more"
    );
    // Meanwhile the three emptied masters are a quorum for someone else: this is what a master
    // restarted without its data does to Redlock (antirez: stay down longer than the lease).
    let other = b.mutex(&n).unwrap().lock_for(Duration::from_secs(5)).await;
    let other = other.unwrap().expect("three empty masters are a quorum");
    // Its token is larger only because the time floor moved on since `g`'s: the counters that
    // issued `g`'s are gone.
    assert!(other.token().0 > g.token().0);
    other.release().await.unwrap();
    assert_eq!(g.release().await.unwrap_err().kind(), ErrorKind::LockLost);
    // Whatever `g` still had on the two masters that kept it expires with its lease.
    nothing_left(&url, &n, Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_costs_a_node_timeout_and_is_cleaned_after() {
    let Some(url) = url() else { return };
    let _serial = serial().await;
    let n = name("frozen");
    let a = connect(&url, &[("node_timeout", "100ms")]).await;
    let frozen = Outage::pause("redlock4");
    let start = Instant::now();
    let g = a.mutex(&n).unwrap().try_lock().await.unwrap();
    let g = g.expect("four masters answer");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "an acquire waited {:?} for a frozen master",
        start.elapsed()
    );
    g.release().await.unwrap();
    frozen.end();
    // The frozen master ran the acquire once it woke; the release that timed out on it is
    // retried until it lands.
    gone_everywhere(&url, &lock_key(&n), Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_key_is_a_wrong_type_error_and_is_kept() {
    let Some(url) = url() else { return };
    let _serial = serial().await;
    let n = name("foreign");
    let key = lock_key(&n);
    let mut admin = common::admin(&masters(&url)[0]).await;
    let _: () = admin.hset(&key, "f", "v").await.unwrap();
    let a = connect(&url, &[]).await;
    let m = a.mutex(&n).unwrap();
    let e = m.try_lock().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WrongType, "{e}");
    assert_eq!(
        m.is_locked().await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    assert_eq!(
        m.force_unlock().await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    let v: Option<String> = admin.hget(&key, "f").await.unwrap();
    assert_eq!(v.as_deref(), Some("v"), "the foreign hash was touched");
    assert_eq!(holding(&url, &key).await[1..], [false; 4]);
    let _: () = admin.del(&key).await.unwrap();
    // A foreign value where the waiters live costs only the courtesy: acquires, waiting ones
    // too, work, and the value is kept.
    let [waiters, _] = waiter_keys(&n);
    let _: () = admin.set(&waiters, "not a queue").await.unwrap();
    let g = m.lock_for(Duration::from_secs(5)).await.unwrap().unwrap();
    let other = a.mutex(&n).unwrap();
    assert!(other
        .lock_for(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    g.release().await.unwrap();
    let v: String = admin.get(&waiters).await.unwrap();
    assert_eq!(v, "not a queue");
    let _: () = admin.del(&waiters).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rslock_and_lockkit_exclude_each_other() {
    let Some(url) = url() else { return };
    let _serial = serial().await;
    let n = name("rslock");
    let key = lock_key(&n);
    let a = connect(&url, &[]).await;
    let m = a.mutex(&n).unwrap();
    let rl = rslock::LockManager::new(masters(&url));
    let ttl = Duration::from_secs(10);
    let g = m.try_lock().await.unwrap().unwrap();
    assert!(
        rl.lock(key.as_bytes(), ttl).await.is_err(),
        "rslock got a held lock"
    );
    g.release().await.unwrap();
    let theirs = rl.lock(key.as_bytes(), ttl).await.expect("rslock takes it");
    assert!(
        m.try_lock().await.unwrap().is_none(),
        "lockkit got rslock's lock"
    );
    assert!(m.is_locked().await.unwrap());
    let left = m.remaining_lease().await.unwrap().expect("held by rslock");
    assert!(left <= ttl, "{left:?}");
    rl.unlock(&theirs).await;
    let g = m
        .try_lock()
        .await
        .unwrap()
        .expect("free after rslock's unlock");
    g.release().await.unwrap();
}

/// A round's release that a frozen master did not answer is retried in the background; once
/// the master wakes, it must not delete the key of a later round that holds the lock (each round
/// has an owner of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_never_deletes_a_later_rounds_key() {
    let Some(url) = url() else { return };
    let _serial = serial().await;
    let n = name("late-release");
    let key = lock_key(&n);
    let masters = masters(&url);
    // Someone else holds the lock on redlock1..3 only.
    let mut admins = Vec::new();
    for m in &masters[..3] {
        let mut c = common::admin(m).await;
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("someone-else")
            .arg("PX")
            .arg(60_000)
            .query_async(&mut c)
            .await
            .unwrap();
        admins.push(c);
    }
    let b = connect(&url, &[("node_timeout", "100ms")]).await;
    let frozen = Outage::pause("redlock4");
    // b's rounds find the lock busy on three masters, take redlock5 and hear nothing from
    // redlock4; each round's release on redlock4 times out and goes to the reaper.
    let waiter = {
        let m = b.mutex(&n).unwrap();
        tokio::spawn(async move { m.lock_for(Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    for c in &mut admins {
        let _: () = c.del(&key).await.unwrap();
    }
    let g = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("b holds on four masters");
    // redlock4 wakes and runs, in the order sent, every round's take and release, the holding
    // round's take last; the reaper's retries of the earlier rounds' releases come after.
    frozen.end();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let on = holding(&url, &key).await;
    assert_eq!(on, vec![true; 5], "b's key is missing on a master");
    assert_eq!(g.state(), LockState::Held);
    g.release().await.unwrap();
    gone_everywhere(&url, &key, Duration::from_secs(5)).await;
}

/// Acquires dropped at every point of a round (timers of 0 to 30 ms against masters answering
/// in about a millisecond, and a frozen master) leave no key on any master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_no_key_on_any_master() {
    let Some(url) = url() else { return };
    let _serial = serial().await;
    let a = connect(&url, &[("node_timeout", "100ms")]).await;
    let frozen = Outage::pause("redlock2");
    let mut names = Vec::new();
    for i in 0..30u64 {
        let n = name(&format!("dropped-{i}"));
        let m = a.mutex(&n).unwrap();
        let _ = tokio::time::timeout(Duration::from_millis(i), m.lock()).await;
        names.push(n);
    }
    frozen.end();
    for n in &names {
        nothing_left(&url, n, Duration::from_secs(10)).await;
    }
}

/// Waiters queue in the order they came and are told their turn: a holder that releases and
/// acquires again gets in line behind them; one that gives up leaves no place behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_order_and_leave_no_place() {
    let Some(url) = url() else { return };
    let _serial = serial().await;
    let n = name("order");
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(connect(&url, &[]).await);
    }
    let first = handles[0].mutex(&n).unwrap().lock().await.unwrap();
    let order = Arc::new(StdMutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (i, h) in handles.iter().enumerate().skip(1) {
        let (m, order) = (h.mutex(&n).unwrap(), order.clone());
        waiters.push(tokio::spawn(async move {
            let g = m.lock_for(Duration::from_secs(20)).await.unwrap().unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            g.release().await.unwrap();
        }));
        // Each waits before the next one comes.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first.release().await.unwrap();
    // The releaser comes back at once, and waits its turn behind all three.
    let again = handles[0]
        .mutex(&n)
        .unwrap()
        .lock_for(Duration::from_secs(20))
        .await;
    let again = again.unwrap().unwrap();
    order.lock().unwrap().push(0);
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![1, 2, 3, 0]);
    // A waiter that gives up takes its place with it.
    let m = handles[1].mutex(&n).unwrap();
    assert!(m
        .lock_for(Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    for key in waiter_keys(&n) {
        assert_eq!(holding(&url, &key).await, vec![false; 5], "{key}");
    }
    again.release().await.unwrap();
    nothing_left(&url, &n, Duration::from_secs(5)).await;
}
