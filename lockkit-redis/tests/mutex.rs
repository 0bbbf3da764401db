//! Issue 3, point 2: Redisson RLock semantics: the owner hash, hold counts, Lua scripts with
//! NOSCRIPT reload, waiting over pub/sub (a release hands the lock to the first queued waiter and
//! tells it on its client's channel: one subscription per name per client, one waiter per
//! message, waits bounded by the holder's TTL and the waiter's heartbeat), and the handle's
//! queries.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use futures::FutureExt;
use lockkit_core::{AcquireOptions, HoldMode, Locks, Primitive};
use lockkit_redis::LockKeys;
use lockkit_testing::unique_name;

fn keys(name: &str) -> LockKeys {
    LockKeys::mutex("lockkit", name)
}

#[tokio::test]
async fn owner_hash_holds_the_hold_count() {
    let Some(url) = shared_url() else { return };
    let backend = lockkit_redis::connect_backend(&config(&url, &[]))
        .await
        .unwrap();
    let client_id = backend.client_id().to_string();
    let locks = Locks::new(backend);
    let mut admin = admin(&url).await;
    let name = unique_name("hash");
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    let fields: HashMap<String, i64> = redis::cmd("HGETALL")
        .arg(&keys(&name).lock)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(fields.len(), 1, "{fields:?}");
    let (owner, holds) = fields.iter().next().unwrap();
    let (uuid, id) = owner.rsplit_once(':').unwrap();
    assert_eq!(uuid, client_id);
    id.parse::<u64>().expect("numeric owner id");
    assert_eq!(*holds, 1);
    let g2 = g.reenter().await.unwrap();
    let holds: i64 = redis::cmd("HGET")
        .arg(&keys(&name).lock)
        .arg(owner)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(holds, 2, "reenter is mirrored on the server");
    g2.release().await.unwrap();
    g.release().await.unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg(&keys(&name).lock)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn scripts_reload_after_script_flush() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let lock = locks.mutex("flush").unwrap();
    lock.lock().await.unwrap().release().await.unwrap();
    let mut admin = admin(&server.url()).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .unwrap();
    let g = lock.lock().await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .unwrap();
    g.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_wakes_on_release_message_not_on_ttl() {
    let Some(url) = shared_url() else { return };
    let (a, b) = (connect(&url, &[]).await, connect(&url, &[]).await);
    let name = unique_name("wake");
    let g = a.mutex(&name).unwrap().lock().await.unwrap(); // 30 s lease
    let waiter = b.mutex(&name).unwrap();
    let task = tokio::spawn(async move {
        let g = waiter.lock().await.unwrap();
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    g.release().await.unwrap();
    let (woke, g2) = task.await.unwrap();
    let took = woke - released;
    assert!(took < Duration::from_millis(250), "woke after {took:?}");
    g2.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_subscription_per_name_per_client_dropped_with_last_waiter() {
    let Some(url) = shared_url() else { return };
    let backend = lockkit_redis::connect_backend(&config(&url, &[]))
        .await
        .unwrap();
    let name = unique_name("subs");
    // The waiting client's channel of the lock.
    let channel = format!("{}:{}", keys(&name).lock, backend.client_id());
    let locks = Locks::new(backend);
    let holder_locks = connect(&url, &[]).await;
    let mut admin = admin(&url).await;
    let numsub = |mut admin: redis::aio::MultiplexedConnection, channel: String| async move {
        let r: (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query_async(&mut admin)
            .await
            .unwrap();
        r.1
    };
    let holder = holder_locks.mutex(&name).unwrap().lock().await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let lock = locks.mutex(&name).unwrap();
        tasks.push(tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            g.release().await.unwrap();
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(numsub(admin.clone(), channel.clone()).await, 1);
    // Each release hands the lock to the next local waiter: all five finish quickly although
    // the holder's lease is 30 s.
    let started = Instant::now();
    holder.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // Dropped after a short linger once the last waiter left.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        numsub(admin.clone(), channel).await,
        0,
        "subscription left behind"
    );
    let _ = &mut admin;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_message_costs_at_most_the_holders_ttl() {
    let Some(url) = shared_url() else { return };
    let (a, b) = (connect(&url, &[]).await, connect(&url, &[]).await);
    let name = unique_name("missed");
    let mut admin = admin(&url).await;
    let g = a
        .mutex(&name)
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(Duration::from_secs(1)))
        .await
        .unwrap()
        .unwrap();
    // Silently take the lock away from under the holder without a message, then re-create it
    // with a 700 ms TTL and no message when it expires.
    std::mem::forget(g);
    drop(a);
    let _: () = redis::cmd("DEL")
        .arg(&keys(&name).lock)
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&keys(&name).lock)
        .arg("someone:1")
        .arg(1)
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: () = redis::cmd("PEXPIRE")
        .arg(&keys(&name).lock)
        .arg(700)
        .query_async(&mut admin)
        .await
        .unwrap();
    let started = Instant::now();
    let g = b
        .mutex(&name)
        .unwrap()
        .lock_for(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("acquired after the TTL");
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "waited {took:?} for a 700 ms TTL"
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn queries_is_locked_remaining_lease_inspect_force_unlock() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let name = unique_name("queries");
    let lock = locks.mutex(&name).unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(lock.remaining_lease().await.unwrap(), None);
    let g = lock
        .acquire(&AcquireOptions::new().fixed_lease(Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert_eq!(lock.hold_count(), 1);
    let left = lock.remaining_lease().await.unwrap().unwrap();
    assert!(
        left > Duration::from_secs(4) && left <= Duration::from_secs(5),
        "{left:?}"
    );
    let info = locks.inspect(&name, Primitive::Mutex).await.unwrap();
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].mode, HoldMode::Exclusive);
    assert!(info.holders[0].remaining_lease.is_some());
    assert!(lock.force_unlock().await.unwrap());
    assert!(!lock.is_locked().await.unwrap());
    assert!(!lock.force_unlock().await.unwrap());
    assert!(g.release().await.is_err());
    assert_eq!(lock.hold_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_releases_everything_held_and_marks_guards_lost() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let other = connect(&url, &[]).await;
    let (a, b) = (unique_name("close-a"), unique_name("close-b"));
    let g = locks.mutex(&a).unwrap().lock().await.unwrap();
    let r = locks
        .rwlock(&b)
        .unwrap()
        .read(&AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    locks.close().await.unwrap();
    assert_eq!(g.state(), lockkit_core::LockState::Lost);
    assert_eq!(r.state(), lockkit_core::LockState::Lost);
    assert!(!other.mutex(&a).unwrap().is_locked().await.unwrap());
    assert!(!other.rwlock(&b).unwrap().is_locked().await.unwrap());
    // The handle is closed, as on every backend.
    assert_eq!(
        locks.mutex(&a).unwrap_err().kind(),
        lockkit_core::ErrorKind::Closed
    );
}

/// Holds `name` from one client while `waiters[i]` tasks of client i (plus, with `holder_waits`,
/// one more task of the holder's client) wait for it, releases, and requires every waiter to
/// get the lock within 5 s: with 20 s heartbeats and a 30 s lease, a lost hand-off would leave a
/// waiter waiting for its timer.
async fn wake_chain(url: &str, name: &str, waiters: &[usize], holder_waits: bool) {
    let opts = [("waiter_heartbeat", "20s")];
    let holder = lockkit_redis::connect(&config(url, &opts)).await.unwrap();
    let first = holder.mutex(name).unwrap().lock().await.unwrap();
    let mut tasks = Vec::new();
    let mut clients = Vec::new();
    for &n in waiters {
        let locks = lockkit_redis::connect(&config(url, &opts)).await.unwrap();
        for _ in 0..n {
            let lock = locks.mutex(name).unwrap();
            tasks.push(tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                g.release().await.unwrap();
            }));
        }
        clients.push(locks);
    }
    if holder_waits {
        let own = holder.mutex(name).unwrap();
        tasks.push(tokio::spawn(async move {
            let g = own.lock().await.unwrap();
            g.release().await.unwrap();
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .expect("a waiter did not get the lock by hand-off")
            .unwrap();
    }
    // The queue is gone with the last hand-off: nothing of the lock is left but its fencing
    // counter and the unlock latches (both expire).
    let mut admin = admin(url).await;
    let k = keys(name);
    let left: i64 = redis::cmd("EXISTS")
        .arg(&k.lock)
        .arg(&k.queue)
        .arg(&k.waiters)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

/// Every waiter, local or remote, gets the lock by hand-off, never by falling back to its
/// timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_gets_the_lock_by_hand_off_without_falling_back_to_its_timer() {
    let Some(url) = shared_url() else { return };
    // Several waiting clients, and a waiter in the holder's own client.
    wake_chain(&url, &unique_name("wake-chain"), &[3, 2, 1], true).await;
    // One waiting client only: every hand-off goes to one of its own waiters.
    wake_chain(&url, &unique_name("wake-local"), &[3], false).await;
}

/// A hand-off whose message never arrives (the waiter's pub/sub connection was cut just before
/// the release) is taken up by the waiter's next heartbeat attempt: a lost message costs at most
/// one heartbeat, never the holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_hand_off_message_is_taken_up_at_the_next_heartbeat() {
    let server = PrivateRedis::start(&[]);
    let opts = [("waiter_heartbeat", "300ms")];
    let (a, b) = (
        connect(&server.url(), &opts).await,
        connect(&server.url(), &opts).await,
    );
    let mut admin = admin(&server.url()).await;
    let g = a.mutex("lost-msg").unwrap().lock().await.unwrap(); // 30 s lease
    let t1 = g.token();
    let lock = b.mutex("lost-msg").unwrap();
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    // Every client's pub/sub connection is subscribed (its holder channel): wait for the
    // waiter's lock channel, so the cut comes after the waiter listens.
    until_subscribed(
        &mut admin,
        "*lost-msg*",
        Duration::from_secs(10),
        "the waiter never subscribed",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(killed >= 1, "no pub/sub connection to cut");
    let released = Instant::now();
    g.release().await.unwrap();
    let g2 = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter got the lock")
        .unwrap();
    assert!(
        released.elapsed() < Duration::from_millis(1500),
        "took {:?}",
        released.elapsed()
    );
    assert!(g2.token() > t1);
    g2.release().await.unwrap();
}

/// `inspect` lists the queued waiters, first in line first; `force_unlock` hands the lock to the
/// first of them at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_lists_waiters_and_force_unlock_hands_the_lock_on() {
    let Some(url) = shared_url() else { return };
    let (a, b, admin_locks) = (
        connect(&url, &[]).await,
        connect(&url, &[]).await,
        connect(&url, &[]).await,
    );
    let name = unique_name("force-hand");
    let g = a.mutex(&name).unwrap().lock().await.unwrap(); // 30 s lease
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let lock = b.mutex(&name).unwrap();
        waiting.push(tokio::spawn(async move { lock.lock().await.unwrap() }));
        // In arrival order.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let info = admin_locks.inspect(&name, Primitive::Mutex).await.unwrap();
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.waiters.len(), 2, "{info:?}");
    assert!(info.waiters.iter().all(|w| w.mode == HoldMode::Exclusive));
    let started = Instant::now();
    assert!(admin_locks
        .mutex(&name)
        .unwrap()
        .force_unlock()
        .await
        .unwrap());
    let first = waiting.remove(0);
    let g1 = tokio::time::timeout(Duration::from_secs(2), first)
        .await
        .expect("the first waiter got the lock from the force-unlock")
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(g1.token() > g.token());
    assert_eq!(
        admin_locks
            .inspect(&name, Primitive::Mutex)
            .await
            .unwrap()
            .waiters
            .len(),
        1
    );
    // The old holder finds out.
    assert!(g.release().await.is_err());
    g1.release().await.unwrap();
    let g2 = tokio::time::timeout(Duration::from_secs(2), waiting.remove(0))
        .await
        .unwrap()
        .unwrap();
    g2.release().await.unwrap();
}

/// Issue 25, item 7: a queued waiter that reads PTTL 0 (the holder's lease ends in this very
/// millisecond) tries again at once instead of sleeping a heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_reads_pttl_0_tries_again_at_once() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[("waiter_heartbeat", "60s")]).await;
    let names: Vec<String> = (0..8).map(|i| unique_name(&format!("pttl0-{i}"))).collect();
    let hold = |i: usize| {
        let fields = vec![("foreign-client:1".to_string(), "1".to_string())];
        (keys(&names[i]).lock, fields)
    };
    let wait = |i: usize, within: Duration| {
        let m = locks.mutex(&names[i]).unwrap();
        async move { m.lock_for(within).await.unwrap().is_some() }
    };
    waiters_see_unannounced_ends(&url, names.len(), hold, wait).await;
}

/// Issue 25, item 12: a reentry cancelled mid-call (its future dropped before the answer, and
/// perhaps before the request was sent) leaves the hold count the server keeps (what `inspect` and `top`
/// read) at the guard's, and so does every reentry after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_reentry_leaves_the_server_hold_count() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let name = unique_name("reenter-cancel");
    let key = keys(&name).lock;
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    let mut holds = Vec::new();
    for _ in 0..3 {
        // Dropped after its first poll, which queues the request: it may or may not be sent,
        // and (rarely, the connection's task running on the other thread) it may be answered.
        if let Some(held) = g.reenter().now_or_never() {
            holds.push(held.unwrap());
        }
        // Dropped after 1 ms, which the answer usually beats.
        if let Ok(held) = tokio::time::timeout(Duration::from_millis(1), g.reenter()).await {
            holds.push(held.unwrap());
        }
    }
    holds.push(g.reenter().await.unwrap());
    let want = g.hold_count();
    assert_eq!(want as usize, 1 + holds.len());
    let count = server_hold_count(&locks, &url, &name, Primitive::Mutex, &key, want).await;
    assert_eq!(count, want, "the server's hold count is not the guard's");
    for h in holds {
        h.release().await.unwrap();
    }
    g.release().await.unwrap();
}
