//! Issue 4, point 2: the read-write lock: shared readers, exclusive writers, writers not
//! starved by a stream of readers, upgrade fails fast, downgrade, watchdog, lost signal and
//! fencing on both guard kinds.

mod common;

lockkit_testing::holder_process!(lockkit_redis::connect);

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use futures::FutureExt;
use lockkit_core::{AcquireOptions, ErrorKind, LockState};
use lockkit_testing::unique_name;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_is_not_starved_by_a_stream_of_readers() {
    let Some(url) = shared_url() else { return };
    let name = unique_name("rw-starve");
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    // Four clients keep overlapping read locks held at all times.
    for _ in 0..4 {
        let locks = connect(&url, &[]).await;
        let (name, stop) = (name.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            let rw = locks.rwlock(&name).unwrap();
            while !stop.load(Ordering::SeqCst) {
                let r = rw.read_lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(30)).await;
                r.release().await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let writer = connect(&url, &[]).await;
    let started = Instant::now();
    let w = tokio::time::timeout(
        Duration::from_secs(5),
        writer.rwlock(&name).unwrap().write_lock(),
    )
    .await
    .expect("a writer starved behind readers")
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    w.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_write_guards_are_renewed_fenced_and_lose_on_force_unlock() {
    let Some(url) = shared_url() else { return };
    let (a, b) = (connect(&url, &[]).await, connect(&url, &[]).await);
    let name = unique_name("rw-watchdog");
    let opts = AcquireOptions::new().watchdog_lease(Duration::from_secs(1));
    let rw = a.rwlock(&name).unwrap();
    let w = rw.write(&opts).await.unwrap().unwrap();
    let t_w = w.token();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(w.state(), LockState::Held);
    assert!(b.rwlock(&name).unwrap().try_read().await.unwrap().is_none());
    let r = w.downgrade().await.unwrap();
    assert_eq!(r.token(), t_w);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(r.state(), LockState::Held, "read lease not renewed");
    assert!(b
        .rwlock(&name)
        .unwrap()
        .try_write()
        .await
        .unwrap()
        .is_none());
    let e = r.upgrade().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UpgradeNotSupported);
    // An operator's force-unlock: the reader hears of it on its client's holder channel.
    assert!(b.rwlock(&name).unwrap().force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(3), r.lost())
        .await
        .expect("read guard lost()");
    let w2 = b.rwlock(&name).unwrap().try_write().await.unwrap().unwrap();
    assert!(w2.token() > t_w, "write tokens order writers");
    w2.release().await.unwrap();
    assert_eq!(r.release().await.unwrap_err().kind(), ErrorKind::LockLost);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_reader_comes_back_within_one_lease_and_try_write_leaves_no_intent() {
    let Some(url) = shared_url() else { return };
    let name = unique_name("rw-dead");
    let lease = Duration::from_secs(1);
    // The holder process dies: no release, and its watchdog stops with it.
    dead_holder(&url, &[], &name, lockkit_testing::Hold::Read, lease).await;
    let locks = connect(&url, &[]).await;
    let rw = locks.rwlock(&name).unwrap();
    // A failed try_write must not leave an intent that blocks readers.
    assert!(rw.try_write().await.unwrap().is_none());
    let r = rw
        .try_read()
        .await
        .unwrap()
        .expect("a failed try_write blocked readers");
    r.release().await.unwrap();
    let started = Instant::now();
    let w = rw
        .write(&AcquireOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("the dead reader's lease ended");
    assert!(
        started.elapsed() < lease + Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    w.release().await.unwrap();
}

/// Issue 25, item 7: a writer or reader waiting for a write lock that reads PTTL 0 (the
/// holder's lease ends in this very millisecond) tries again at once instead of sleeping a
/// heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_reads_pttl_0_tries_again_at_once() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[("waiter_heartbeat", "60s")]).await;
    let names: Vec<String> = (0..8)
        .map(|i| unique_name(&format!("rw-pttl0-{i}")))
        .collect();
    let hold = |i: usize| {
        let fields = vec![("foreign-client:1".to_string(), "1".to_string())];
        (
            lockkit_redis::LockKeys::rwlock("lockkit", &names[i]).lock,
            fields,
        )
    };
    let wait = |i: usize, within: Duration| {
        let rw = locks.rwlock(&names[i]).unwrap();
        let opts = AcquireOptions::new().wait(within);
        async move {
            // Writers and readers wait in different scripts.
            if i.is_multiple_of(2) {
                rw.write(&opts).await.unwrap().is_some()
            } else {
                rw.read(&opts).await.unwrap().is_some()
            }
        }
    };
    waiters_see_unannounced_ends(&url, names.len(), hold, wait).await;
}

/// Issue 25, item 12: a write lock's reentry cancelled mid-call leaves the hold count the
/// server keeps at the guard's, and so does every reentry after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_write_reentry_leaves_the_server_hold_count() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let name = unique_name("rw-reenter-cancel");
    let key = lockkit_redis::LockKeys::rwlock("lockkit", &name).lock;
    let g = locks.rwlock(&name).unwrap().write_lock().await.unwrap();
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
    let primitive = lockkit_core::Primitive::RwLock;
    let count = server_hold_count(&locks, &url, &name, primitive, &key, want).await;
    assert_eq!(count, want, "the server's hold count is not the guard's");
    for h in holds {
        h.release().await.unwrap();
    }
    g.release().await.unwrap();
}

/// A key of another type at the write lock's name is a typed `WrongType` error for readers,
/// `is_locked` and `force_unlock`, as it is for writers (a reader used to take it for a writer
/// and wait; `force_unlock` deleted it), and it is left as it was.
#[tokio::test]
async fn a_foreign_key_at_the_write_lock_is_a_typed_error_for_readers_too() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let mut admin = admin(&url).await;
    let name = unique_name("rw-foreign");
    let key = lockkit_redis::LockKeys::rwlock("lockkit", &name).lock;
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("precious")
        .arg("EX")
        .arg(60)
        .query_async(&mut admin)
        .await
        .unwrap();
    let rw = locks.rwlock(&name).unwrap();
    let waiting = AcquireOptions::new().wait(Duration::from_millis(300));
    for r in [
        rw.try_read().await.map(drop),
        rw.read(&waiting).await.map(drop),
        rw.try_write().await.map(drop),
        rw.is_locked().await.map(drop),
        rw.force_unlock().await.map(drop),
    ] {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WrongType, "{e}");
    }
    let v: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(v, "precious", "lockkit overwrote a foreign key");
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut admin)
        .await
        .unwrap();
}

/// A key of another type at the readers' key is left as it is by `force_unlock`, which fails
/// with `WrongType` (it used to delete it).
#[tokio::test]
async fn force_unlock_leaves_a_foreign_key_at_the_readers_key() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let mut admin = admin(&url).await;
    let name = unique_name("rw-foreign-holders");
    let key = lockkit_redis::LockKeys::rwlock("lockkit", &name).holders;
    let set = redis::cmd("SET")
        .arg(&key)
        .arg("precious")
        .arg("EX")
        .arg(60)
        .clone();
    let rw = locks.rwlock(&name).unwrap();
    common::foreign_value_survives(&mut admin, &key, &set, async {
        let e = rw.force_unlock().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WrongType, "{e}");
    })
    .await;
}

/// A waiting writer's intent keeps new readers out however short another client's heartbeat
/// is: the intent of a writer whose client beats every 100 ms (and then dies) used to set the
/// intents' key to expire in 600 ms, taking with it the intent of a writer whose client beats
/// every 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_heartbeat_does_not_expire_another_clients_intent() {
    let Some(url) = shared_url() else { return };
    let name = unique_name("rw-intent-ttl");
    let readers = connect(&url, &[]).await;
    let slow = connect(&url, &[("waiter_heartbeat", "10s")]).await;
    let r = readers.rwlock(&name).unwrap().read_lock().await.unwrap();
    let writer = tokio::spawn({
        let rw = slow.rwlock(&name).unwrap();
        async move {
            let opts = AcquireOptions::new().wait(Duration::from_secs(20));
            rw.write(&opts).await.unwrap().expect("the writer gets in")
        }
    });
    let k = lockkit_redis::LockKeys::rwlock("lockkit", &name);
    let mut admin = admin(&url).await;
    let started = Instant::now();
    loop {
        let n: usize = redis::cmd("ZCARD")
            .arg(&k.waiters)
            .query_async(&mut admin)
            .await
            .unwrap();
        if n == 1 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "no intent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The writer subscribes after its first attempt and then looks once more (a release before
    // the subscription sent no message it heard): let that second attempt pass, so that the
    // dead client's script below is the last to touch the intents.
    let slow_backend = slow.backend_as::<lockkit_redis::RedisBackend>().unwrap();
    while slow_backend.waiting_channels() == 0 {
        assert!(started.elapsed() < Duration::from_secs(5), "not subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A writer of a client with a 100 ms heartbeat (an intent timeout of 300 ms) queues, and its
    // client dies: the script it ran, and nothing after.
    let _: redis::Value = redis::Script::new(lockkit_redis::scripts::RW_WRITE)
        .key(&k.lock)
        .key(&k.holders)
        .key(&k.waiters)
        .key(&k.fence)
        .arg("lktest-dead-client:1")
        .arg(30_000)
        .arg(60_000)
        .arg(300)
        .invoke_async(&mut admin)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        readers
            .rwlock(&name)
            .unwrap()
            .try_read()
            .await
            .unwrap()
            .is_none(),
        "the slow client's writer still keeps new readers out"
    );
    r.release().await.unwrap();
    writer.await.unwrap().release().await.unwrap();
}

/// A downgrade the server takes while its caller has given up on it (a dropped future here; a
/// lost reply is the same) used to leave a read hold no guard owned: writers were kept out for
/// the whole lease. The undo releases the write hold, then the read hold, on both layouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_whose_answer_is_not_seen_leaves_no_read_hold() {
    let server = PrivateRedis::start(&[]);
    for compat in ["false", "true"] {
        let locks = connect(&server.url(), &[("redisson_compat", compat)]).await;
        let other = connect(&server.url(), &[("redisson_compat", compat)]).await;
        // The scripts are loaded before the server stops.
        let warm = locks.rwlock(&unique_name("warm")).unwrap();
        let r = warm.write_lock().await.unwrap().downgrade().await.unwrap();
        r.release().await.unwrap();

        let name = unique_name("unseen-downgrade");
        let w = locks.rwlock(&name).unwrap().write_lock().await.unwrap();
        server.pause();
        let gave_up = tokio::time::timeout(Duration::from_millis(200), w.downgrade()).await;
        assert!(gave_up.is_err(), "{compat}: the server is stopped");
        server.resume();
        let got = other
            .rwlock(&name)
            .unwrap()
            .write(&AcquireOptions::new().wait(Duration::from_secs(10)))
            .await
            .unwrap();
        let w2 = got.unwrap_or_else(|| panic!("{compat}: an orphan read hold kept the writer out"));
        w2.release().await.unwrap();
        locks.close().await.unwrap();
        other.close().await.unwrap();
    }
}
