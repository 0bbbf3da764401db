//! Issue 4, point 1: the fair (FIFO) mutex: arrival order, targeted wake-ups, dead waiters
//! skipped within the heartbeat bound (for non-fair waiters too, which queue the same way), live
//! waiters never dropped, a clean queue after timeouts and cancellations.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use lockkit_core::{AcquireOptions, Locks};
use lockkit_redis::LockKeys;

const CHILD_ENV: &str = "LOCKKIT_REDIS_FAIR_CHILD";

fn fair() -> AcquireOptions {
    AcquireOptions::new().fair(true)
}

async fn llen(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("LLEN")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap()
}

async fn wait_queue_len(admin: &mut redis::aio::MultiplexedConnection, key: &str, n: i64) {
    let started = Instant::now();
    while llen(admin, key).await != n {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "queue never reached {n}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The child side of `killed_waiter_delays_others_by_at_most_the_heartbeat_bound`: queue as a
/// waiter (fair or not, as told) and block until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_waiter() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let (url, name, fair_mode) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next() == Some("fair"),
    );
    // The option's old name, still accepted.
    let locks = connect(url, &[("fair_heartbeat", "200ms")]).await;
    let opts = AcquireOptions::new().fair(fair_mode);
    let _ = locks.mutex(name).unwrap().acquire(&opts).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_many_clients_are_served_in_arrival_order() {
    let server = PrivateRedis::start(&[]);
    let holder = connect(&server.url(), &[]).await;
    let g = holder
        .mutex("fifo")
        .unwrap()
        .acquire(&fair())
        .await
        .unwrap()
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut admin = admin(&server.url()).await;
    let queue = LockKeys::mutex("lockkit", "fifo").queue;
    for i in 0..6 {
        let locks = connect(&server.url(), &[]).await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = locks
                .mutex("fifo")
                .unwrap()
                .acquire(&fair())
                .await
                .unwrap()
                .unwrap();
            order.lock().unwrap().push(i);
            // Re-queue at the back: a fair holder cannot barge.
            g.release().await.unwrap();
            let g = locks
                .mutex("fifo")
                .unwrap()
                .acquire(&fair())
                .await
                .unwrap()
                .unwrap();
            order.lock().unwrap().push(10 + i);
            g.release().await.unwrap();
        }));
        wait_queue_len(&mut admin, &queue, i + 1).await;
    }
    g.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .unwrap()
            .unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(&order[..6], &[0, 1, 2, 3, 4, 5], "{order:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_wakes_only_the_next_waiter() {
    let server = PrivateRedis::start(&[]);
    // Long heartbeats: no waiter runs a script unless it is woken.
    let opts = [("fair_heartbeat", "10s")];
    let holder = connect(&server.url(), &opts).await;
    let mut admin = admin(&server.url()).await;
    let queue = LockKeys::mutex("lockkit", "targeted").queue;
    let g = holder
        .mutex("targeted")
        .unwrap()
        .acquire(&fair())
        .await
        .unwrap()
        .unwrap();
    let mut tasks = Vec::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..5 {
        let locks = connect(&server.url(), &opts).await;
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let g = locks
                .mutex("targeted")
                .unwrap()
                .acquire(&fair())
                .await
                .unwrap()
                .unwrap();
            tx.send(i).unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(g);
        }));
        wait_queue_len(&mut admin, &queue, i + 1).await;
    }
    let info = |mut admin: redis::aio::MultiplexedConnection| async move {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut admin)
            .await
            .unwrap();
        // Successful script runs (a NOSCRIPT miss counts as a failed call).
        let line = info
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
            .unwrap_or("");
        let field = |name: &str| -> u64 {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(name))
                .map_or(0, |v| v.parse().unwrap())
        };
        field("calls=") - field("failed_calls=")
    };
    // Let the last waiter finish queueing (it re-checks once after subscribing).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = info(admin.clone()).await;
    g.release().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let scripts = info(admin.clone()).await - before;
    // The release and the first waiter's acquire; the other four stayed asleep.
    assert!(scripts <= 2, "{scripts} script calls for one hand-off");
    for t in tasks {
        t.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_waiter_delays_others_by_at_most_the_heartbeat_bound() {
    for fair_mode in [true, false] {
        killed_waiter_delays_others(fair_mode).await;
    }
}

/// A waiter killed in the queue may still be handed the lock (it looked alive): the hand-off
/// expires after 3 heartbeats, and the next waiter takes the lock within one more.
async fn killed_waiter_delays_others(fair_mode: bool) {
    let Some(url) = shared_url() else { return };
    let name = lockkit_testing::unique_name("fair-dead");
    let queue = LockKeys::mutex("lockkit", &name).queue;
    let opts = [("waiter_heartbeat", "200ms")];
    let mode = AcquireOptions::new().fair(fair_mode);
    let holder = connect(&url, &opts).await;
    let mut admin = admin(&url).await;
    let g = holder
        .mutex(&name)
        .unwrap()
        .acquire(&mode)
        .await
        .unwrap()
        .unwrap();
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_waiter", "--test-threads=1"])
            .env(
                CHILD_ENV,
                format!("{url}|{name}|{}", if fair_mode { "fair" } else { "" }),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_queue_len(&mut admin, &queue, 1).await;
    let live = connect(&url, &opts).await;
    let lock = live.mutex(&name).unwrap();
    let waiter = tokio::spawn(async move {
        let g = lock.acquire(&mode).await.unwrap().unwrap();
        (Instant::now(), g)
    });
    wait_queue_len(&mut admin, &queue, 2).await;
    child.0.kill().unwrap(); // the first waiter dies in the queue
    child.0.wait().unwrap();
    let released = Instant::now();
    g.release().await.unwrap();
    let (got, g2) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    let delay = got - released;
    // The hand-off to the dead waiter (3 × 200 ms) plus one heartbeat of the live waiter, plus
    // slack.
    assert!(
        delay < Duration::from_millis(1500),
        "a dead waiter delayed the next by {delay:?} (fair: {fair_mode})"
    );
    g2.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_waiter_queued_past_every_timeout_keeps_its_place() {
    let Some(url) = shared_url() else { return };
    let name = lockkit_testing::unique_name("fair-live");
    let queue = LockKeys::mutex("lockkit", &name).queue;
    let opts = [("fair_heartbeat", "100ms")];
    let (a, b, c) = (
        connect(&url, &opts).await,
        connect(&url, &opts).await,
        connect(&url, &opts).await,
    );
    let mut admin = admin(&url).await;
    let g = a
        .mutex(&name)
        .unwrap()
        .acquire(&fair())
        .await
        .unwrap()
        .unwrap();
    let first = b.mutex(&name).unwrap();
    let t1 = tokio::spawn(async move { first.acquire(&fair()).await.unwrap().unwrap() });
    wait_queue_len(&mut admin, &queue, 1).await;
    let second = c.mutex(&name).unwrap();
    let t2 = tokio::spawn(async move { second.acquire(&fair()).await.unwrap().unwrap() });
    wait_queue_len(&mut admin, &queue, 2).await;
    // Hold for 10 × the waiters' heartbeat timeout (300 ms).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        llen(&mut admin, &queue).await,
        2,
        "a live waiter was dropped"
    );
    g.release().await.unwrap();
    let g1 = tokio::time::timeout(Duration::from_secs(5), t1)
        .await
        .unwrap()
        .unwrap();
    assert!(!t2.is_finished(), "the second waiter overtook the first");
    let t1_token = g1.token();
    g1.release().await.unwrap();
    let g2 = tokio::time::timeout(Duration::from_secs(5), t2)
        .await
        .unwrap()
        .unwrap();
    assert!(g2.token() > t1_token);
    g2.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_timeouts_and_cancellation_leave_the_queue_clean() {
    let Some(url) = shared_url() else { return };
    let name = lockkit_testing::unique_name("fair-clean");
    let k = LockKeys::mutex("lockkit", &name);
    let locks: Locks = connect(&url, &[]).await;
    let mut admin = admin(&url).await;
    let g = locks
        .mutex(&name)
        .unwrap()
        .acquire(&fair())
        .await
        .unwrap()
        .unwrap();
    let lock = locks.mutex(&name).unwrap();
    assert!(lock.acquire(&fair().no_wait()).await.unwrap().is_none());
    assert!(lock
        .acquire(&fair().wait(Duration::from_millis(200)))
        .await
        .unwrap()
        .is_none());
    {
        let opts = fair();
        let waiting = lock.acquire(&opts);
        assert!(tokio::time::timeout(Duration::from_millis(200), waiting)
            .await
            .is_err());
    }
    let task = {
        let lock = locks.mutex(&name).unwrap();
        tokio::spawn(async move { lock.acquire(&fair()).await.map(drop) })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    task.abort();
    let _ = task.await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(llen(&mut admin, &k.queue).await, 0, "queue not clean");
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&k.queue)
        .arg(&k.waiters)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(exists, 0, "queue keys left behind");
    // The next fair acquirer is not delayed by any of them.
    g.release().await.unwrap();
    let started = Instant::now();
    let g = lock
        .acquire(&fair().wait(Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_millis(500));
    g.release().await.unwrap();
}
