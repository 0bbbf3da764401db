//! Issue 4, point 4 (Rust side): in `redisson_compat` mode the mutex uses Redisson's RLock key,
//! hash field, channel and RFencedLock's token counter, the read-write lock RReadWriteLock's
//! layout and the semaphore RSemaphore's count, and each wakes on Redisson's messages. The
//! end-to-end test against real Redisson is `scripts/test.d/20-redisson-interop.sh`; the whole
//! conformance suite in compat mode is `redisson_conformance.rs`.

mod common;

lockkit_testing::holder_process!(lockkit_redis::connect);

use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use lockkit_core::{AcquireOptions, LockState};
use lockkit_testing::unique_name;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_mutex_speaks_redissons_layout_and_messages() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[("redisson_compat", "true")]).await;
    let mut admin = admin(&url).await;
    let name = unique_name("redisson").replace('/', "-");
    let channel = format!("redisson_lock__channel:{{{name}}}");

    // Our hold is a Redisson hold: hash `name`, field `<uuid>:<id>` -> 1.
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    let fields: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
        .arg(&name)
        .query_async(&mut admin)
        .await
        .unwrap();
    let (field, holds) = fields.iter().next().expect("hash under the bare name");
    assert_eq!(*holds, 1);
    assert_eq!(field.split(':').count(), 2, "{field}");
    // Our release publishes Redisson's unlock message on Redisson's channel.
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe(&channel).await.unwrap();
    g.release().await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(2), pubsub.on_message().next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");

    // A Redisson holder (what RedissonLock's acquire script writes) excludes us, and its unlock
    // (delete + publish 0) wakes our waiter at once, not at the 30 s lease.
    let _: () = redis::cmd("HSET")
        .arg(&name)
        .arg("java-uuid:7")
        .arg(1)
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: () = redis::cmd("PEXPIRE")
        .arg(&name)
        .arg(30_000)
        .query_async(&mut admin)
        .await
        .unwrap();
    let lock = locks.mutex(&name).unwrap();
    assert!(lock.try_lock().await.unwrap().is_none());
    let waiter = tokio::spawn(async move {
        let g = lock.lock().await.unwrap();
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    let _: () = redis::cmd("DEL")
        .arg(&name)
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: () = redis::cmd("PUBLISH")
        .arg(&channel)
        .arg("0")
        .query_async(&mut admin)
        .await
        .unwrap();
    let (at, g) = waiter.await.unwrap();
    assert!(
        at - released < Duration::from_millis(100),
        "woke after {:?}",
        at - released
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn compat_rejects_names_without_a_shareable_slot() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[("redisson_compat", "true")]).await;
    for bad in ["a}b", "a{b", "{}b"] {
        let e = locks.mutex(bad).unwrap_err();
        assert_eq!(e.kind(), lockkit_core::ErrorKind::InvalidName, "{bad}");
    }
    assert!(locks.mutex("{a}b").is_ok());
}

/// On Redisson's layout a mutex and an RW lock of one name are one hash: a multi-lock refuses to
/// take it twice (it would wait on itself), while natively they are two locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_multi_lock_refuses_a_mutex_and_rw_lock_of_one_name() {
    use lockkit_core::Member;
    let Some(url) = shared_url() else { return };
    let name = compat_name("rs-multi");
    let compat = connect(&url, &[("redisson_compat", "true")]).await;
    for set in [
        [Member::Mutex(&name), Member::Write(&name)],
        [Member::Read(&name), Member::Mutex(&name)],
    ] {
        let e = compat.multi_of(&set).unwrap_err();
        assert_eq!(e.kind(), lockkit_core::ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("one lock"), "{e}");
    }
    let native = connect(&url, &[]).await;
    let both = native
        .multi_of(&[Member::Mutex(&name), Member::Write(&name)])
        .unwrap();
    let g = both
        .acquire(&AcquireOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("two separate locks natively");
    g.release().await.unwrap();
}

/// Runs one raw command on the admin connection.
async fn raw<T: redis::FromRedisValue>(
    admin: &mut redis::aio::MultiplexedConnection,
    args: &[&str],
) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(admin).await.unwrap()
}

/// The first message on `channel` within 2 s, after `action` ran.
async fn published<F: std::future::Future>(url: &str, channel: &str, action: F) -> String {
    let client = redis::Client::open(url).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe(channel).await.unwrap();
    action.await;
    let msg = tokio::time::timeout(Duration::from_secs(2), pubsub.on_message().next())
        .await
        .expect("no message")
        .unwrap();
    msg.get_payload::<String>().unwrap()
}

fn compat_name(case: &str) -> String {
    unique_name(case).replace('/', "-")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_mutex_tokens_share_rfencedlocks_counter() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[("redisson_compat", "true")]).await;
    let mut admin = admin(&url).await;
    let name = compat_name("rs-fenced");
    let counter = format!("redisson_lock_token:{{{name}}}");
    // A fresh counter starts at 1 and never expires, as RFencedLock keeps it.
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    assert_eq!(g.token().0, 1);
    assert_eq!(raw::<i64>(&mut admin, &["PTTL", &counter]).await, -1);
    g.release().await.unwrap();
    // Redisson holders in between (RFencedLock increments the same counter).
    let _: i64 = raw(&mut admin, &["INCRBY", &counter, "5"]).await;
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    assert_eq!(g.token().0, 7);
    g.release().await.unwrap();
    let _: i64 = raw(&mut admin, &["DEL", &counter]).await;
}

/// `extend` to a shorter lease moves the server's TTL of a write lock, as RedissonWriteLock's own
/// renewal sets it: the renewal raised a Redisson RW hash's TTL only (right for a reader, whose
/// hash lives as long as its longest holder), so a writer that died after `extend(2s)` kept the
/// lock for the 60 s it had asked for first. A reader's shorter extend moves its own timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_extend_to_a_shorter_lease_moves_the_servers_ttl() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[("redisson_compat", "true")]).await;
    let mut admin = admin(&url).await;
    let name = compat_name("rs-rw-shorter");
    let long = AcquireOptions::new().fixed_lease(Duration::from_secs(60));
    let rw = locks.rwlock(&name).unwrap();
    let w = rw.write(&long).await.unwrap().unwrap();
    assert!(raw::<i64>(&mut admin, &["PTTL", &name]).await > 50_000);
    w.extend(Duration::from_secs(2)).await.unwrap();
    let left = raw::<i64>(&mut admin, &["PTTL", &name]).await;
    assert!(
        (1..=2_000).contains(&left),
        "the write hash lives {left} ms more"
    );
    w.release().await.unwrap();

    let r = rw.read(&long).await.unwrap().unwrap();
    r.extend(Duration::from_secs(2)).await.unwrap();
    let fields: std::collections::HashMap<String, String> =
        raw(&mut admin, &["HGETALL", &name]).await;
    let field = fields.keys().find(|k| *k != "mode").unwrap();
    let timeout = format!("{{{name}}}:{field}:rwlock_timeout:1");
    let left = raw::<i64>(&mut admin, &["PTTL", &timeout]).await;
    assert!(
        (1..=2_000).contains(&left),
        "the read hold lives {left} ms more"
    );
    r.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_rwlock_speaks_redissons_layout_and_messages() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[("redisson_compat", "true")]).await;
    let mut admin = admin(&url).await;
    let name = compat_name("rs-rw");
    let channel = format!("redisson_rwlock:{{{name}}}");
    let rw = locks.rwlock(&name).unwrap();

    // A read hold: mode=read, field <uuid>:<id> -> 1, and its own rwlock_timeout key.
    let r = rw.read_lock().await.unwrap();
    let fields: std::collections::HashMap<String, String> =
        raw(&mut admin, &["HGETALL", &name]).await;
    assert_eq!(fields.get("mode").map(String::as_str), Some("read"));
    let (field, holds) = fields.iter().find(|(k, _)| *k != "mode").unwrap();
    assert_eq!(holds, "1");
    let timeout = format!("{{{name}}}:{field}:rwlock_timeout:1");
    assert!(raw::<i64>(&mut admin, &["PTTL", &timeout]).await > 0);
    // Releasing the last reader deletes both and sends READ_UNLOCK (1).
    let msg = published(&url, &channel, async { r.release().await.unwrap() }).await;
    assert_eq!(msg, "1");
    assert_eq!(
        raw::<i64>(&mut admin, &["EXISTS", &name, &timeout]).await,
        0
    );

    // A write hold: mode=write, field <uuid>:<id>:write.
    let w = rw.write_lock().await.unwrap();
    let fields: std::collections::HashMap<String, String> =
        raw(&mut admin, &["HGETALL", &name]).await;
    assert_eq!(fields.get("mode").map(String::as_str), Some("write"));
    assert!(fields.keys().any(|k| k.ends_with(":write")), "{fields:?}");
    // Downgrade: the same owner's read field replaces the write field.
    let r = w.downgrade().await.unwrap();
    let fields: std::collections::HashMap<String, String> =
        raw(&mut admin, &["HGETALL", &name]).await;
    assert_eq!(fields.get("mode").map(String::as_str), Some("read"));
    assert!(!fields.keys().any(|k| k.ends_with(":write")), "{fields:?}");
    r.release().await.unwrap();

    // A Redisson writer (what RedissonWriteLock's acquire script writes) excludes our readers,
    // and its unlock (delete + publish 1) wakes our waiting reader at once.
    let _: () = raw(
        &mut admin,
        &["HSET", &name, "mode", "write", "java:1:write", "1"],
    )
    .await;
    let _: i64 = raw(&mut admin, &["PEXPIRE", &name, "30000"]).await;
    assert!(rw.try_read().await.unwrap().is_none());
    let rw2 = locks.rwlock(&name).unwrap();
    let waiter = tokio::spawn(async move {
        let g = rw2.read_lock().await.unwrap();
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    let _: i64 = raw(&mut admin, &["DEL", &name]).await;
    let _: i64 = raw(&mut admin, &["PUBLISH", &channel, "1"]).await;
    let (at, g) = waiter.await.unwrap();
    assert!(
        at - released < Duration::from_millis(100),
        "woke after {:?}",
        at - released
    );
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_dead_reader_ends_with_its_lease_even_while_others_read() {
    let Some(url) = shared_url() else { return };
    let name = compat_name("rs-rw-dead");
    let lease = Duration::from_secs(1);
    let mut admin = admin(&url).await;
    // The holder process dies: no release, and its watchdog stops with it.
    let compat = [("redisson_compat", "true")];
    dead_holder(&url, &compat, &name, lockkit_testing::Hold::Read, lease).await;
    // A live Redisson reader keeps the hash alive for 30 s: Redisson alone would keep the dead
    // reader's field (and so every writer out) that long.
    let _: i64 = raw(&mut admin, &["HINCRBY", &name, "java:1", "1"]).await;
    let java_timeout = format!("{{{name}}}:java:1:rwlock_timeout:1");
    let _: () = raw(&mut admin, &["SET", &java_timeout, "1", "PX", "30000"]).await;
    let _: i64 = raw(&mut admin, &["PEXPIRE", &name, "30000"]).await;
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    let locks = connect(&url, &[("redisson_compat", "true")]).await;
    let rw = locks.rwlock(&name).unwrap();
    assert!(
        rw.try_write().await.unwrap().is_none(),
        "the Redisson reader"
    );
    let fields: std::collections::HashMap<String, String> =
        raw(&mut admin, &["HGETALL", &name]).await;
    assert_eq!(fields.len(), 2, "dead reader not removed: {fields:?}");
    // The Redisson reader's unlock frees the lock for our writer.
    let _: i64 = raw(&mut admin, &["DEL", &name, &java_timeout]).await;
    let w = rw
        .try_write()
        .await
        .unwrap()
        .expect("free after the Redisson reader");
    w.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_semaphore_speaks_rsemaphores_count_and_messages() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[("redisson_compat", "true")]).await;
    let mut admin = admin(&url).await;
    let name = compat_name("rs-sem");
    let channel = format!("redisson_sc:{{{name}}}");
    let sem = locks.semaphore(&name, 3).unwrap();
    assert_eq!(sem.available().await.unwrap(), 3);
    // The count starts at the capacity (like trySetPermits) and holds the free permits.
    let p = sem
        .acquire(2, &AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(raw::<String>(&mut admin, &["GET", &name]).await, "1");
    // Our release adds them back and publishes the new count, as RSemaphore.release does.
    let msg = published(&url, &channel, async { p.release().await.unwrap() }).await;
    assert_eq!(msg, "3");
    // Redisson holders (DECRBY on the count) exclude us; their release (INCRBY + publish the
    // count) wakes our waiter at once.
    let _: i64 = raw(&mut admin, &["DECRBY", &name, "3"]).await;
    assert_eq!(sem.available().await.unwrap(), 0);
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    let sem2 = locks.semaphore(&name, 3).unwrap();
    let waiter = tokio::spawn(async move {
        let p = sem2.acquire_one().await.unwrap();
        (Instant::now(), p)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    let free: i64 = raw(&mut admin, &["INCRBY", &name, "1"]).await;
    let _: i64 = raw(&mut admin, &["PUBLISH", &channel, &free.to_string()]).await;
    let (at, p) = waiter.await.unwrap();
    assert!(
        at - released < Duration::from_millis(100),
        "woke after {:?}",
        at - released
    );
    p.release().await.unwrap();
    let _: i64 = raw(&mut admin, &["DEL", &name]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_dead_permit_holder_gives_its_permits_back_within_one_lease() {
    let Some(url) = shared_url() else { return };
    let name = compat_name("rs-sem-dead");
    let lease = Duration::from_secs(1);
    let mut admin = admin(&url).await;
    let compat = [("redisson_compat", "true")];
    let hold = lockkit_testing::Hold::Permits { n: 2, total: 2 };
    dead_holder(&url, &compat, &name, hold, lease).await;
    let locks = connect(&url, &[("redisson_compat", "true")]).await;
    let sem = locks.semaphore(&name, 2).unwrap();
    let started = Instant::now();
    let p = sem
        .acquire(2, &AcquireOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("the dead holder's permits came back");
    assert!(
        started.elapsed() < lease + Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    // The permits went back into Redisson's count exactly once.
    assert_eq!(raw::<String>(&mut admin, &["GET", &name]).await, "0");
    p.release().await.unwrap();
    assert_eq!(raw::<String>(&mut admin, &["GET", &name]).await, "2");
    let _: i64 = raw(&mut admin, &["DEL", &name]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_close_ends_read_holds_and_permits_the_redisson_way() {
    let Some(url) = shared_url() else { return };
    let (name, sem_name) = (compat_name("rs-close-rw"), compat_name("rs-close-sem"));
    let mut admin = admin(&url).await;
    let locks = connect(&url, &[("redisson_compat", "true")]).await;
    let r = locks.rwlock(&name).unwrap().read_lock().await.unwrap();
    let p = locks
        .semaphore(&sem_name, 2)
        .unwrap()
        .acquire_one()
        .await
        .unwrap();
    locks.close().await.unwrap();
    assert_eq!(r.state(), LockState::Lost);
    assert_eq!(p.state(), LockState::Lost);
    // The hash is gone (no `mode`-only leftover), and the permit is back in the count.
    assert_eq!(raw::<i64>(&mut admin, &["EXISTS", &name]).await, 0);
    assert_eq!(raw::<String>(&mut admin, &["GET", &sem_name]).await, "2");
    let _: i64 = raw(&mut admin, &["DEL", &sem_name]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_live_holders_renewal_returns_a_dead_holders_permits() {
    let Some(url) = shared_url() else { return };
    let name = compat_name("rs-sem-renew");
    let lease = AcquireOptions::new().watchdog_lease(Duration::from_secs(1));
    let mut admin = admin(&url).await;
    let compat = [("redisson_compat", "true")];
    let hold = lockkit_testing::Hold::Permits { n: 1, total: 2 };
    dead_holder(&url, &compat, &name, hold, Duration::from_secs(1)).await;
    let locks = connect(&url, &[("redisson_compat", "true")]).await;
    let live = locks.semaphore(&name, 2).unwrap().acquire(1, &lease).await;
    let live = live.unwrap().unwrap();
    assert_eq!(raw::<String>(&mut admin, &["GET", &name]).await, "0");
    // No lockkit acquire from here on: only the live holder's watchdog runs. A Redisson waiter
    // would see the count (and its channel message) come back.
    let started = Instant::now();
    while raw::<String>(&mut admin, &["GET", &name]).await != "1" {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the dead holder's permit did not come back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    live.release().await.unwrap();
    assert_eq!(raw::<String>(&mut admin, &["GET", &name]).await, "2");
    let _: i64 = raw(&mut admin, &["DEL", &name]).await;
}

/// A fair `try_lock` in compat mode never queues (as Redisson's `tryLock()` does not): one
/// script call, no queue entry to take out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_try_lock_never_queues() {
    let server = PrivateRedis::start(&[]);
    let url = server.url();
    let locks = connect(&url, &[("redisson_compat", "true")]).await;
    let mut admin = admin(&url).await;
    let name = lockkit_testing::unique_name("fair-try");
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    let fair = lockkit_core::AcquireOptions::new().fair(true).no_wait();
    let scripts = |info: String| -> u64 {
        info.lines()
            .filter_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .sum()
    };
    let m = locks.mutex(&name).unwrap();
    // Once, so that the server has the script (a first EVALSHA fails and is sent again).
    assert!(m.acquire(&fair).await.unwrap().is_none());
    let before = scripts(raw(&mut admin, &["INFO", "commandstats"]).await);
    assert!(m.acquire(&fair).await.unwrap().is_none());
    let after = scripts(raw(&mut admin, &["INFO", "commandstats"]).await);
    assert_eq!(after - before, 1, "a try queued and left again");
    g.release().await.unwrap();
}

/// Issue 25, item 7: on Redisson's layouts, a fair mutex waiter and a write-lock waiter that
/// read PTTL 0 (the holder's lease ends in this very millisecond) try again at once instead of
/// sleeping a heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compat_waiters_that_read_pttl_0_try_again_at_once() {
    let Some(url) = shared_url() else { return };
    let options = [("redisson_compat", "true"), ("waiter_heartbeat", "60s")];
    let locks = connect(&url, &options).await;
    let names: Vec<String> = (0..8)
        .map(|i| compat_name(&format!("rs-pttl0-{i}")))
        .collect();
    let hold = |i: usize| {
        let fields = if i.is_multiple_of(2) {
            vec![("foreign-client:1".to_string(), "1".to_string())]
        } else {
            vec![
                ("foreign-client:1:write".to_string(), "1".to_string()),
                ("mode".to_string(), "write".to_string()),
            ]
        };
        (names[i].clone(), fields)
    };
    let wait = |i: usize, within: Duration| {
        let (mutex, rw) = (
            locks.mutex(&names[i]).unwrap(),
            locks.rwlock(&names[i]).unwrap(),
        );
        let opts = AcquireOptions::new().wait(within);
        async move {
            if i.is_multiple_of(2) {
                let fair = opts.fair(true);
                mutex.acquire(&fair).await.unwrap().is_some()
            } else {
                rw.write(&opts).await.unwrap().is_some()
            }
        }
    };
    waiters_see_unannounced_ends(&url, names.len(), hold, wait).await;
}
