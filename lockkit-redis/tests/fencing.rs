//! Issue 3, point 5: fencing tokens strictly increase per name after expiry, force-unlock, the
//! counter key's own expiry, and a server restart with persistence; and no key per lock name is
//! left behind forever.

mod common;

use std::time::Duration;

use common::*;
use lockkit_core::AcquireOptions;
use lockkit_redis::LockKeys;
use lockkit_testing::unique_name;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_after_expiry_force_unlock_and_counter_expiry() {
    let Some(url) = shared_url() else { return };
    // The counter key expires 50 ms after its last use, so the time floor has to carry on.
    let locks = connect(&url, &[("fence_ttl", "50ms")]).await;
    let name = unique_name("fence");
    let lock = locks.mutex(&name).unwrap();
    let mut last = lock.lock().await.unwrap();
    let t0 = last.token();
    for round in 0..3 {
        let next = match round {
            0 => {
                // Expiry.
                drop(last);
                let g = lock
                    .acquire(&AcquireOptions::new().fixed_lease(Duration::from_millis(100)))
                    .await
                    .unwrap()
                    .unwrap();
                let t = g.token();
                tokio::time::timeout(Duration::from_secs(3), g.lost())
                    .await
                    .unwrap();
                let g2 = lock.lock().await.unwrap();
                assert!(g2.token() > t);
                g2
            }
            1 => {
                // Force-unlock.
                assert!(lock.force_unlock().await.unwrap());
                lock.lock().await.unwrap()
            }
            _ => {
                // The counter key expired.
                last.release().await.unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
                let mut admin = admin(&url).await;
                let exists: bool = redis::cmd("EXISTS")
                    .arg(LockKeys::mutex("lockkit", &name).fence)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                assert!(!exists, "the fencing counter should have expired");
                lock.lock().await.unwrap()
            }
        };
        assert!(next.token() > t0);
        last = next;
    }
    last.release().await.unwrap();
}

/// A failover to a replica can lose the counter's last updates (asynchronous replication): the
/// new primary's counter is behind tokens already issued. The next token must still be larger,
/// for the mutex, the fair mutex, read and write locks, and the semaphore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_when_the_counter_went_back() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let mut admin = admin(&url).await;
    let name = unique_name("fence-back");
    let counters = [
        LockKeys::mutex("lockkit", &name).fence,
        LockKeys::rwlock("lockkit", &name).fence,
        LockKeys::semaphore("lockkit", &name).fence,
    ];
    let set_back = |admin: &mut redis::aio::MultiplexedConnection| {
        let mut pipe = redis::pipe();
        for c in &counters {
            pipe.cmd("SET").arg(c).arg(5).ignore();
        }
        let mut admin = admin.clone();
        async move { pipe.query_async::<()>(&mut admin).await.unwrap() }
    };
    let mutex = locks.mutex(&name).unwrap();
    let g = mutex.lock().await.unwrap();
    let before = g.token();
    g.release().await.unwrap();
    set_back(&mut admin).await;
    let g = mutex.lock().await.unwrap();
    assert!(g.token() > before, "{} after {before}", g.token());
    let before = g.token();
    g.release().await.unwrap();
    set_back(&mut admin).await;
    let fair = AcquireOptions::new().fair(true);
    let g = mutex.acquire(&fair).await.unwrap().unwrap();
    assert!(g.token() > before, "fair: {} after {before}", g.token());
    g.release().await.unwrap();

    let rw = locks.rwlock(&name).unwrap();
    let w = rw.write_lock().await.unwrap();
    let before = w.token();
    w.release().await.unwrap();
    set_back(&mut admin).await;
    let w = rw.write_lock().await.unwrap();
    assert!(w.token() > before, "write: {} after {before}", w.token());
    w.release().await.unwrap();
    let r = rw.read_lock().await.unwrap();
    let before = r.token();
    r.release().await.unwrap();
    set_back(&mut admin).await;
    let r = rw.read_lock().await.unwrap();
    assert!(r.token() > before, "read: {} after {before}", r.token());
    r.release().await.unwrap();

    let sem = locks.semaphore(&name, 2).unwrap();
    let p = sem.acquire_one().await.unwrap();
    let before = p.token();
    p.release().await.unwrap();
    set_back(&mut admin).await;
    let p = sem.acquire_one().await.unwrap();
    assert!(p.token() > before, "permit: {} after {before}", p.token());
    p.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_a_restart_with_persistence() {
    let mut server = PrivateRedis::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let name = "persisted";
    let k = LockKeys::mutex("lockkit", name);
    let t1 = {
        let locks = connect(&server.url(), &[]).await;
        let g = locks.mutex(name).unwrap().lock().await.unwrap();
        let t = g.token().get();
        g.release().await.unwrap();
        // Push the counter far ahead of the clock, as a burst of acquisitions (or a server
        // whose clock ran ahead before) would: only the persisted counter can keep order now.
        let mut admin = admin(&server.url()).await;
        let ahead = t + 10_000_000_000;
        let _: () = redis::cmd("SET")
            .arg(&k.fence)
            .arg(ahead)
            .arg("PX")
            .arg(3_600_000)
            .query_async(&mut admin)
            .await
            .unwrap();
        ahead
    };
    server.restart();
    let locks = connect(&server.url(), &[]).await;
    let g = locks.mutex(name).unwrap().lock().await.unwrap();
    assert!(
        g.token().get() > t1,
        "token {} after {t1} across a restart",
        g.token()
    );
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_per_lock_name_is_left_forever() {
    let server = PrivateRedis::start(&[]);
    let mut admin = admin(&server.url()).await;
    {
        let locks = connect(&server.url(), &[]).await;
        for i in 0..50 {
            let g = locks
                .mutex(&format!("many/{i}"))
                .unwrap()
                .lock()
                .await
                .unwrap();
            g.release().await.unwrap();
        }
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut admin)
            .await
            .unwrap();
        assert!(!keys.is_empty());
        for key in keys {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut admin)
                .await
                .unwrap();
            assert!(ttl > 0, "key {key} has no expiry ({ttl})");
        }
    }
    let locks = connect(&server.url(), &[("fence_ttl", "200ms")]).await;
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut admin)
        .await
        .unwrap();
    for i in 0..50 {
        let g = locks
            .mutex(&format!("many/{i}"))
            .unwrap()
            .lock()
            .await
            .unwrap();
        g.release().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let fences: Vec<String> = redis::cmd("KEYS")
        .arg("lockkit:fence:*")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(fences.is_empty(), "{} fencing counters left", fences.len());
}

/// Before Redis 6.2, `SET` has no `GET` option: the token scripts read the counter first. The
/// same scripts with the option misspelt take that path on this server.
#[tokio::test]
async fn tokens_increase_on_a_server_without_set_get() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let fast = "'px', ttl, 'get')";
    assert!(lockkit_redis::scripts::ACQUIRE.contains(fast));
    let acquire = redis::Script::new(
        &lockkit_redis::scripts::ACQUIRE.replace(fast, "'px', ttl, 'no-such-option')"),
    );
    let k = LockKeys::mutex("lockkit", &unique_name("fence-old"));
    let conn = admin.clone();
    let take = |owner: String| {
        let (acquire, k, mut admin) = (&acquire, &k, conn.clone());
        async move {
            acquire
                .key(&k.lock)
                .key(&k.fence)
                .key(&k.queue)
                .key(&k.waiters)
                .arg(owner)
                .arg(30_000)
                .arg(3_600_000)
                .arg("0")
                .arg(3_000)
                .invoke_async::<(i64, String)>(&mut admin)
                .await
        }
    };
    let mut last = 0u64;
    for i in 0..5 {
        let (ok, token) = take(format!("old:{i}")).await.unwrap();
        assert_eq!(ok, 1);
        let token: u64 = token.parse().unwrap();
        assert!(token > last, "{token} after {last}");
        last = token;
        let _: () = redis::cmd("DEL")
            .arg(&k.lock)
            .query_async(&mut admin)
            .await
            .unwrap();
        if i == 2 {
            // A counter ahead of the clock is counted on.
            let _: () = redis::cmd("SET")
                .arg(&k.fence)
                .arg(last + 10_000_000_000)
                .arg("PX")
                .arg(60_000)
                .query_async(&mut admin)
                .await
                .unwrap();
            last += 10_000_000_000;
        }
    }
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&k.fence)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(ttl > 3_000_000, "counter TTL {ttl}");
    // A string that is not a counter is refused, untouched.
    let foreign = redis::cmd("SET").arg(&k.fence).arg("precious").clone();
    foreign_value_survives(&mut admin, &k.fence, &foreign, async {
        let e = take("old:x".into()).await.unwrap_err();
        assert!(e.to_string().contains("WRONGTYPE"), "{e}");
    })
    .await;
}
