//! Issue 4, point 3: the semaphore: N permits and acquire(n), leased permits that come back
//! when their holder dies, available(), and pub/sub wake-ups that wake enough waiters for the
//! permits released.

mod common;

lockkit_testing::holder_process!(lockkit_redis::connect);

use std::time::{Duration, Instant};

use common::*;
use lockkit_core::AcquireOptions;
use lockkit_testing::unique_name;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_of_k_permits_wakes_waiters_for_k_permits() {
    let Some(url) = shared_url() else { return };
    let name = unique_name("sem-wake");
    let holder = connect(&url, &[]).await;
    let all = holder
        .semaphore(&name, 3)
        .unwrap()
        .acquire(3, &AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    let mut tasks = Vec::new();
    // Three clients with one waiter each and one client with two: remote and local wake-ups.
    for _ in 0..3 {
        let locks = connect(&url, &[]).await;
        let s = locks.semaphore(&name, 3).unwrap();
        tasks.push(tokio::spawn(async move {
            let p = s.acquire_one().await.unwrap();
            (Instant::now(), p, Some(locks))
        }));
    }
    let shared = connect(&url, &[]).await;
    for _ in 0..2 {
        let s = shared.semaphore(&name, 3).unwrap();
        tasks.push(tokio::spawn(async move {
            let p = s.acquire_one().await.unwrap();
            (Instant::now(), p, None)
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let released = Instant::now();
    all.release().await.unwrap(); // 3 permits back; 5 waiters; the 30 s lease is far away
    let mut woke = Vec::new();
    let mut permits = Vec::new();
    let deadline = tokio::time::sleep(Duration::from_secs(2));
    tokio::pin!(deadline);
    let mut pending: futures::stream::FuturesUnordered<_> = tasks.into_iter().collect();
    use futures::StreamExt;
    loop {
        tokio::select! {
            Some(r) = pending.next() => {
                let (at, p, client) = r.unwrap();
                woke.push(at - released);
                permits.push((p, client));
            }
            _ = &mut deadline => break,
        }
        if permits.len() == 3 {
            break;
        }
    }
    assert_eq!(
        permits.len(),
        3,
        "3 released permits must wake 3 waiters (got {woke:?})"
    );
    assert!(
        woke.iter().all(|d| *d < Duration::from_millis(1000)),
        "{woke:?}"
    );
    for (p, _client) in permits {
        p.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_holders_permits_come_back_within_one_lease() {
    let Some(url) = shared_url() else { return };
    let name = unique_name("sem-dead");
    let lease = Duration::from_secs(1);
    // The holder process dies: no release, and its watchdog stops with it.
    let hold = lockkit_testing::Hold::Permits { n: 2, total: 2 };
    dead_holder(&url, &[], &name, hold, lease).await;
    let locks = connect(&url, &[]).await;
    let s = locks.semaphore(&name, 2).unwrap();
    assert_eq!(s.available().await.unwrap(), 0);
    let started = Instant::now();
    let p = s
        .acquire(2, &AcquireOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("permits came back");
    assert!(
        started.elapsed() < lease + Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(s.available().await.unwrap(), 0);
    p.release().await.unwrap();
    assert_eq!(s.available().await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_permits_and_tokens_increase() {
    let Some(url) = shared_url() else { return };
    let name = unique_name("sem-renew");
    let locks = connect(&url, &[]).await;
    let s = locks.semaphore(&name, 2).unwrap();
    let opts = AcquireOptions::new().watchdog_lease(Duration::from_secs(1));
    let p1 = s.acquire(1, &opts).await.unwrap().unwrap();
    let p2 = s.acquire(1, &opts).await.unwrap().unwrap();
    assert!(p2.token() > p1.token());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(s.available().await.unwrap(), 0, "renewed permits expired");
    assert!(s.try_acquire(1).await.unwrap().is_none());
    p1.release().await.unwrap();
    p2.release().await.unwrap();
}

/// A semaphore's size lives in `<prefix>:sem-size:{name}`: a foreign key there (a hash, or a
/// string that is no number) is a typed `WrongType` error for every call that reads it,
/// nothing is taken, and the key is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_size_key_is_refused_typed_and_kept() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let locks = connect(&url, &[]).await;
    for foreign in ["hash", "text"] {
        let name = unique_name("sem-foreign-size");
        let k = lockkit_redis::LockKeys::semaphore("lockkit", &name);
        let size = k.size.clone().unwrap();
        let cmd = if foreign == "hash" {
            redis::cmd("HSET").arg(&size).arg("f").arg("v").clone()
        } else {
            redis::cmd("SET").arg(&size).arg("precious").clone()
        };
        let _: () = cmd.query_async(&mut admin).await.unwrap();
        lockkit_testing::cases::foreign_size_is_refused(&locks, &name).await;
        let held: i64 = redis::cmd("EXISTS")
            .arg(&k.holders)
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(held, 0, "{foreign}: a permit taken");
        let kind: String = redis::cmd("TYPE")
            .arg(&size)
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(kind, if foreign == "hash" { "hash" } else { "string" });
        let _: () = redis::cmd("DEL")
            .arg(&size)
            .query_async(&mut admin)
            .await
            .unwrap();
    }
}

/// A release wakes one waiter of each client. One that still does not fit passes the wake on
/// to the client's next waiter, which may: that one used to sleep until its heartbeat, the
/// permit free all along. A wake that went round every waiter stops (no ping-pong between two
/// waiters that both do not fit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_a_waiter_cannot_use_goes_to_the_next_waiter() {
    let server = PrivateRedis::start(&[]);
    let url = server.url();
    let name = unique_name("sem-pass-on");
    let (y, z) = (connect(&url, &[]).await, connect(&url, &[]).await);
    let x = connect(&url, &[("waiter_heartbeat", "10s")]).await;
    let one = |locks: &lockkit_core::Locks| {
        let s = locks.semaphore(&name, 2).unwrap();
        async move { s.acquire(1, &AcquireOptions::new()).await.unwrap().unwrap() }
    };
    let (py, pz) = (one(&y).await, one(&z).await);
    let wait = AcquireOptions::new().wait(Duration::from_secs(30));
    let (big, small) = (
        x.semaphore(&name, 2).unwrap(),
        x.semaphore(&name, 2).unwrap(),
    );
    let (w1, w2) = (wait, wait);
    let two = tokio::spawn(async move { big.acquire(2, &w1).await.unwrap().map(drop) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let single = tokio::spawn(async move {
        let p = small.acquire(1, &w2).await.unwrap().unwrap();
        (Instant::now(), p)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    py.release().await.unwrap();
    let (got, p) = tokio::time::timeout(Duration::from_secs(20), single)
        .await
        .unwrap()
        .unwrap();
    let took = got - released;
    assert!(
        took < Duration::from_secs(3),
        "the 1-permit waiter got the free permit {took:?} after the release (heartbeat 10 s)"
    );

    // Two waiters for 2 permits, one free after this release: the wake goes round once.
    let other = x.semaphore(&name, 2).unwrap();
    let w3 = wait;
    let two_more = tokio::spawn(async move { other.acquire(2, &w3).await.unwrap().map(drop) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut admin = admin(&url).await;
    let scripts = ["evalsha", "eval"];
    let before = command_calls(&mut admin, &scripts).await;
    p.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ran = command_calls(&mut admin, &scripts).await - before;
    assert!(
        ran < 20,
        "{ran} scripts for one release and two waiters that do not fit"
    );
    assert!(!two.is_finished() && !two_more.is_finished());
    two.abort();
    two_more.abort();
    pz.release().await.unwrap();
    for l in [x, y, z] {
        l.close().await.unwrap();
    }
}
