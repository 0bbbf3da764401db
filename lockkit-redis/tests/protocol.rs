//! Issue 17, Redis: the protocol bugs found in review, each on a real server.
//!
//! - an acquire resent after a dropped connection (redis-rs does so in cluster mode) takes its
//!   own hold up again and never queues behind itself: the mutex, the read-write lock and the
//!   semaphore, native and on Redisson's layouts, one hold, share or set of permits each, and a
//!   multi-lock's one-step take; a resent reentry counts one hold;
//! - a hand-off lasts the waiter's own grant, whatever the releaser's settings;
//! - the end of a fixed lease and `close()` hand a held lock to the next waiter;
//! - a release on a just-demoted primary, or one an ACL refuses a command inside the script,
//!   fails (and is retried) instead of reading "not ours";
//! - a shared lock's unlock latch follows the command timeout, as the mutex's does (on
//!   Redisson's layouts too: issue 25, item 11).

mod common;

use std::time::{Duration, Instant};

use common::*;
use lockkit_core::{AcquireOptions, LockState, Primitive};
use lockkit_redis::LockKeys;
use lockkit_testing::unique_name;

async fn raw_try_acquire(
    admin: &mut redis::aio::MultiplexedConnection,
    k: &LockKeys,
    owner: &str,
) -> (i64, i64) {
    redis::Script::new(lockkit_redis::scripts::TRY_ACQUIRE)
        .key(&k.lock)
        .key(&k.fence)
        .arg(owner)
        .arg(30_000)
        .arg(3_600_000)
        .invoke_async(admin)
        .await
        .unwrap()
}

/// The first attempt of a waiting acquire (`'1'`: queue when busy).
async fn raw_queue(
    admin: &mut redis::aio::MultiplexedConnection,
    k: &LockKeys,
    owner: &str,
    heartbeat_timeout_ms: u64,
) -> (i64, i64) {
    redis::Script::new(lockkit_redis::scripts::ACQUIRE)
        .key(&k.lock)
        .key(&k.fence)
        .key(&k.queue)
        .key(&k.waiters)
        .arg(owner)
        .arg(30_000)
        .arg(3_600_000)
        .arg("1")
        .arg(heartbeat_timeout_ms)
        .invoke_async(admin)
        .await
        .unwrap()
}

async fn hold_count(
    admin: &mut redis::aio::MultiplexedConnection,
    k: &LockKeys,
    owner: &str,
) -> i64 {
    redis::cmd("HGET")
        .arg(&k.lock)
        .arg(owner)
        .query_async::<Option<i64>>(admin)
        .await
        .unwrap()
        .unwrap_or(0)
}

async fn queue(admin: &mut redis::aio::MultiplexedConnection, k: &LockKeys) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(&k.queue)
        .arg(0)
        .arg(-1)
        .query_async(admin)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_resent_try_lock_takes_its_own_hold_up_again() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let name = unique_name("resend-try");
    let k = LockKeys::mutex("lockkit", &name);
    let owner = "resend-client:1";
    let (took, first) = raw_try_acquire(&mut admin, &k, owner).await;
    assert_eq!(took, 1);
    // The reply was lost; redis-rs sends the same script again.
    let (took, second) = raw_try_acquire(&mut admin, &k, owner).await;
    assert_eq!(took, 1, "a resent try_lock reported its own hold as busy");
    assert!(second > first, "tokens {first} then {second}");
    assert_eq!(
        hold_count(&mut admin, &k, owner).await,
        1,
        "one hold, not two"
    );
    del(&mut admin, &k.lock).await;
}

/// A multi-lock's one-step take of `keys` for `owner`: `[1, tokens…]` or `[0, busy member]`.
async fn raw_take_all(
    admin: &mut redis::aio::MultiplexedConnection,
    keys: &[LockKeys],
    owner: &str,
) -> Vec<i64> {
    let script = redis::Script::new(lockkit_redis::scripts::TAKE_ALL);
    let mut inv = script.prepare_invoke();
    for k in keys {
        inv.key(&k.lock).key(&k.fence);
    }
    inv.arg(owner).arg(30_000).arg(3_600_000);
    inv.invoke_async(admin).await.unwrap()
}

/// A multi-lock's one-step take (issue 29) resent after its first run took the set takes its
/// own holds up again, with new tokens, and never answers busy to itself.
#[tokio::test]
async fn a_resent_take_of_a_set_takes_its_own_holds_up_again() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let keys: Vec<LockKeys> = (0..3)
        .map(|i| LockKeys::mutex("lockkit", &unique_name(&format!("resend-set-{i}"))))
        .collect();
    let owner = "resend-client:9";
    let first = raw_take_all(&mut admin, &keys, owner).await;
    assert_eq!(first[0], 1);
    // The reply was lost; redis-rs sends the same script again.
    let second = raw_take_all(&mut admin, &keys, owner).await;
    assert_eq!(second[0], 1, "a resent take reported its own holds as busy");
    for (i, k) in keys.iter().enumerate() {
        assert!(
            second[i + 1] > first[i + 1],
            "tokens {first:?} then {second:?}"
        );
        assert_eq!(
            hold_count(&mut admin, k, owner).await,
            1,
            "one hold, not two"
        );
    }
    // Another owner finds the set busy at its first member, and takes nothing.
    let busy = raw_take_all(&mut admin, &keys, "someone-else:1").await;
    assert_eq!(busy, vec![0, 1]);
    for k in &keys {
        assert_eq!(hold_count(&mut admin, k, "someone-else:1").await, 0);
    }
    // The second member changes hands before a third run of ours (its answer lost again):
    // that run finds the set busy and gives back the holds the earlier runs took.
    del(&mut admin, &keys[1].lock).await;
    let theirs = raw_take_all(&mut admin, &keys[1..2], "someone-else:2").await;
    assert_eq!(theirs[0], 1);
    let third = raw_take_all(&mut admin, &keys, owner).await;
    assert_eq!(third, vec![0, 2]);
    for k in &keys {
        assert_eq!(
            hold_count(&mut admin, k, owner).await,
            0,
            "a hold of ours was left"
        );
        del(&mut admin, &k.lock).await;
    }
}

#[tokio::test]
async fn a_resent_queued_attempt_never_queues_behind_itself() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let mut admin = admin(&url).await;
    let name = unique_name("resend-queue");
    let k = LockKeys::mutex("lockkit", &name);
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    let owner = "resend-client:2";
    assert_eq!(raw_queue(&mut admin, &k, owner, 10_000).await.0, 0);
    assert_eq!(raw_queue(&mut admin, &k, owner, 10_000).await.0, 0);
    assert_eq!(queue(&mut admin, &k).await, vec![owner.to_string()]);
    // The resent owner's attempt that took the lock (a hand-off) is taken up, not refused.
    g.release().await.unwrap();
    assert_eq!(
        hold_count(&mut admin, &k, owner).await,
        1,
        "handed to the waiter"
    );
    assert_eq!(raw_queue(&mut admin, &k, owner, 10_000).await.0, 1);
    assert!(queue(&mut admin, &k).await.is_empty());
    del(&mut admin, &k.lock).await;
}

async fn del(admin: &mut redis::aio::MultiplexedConnection, key: &str) {
    let _: () = redis::cmd("DEL").arg(key).query_async(admin).await.unwrap();
}

async fn pttl(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_hand_off_expires_after_the_waiters_grant() {
    let Some(url) = shared_url() else { return };
    // The releaser's waiters would get 0.9 s hand-offs; this waiter asked for 15 s.
    let releaser = connect(&url, &[("waiter_heartbeat", "300ms")]).await;
    let mut admin = admin(&url).await;
    let name = unique_name("grant-raw");
    let k = LockKeys::mutex("lockkit", &name);
    let held = releaser.mutex(&name).unwrap().lock().await.unwrap();
    let owner = "grant-client:1";
    assert_eq!(raw_queue(&mut admin, &k, owner, 15_000).await.0, 0);
    held.release().await.unwrap();
    assert_eq!(
        hold_count(&mut admin, &k, owner).await,
        1,
        "handed to the waiter"
    );
    let left = pttl(&mut admin, &k.lock).await;
    assert!(
        left > 10_000,
        "the hand-off lasts {left} ms, the releaser's grant"
    );
    del(&mut admin, &k.lock).await;
}

#[tokio::test]
async fn a_fixed_lease_that_ends_hands_the_lock_to_the_next_waiter() {
    let Some(url) = shared_url() else { return };
    let holder = connect(&url, &[]).await;
    let mut admin = admin(&url).await;
    let name = unique_name("expiry-handoff");
    let k = LockKeys::mutex("lockkit", &name);
    let g = holder
        .mutex(&name)
        .unwrap()
        .acquire(&AcquireOptions::new().fixed_lease(Duration::from_millis(500)))
        .await
        .unwrap()
        .unwrap();
    // A waiter that only listens: it is the owner only if the lease's end handed it the lock.
    let owner = "expiry-client:1";
    assert_eq!(raw_queue(&mut admin, &k, owner, 15_000).await.0, 0);
    g.lost().await;
    let mut handed = false;
    for _ in 0..50 {
        if hold_count(&mut admin, &k, owner).await == 1 {
            handed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        handed,
        "the lease's end left the lock to expire, not to the waiter"
    );
    del(&mut admin, &k.lock).await;
}

#[tokio::test]
async fn a_hand_off_lasts_the_waiters_grant_not_the_releasers() {
    let Some(url) = shared_url() else { return };
    // The releaser beats fast (its waiters' hand-offs would last 0.9 s), the waiter slowly (its
    // guard counts on a 15 s hand-off until its watchdog renews it).
    let releaser = connect(&url, &[("waiter_heartbeat", "300ms")]).await;
    let waiter = connect(&url, &[("waiter_heartbeat", "5s")]).await;
    let third = connect(&url, &[]).await;
    let name = unique_name("grant");
    let held = releaser.mutex(&name).unwrap().lock().await.unwrap();
    let waiting = {
        let m = waiter.mutex(&name).unwrap();
        tokio::spawn(async move { m.lock().await })
    };
    let k = LockKeys::mutex("lockkit", &name);
    let mut admin = admin(&url).await;
    while queue(&mut admin, &k).await.is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held.release().await.unwrap();
    let g = waiting.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(g.state(), LockState::Held);
    assert!(
        third
            .mutex(&name)
            .unwrap()
            .try_lock()
            .await
            .unwrap()
            .is_none(),
        "another client took the lock while the waiter's guard read Held"
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn close_hands_a_held_lock_to_the_next_waiter() {
    let Some(url) = shared_url() else { return };
    let holder = connect(&url, &[]).await;
    // A slow heartbeat: without a hand-off, the waiter would look again only 5 s later.
    let waiter = connect(&url, &[("waiter_heartbeat", "5s")]).await;
    let name = unique_name("close-handoff");
    let _held = holder.mutex(&name).unwrap().lock().await.unwrap();
    let k = LockKeys::mutex("lockkit", &name);
    let mut admin = admin(&url).await;
    let waiting = {
        let m = waiter.mutex(&name).unwrap();
        tokio::spawn(async move { m.lock().await })
    };
    while queue(&mut admin, &k).await.is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let closed = Instant::now();
    holder.close().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("the waiter was not handed the lock by close()")
        .unwrap()
        .unwrap();
    assert!(closed.elapsed() < Duration::from_secs(2));
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_on_a_demoted_primary_is_retried_not_read_as_not_ours() {
    let server = PrivateRedis::start(&[]);
    let url = server.url();
    let holder = connect(&url, &[("command_timeout", "500ms")]).await;
    let other = connect(&url, &[]).await;
    let mut admin = admin(&url).await;
    let name = unique_name("readonly");
    let g = holder.mutex(&name).unwrap().lock().await.unwrap();
    // Demoted: a replica of a primary that is not there keeps its data and refuses writes.
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(free_port())
        .query_async(&mut admin)
        .await
        .unwrap();
    let err = g
        .release()
        .await
        .expect_err("a release on a replica cannot succeed");
    assert_ne!(
        err.kind(),
        lockkit_core::ErrorKind::LockLost,
        "READONLY was read as 'not ours': {err}"
    );
    // Promoted again: the retried release frees the lock long before its 30 s lease ends.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut admin)
        .await
        .unwrap();
    let started = Instant::now();
    let g2 = other
        .mutex(&name)
        .unwrap()
        .acquire(&AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the release was never retried");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        other
            .inspect(&name, Primitive::Mutex)
            .await
            .unwrap()
            .holders
            .len()
            == 1
    );
    g2.release().await.unwrap();
}

#[tokio::test]
async fn a_shared_unlock_latch_follows_the_command_timeout() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[("command_timeout", "4s")]).await;
    let mut admin = admin(&url).await;
    let name = unique_name("latch");
    let read = locks.rwlock(&name).unwrap().read_lock().await.unwrap();
    read.release().await.unwrap();
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("*{name}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut admin)
            .await
            .unwrap();
        keys.extend(found);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let latch = keys
        .iter()
        .find(|k| k.contains("unlock"))
        .unwrap_or_else(|| panic!("no unlock latch among {keys:?}"));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(latch)
        .query_async(&mut admin)
        .await
        .unwrap();
    // 4 retries of a 4 s command, twice over: 32 s, not a fixed 20 s.
    assert!(pttl > 25_000, "latch TTL {pttl} ms");
}

/// The remaining TTLs of the unlock latches under `prefix` (`LockKeys::unlock`).
async fn latch_pttls(admin: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Vec<i64> {
    let latches: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(admin)
        .await
        .unwrap();
    let mut ttls = Vec::new();
    for latch in latches {
        ttls.push(pttl(admin, &latch).await);
    }
    ttls
}

/// Issue 25, item 11: on Redisson's layouts too, the read-write lock's and the semaphore's
/// unlock latches live as long as the mutex's, which follows the command timeout (a release is
/// retried for up to 4 commands of 4 s), not a fixed 20 s that a retried release can outlive.
#[tokio::test]
async fn a_redisson_unlock_latch_follows_the_command_timeout() {
    let Some(url) = shared_url() else { return };
    let compat = [("redisson_compat", "true"), ("command_timeout", "4s")];
    let locks = connect(&url, &compat).await;
    let mut admin = admin(&url).await;
    let name = compat_name("latch");
    let mutex = locks.mutex(&name).unwrap();
    mutex.lock().await.unwrap().release().await.unwrap();
    let mutex_keys = LockKeys::redisson_mutex(&name).unwrap();
    let [mutex_latch] = latch_pttls(&mut admin, &mutex_keys.unlock).await[..] else {
        panic!("not one mutex latch");
    };
    assert!(mutex_latch > 25_000, "mutex latch TTL {mutex_latch} ms");
    let rw = locks.rwlock(&name).unwrap();
    rw.write_lock().await.unwrap().release().await.unwrap();
    rw.read_lock().await.unwrap().release().await.unwrap();
    let sem_name = compat_name("latch-sem");
    let sem = locks.semaphore(&sem_name, 2).unwrap();
    sem.acquire_one().await.unwrap().release().await.unwrap();
    let rw_keys = LockKeys::redisson_rwlock(&name).unwrap();
    let sem_keys = LockKeys::redisson_semaphore(&sem_name).unwrap();
    let latches = [
        (
            "read-write lock",
            latch_pttls(&mut admin, &rw_keys.unlock).await,
        ),
        ("semaphore", latch_pttls(&mut admin, &sem_keys.unlock).await),
    ];
    for (what, ttls) in latches {
        assert!(!ttls.is_empty(), "no {what} latch");
        for ttl in ttls {
            // The same TTL, give or take the round trips between the reads (the mutex's was
            // read before these were set, so these may read a little more).
            assert!(
                (mutex_latch - 2_000..=mutex_latch + 2_000).contains(&ttl),
                "{what} latch TTL {ttl} ms, the mutex's {mutex_latch} ms"
            );
        }
    }
}

#[tokio::test]
async fn a_resent_first_attempt_that_takes_a_free_lock_leaves_the_queue() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let name = unique_name("resend-free");
    let k = LockKeys::mutex("lockkit", &name);
    let owner = "resend-client:3";
    // Someone holds it: the first run of our first attempt queues us.
    let _: () = redis::cmd("HSET")
        .arg(&k.lock)
        .arg("someone:1")
        .arg(1)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(raw_queue(&mut admin, &k, owner, 10_000).await.0, 0);
    // The holder's lease ends (no hand-off); the resent first attempt finds the lock free.
    del(&mut admin, &k.lock).await;
    assert_eq!(raw_queue(&mut admin, &k, owner, 10_000).await.0, 1);
    assert!(
        queue(&mut admin, &k).await.is_empty(),
        "our entry stayed, to be handed the lock again"
    );
    del(&mut admin, &k.lock).await;
}

/// Runs `script` (one of `lockkit_redis::scripts`) once, as the client sends it.
async fn run<T: redis::FromRedisValue>(
    admin: &mut redis::aio::MultiplexedConnection,
    script: &str,
    keys: &[&str],
    args: &[&str],
) -> T {
    let script = redis::Script::new(script);
    let mut inv = script.prepare_invoke();
    for k in keys {
        inv.key(*k);
    }
    for a in args {
        inv.arg(*a);
    }
    inv.invoke_async(admin).await.unwrap()
}

/// The native write acquire of `owner`, as `Core::acquire` sends it on every attempt.
async fn raw_write(
    admin: &mut redis::aio::MultiplexedConnection,
    k: &LockKeys,
    owner: &str,
) -> (i64, i64) {
    let keys = [&*k.lock, &k.holders, &k.waiters, &k.fence];
    let args = [owner, "30000", "3600000", "3000"];
    run(admin, lockkit_redis::scripts::RW_WRITE, &keys, &args).await
}

/// The native shared acquire of `member` (a read lock, or `<owner>|<n>` of a semaphore).
async fn raw_lease(
    admin: &mut redis::aio::MultiplexedConnection,
    k: &LockKeys,
    member: &str,
    permits: u32,
    capacity: u32,
) -> (i64, i64) {
    let size = k.size.as_deref().unwrap_or(&k.holders);
    let keys = [&*k.lock, &k.holders, &k.waiters, &k.fence, size];
    let (permits, capacity) = (permits.to_string(), capacity.to_string());
    let args = [member, "30000", "3600000", &permits, &capacity];
    run(admin, lockkit_redis::scripts::LEASE_SET, &keys, &args).await
}

/// The native release of `member` (`w` write, `s` shared).
async fn raw_shared_release(
    admin: &mut redis::aio::MultiplexedConnection,
    k: &LockKeys,
    member: &str,
    mode: &str,
) -> i64 {
    let latch = k.unlock_latch(member);
    let keys = [&*k.lock, &k.holders, &latch, &k.waiters];
    let args = [member, &k.channel, "20000", mode];
    run(admin, lockkit_redis::scripts::SHARED_RELEASE, &keys, &args).await
}

/// An acquire on Redisson's `RReadWriteLock` layout: `r` read, `w` write.
async fn raw_rs_rw(
    admin: &mut redis::aio::MultiplexedConnection,
    k: &LockKeys,
    field: &str,
    mode: &str,
) -> (i64, i64) {
    let keys = [&*k.lock, &k.waiters, &k.fence];
    let args = [
        field, "30000", "3600000", mode, "3000", &k.holders, &k.channel,
    ];
    run(admin, lockkit_redis::scripts::RS_RW_ACQUIRE, &keys, &args).await
}

/// A release on Redisson's `RReadWriteLock` layout: `w` write, `s` read.
async fn raw_rs_rw_release(
    admin: &mut redis::aio::MultiplexedConnection,
    k: &LockKeys,
    field: &str,
    mode: &str,
) -> i64 {
    let latch = k.unlock_latch(field);
    let keys = [&*k.lock, &latch, &k.waiters];
    let args = [field, &k.channel, "20000", mode, &k.holders];
    run(admin, lockkit_redis::scripts::RS_RW_RELEASE, &keys, &args).await
}

async fn zcard(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap()
}

async fn hgetall(
    admin: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> std::collections::BTreeMap<String, String> {
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap()
}

async fn exists(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(admin)
        .await
        .unwrap()
        == 1
}

fn compat_name(case: &str) -> String {
    unique_name(case).replace('/', "-")
}

#[tokio::test]
async fn a_resent_write_lock_takes_its_own_hold_up_again() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let name = unique_name("resend-write");
    let k = LockKeys::rwlock("lockkit", &name);
    let owner = "resend-client:4";
    let (took, first) = raw_write(&mut admin, &k, owner).await;
    assert_eq!(took, 1);
    // The reply was lost; redis-rs sends the same script again.
    let (took, second) = raw_write(&mut admin, &k, owner).await;
    assert_eq!(took, 1, "a resent write lock reported its own hold as busy");
    assert!(second > first, "tokens {first} then {second}");
    assert_eq!(hold_count(&mut admin, &k, owner).await, 1);
    assert_eq!(
        zcard(&mut admin, &k.waiters).await,
        0,
        "a writer intent left"
    );
    assert_eq!(raw_shared_release(&mut admin, &k, owner, "w").await, 1);
    let other = connect(&url, &[]).await;
    let w = other.rwlock(&name).unwrap().try_write().await.unwrap();
    w.expect("the released write lock is still taken")
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_resent_read_lock_is_not_kept_out_by_a_writer_that_came_after_it() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let name = unique_name("resend-read");
    let k = LockKeys::rwlock("lockkit", &name);
    let owner = "resend-client:5";
    let (took, first) = raw_lease(&mut admin, &k, owner, 1, 0).await;
    assert_eq!(took, 1);
    // A writer arrives before the resend and registers its intent behind our read hold.
    assert_eq!(raw_write(&mut admin, &k, "writer-client:1").await.0, 0);
    let (took, second) = raw_lease(&mut admin, &k, owner, 1, 0).await;
    assert_eq!(took, 1, "a resent read lock reported its own hold as busy");
    assert!(second > first, "tokens {first} then {second}");
    assert_eq!(zcard(&mut admin, &k.holders).await, 1);
    assert_eq!(raw_shared_release(&mut admin, &k, owner, "s").await, 1);
    // Once we are gone, the waiting writer gets in.
    assert_eq!(raw_write(&mut admin, &k, "writer-client:1").await.0, 1);
    assert_eq!(
        raw_shared_release(&mut admin, &k, "writer-client:1", "w").await,
        1
    );
}

#[tokio::test]
async fn a_resent_semaphore_acquire_near_capacity_takes_its_own_permits_up_again() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let name = unique_name("resend-sem");
    let k = LockKeys::semaphore("lockkit", &name);
    let member = "resend-client:6|2";
    let (took, first) = raw_lease(&mut admin, &k, member, 2, 2).await;
    assert_eq!(took, 1);
    let (took, second) = raw_lease(&mut admin, &k, member, 2, 2).await;
    assert_eq!(took, 1, "a resent acquire counted its own permits as used");
    assert!(second > first, "tokens {first} then {second}");
    assert_eq!(zcard(&mut admin, &k.holders).await, 1);
    // An operator changed the size in between: the resent acquire still takes up the permits
    // its first run took (a refusal would leave them to their lease, with no guard).
    let size = k.size.clone().unwrap();
    let _: () = redis::cmd("SET")
        .arg(&size)
        .arg(3)
        .query_async(&mut admin)
        .await
        .unwrap();
    let (took, third) = raw_lease(&mut admin, &k, member, 2, 2).await;
    assert_eq!(
        (took, third > second),
        (1, true),
        "a resend refused by a new size"
    );
    let _: () = redis::cmd("SET")
        .arg(&size)
        .arg(2)
        .query_async(&mut admin)
        .await
        .unwrap();
    let other = connect(&url, &[]).await;
    let sem = other.semaphore(&name, 2).unwrap();
    assert_eq!(sem.available().await.unwrap(), 0);
    assert_eq!(raw_shared_release(&mut admin, &k, member, "s").await, 1);
    let p = sem.try_acquire(2).await.unwrap();
    p.expect("the released permits are still taken")
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_resent_redisson_write_lock_takes_its_own_hold_up_again() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let name = compat_name("resend-rs-write");
    let k = LockKeys::redisson_rwlock(&name).unwrap();
    let field = "resend-client:7:write";
    let (took, first) = raw_rs_rw(&mut admin, &k, field, "w").await;
    assert_eq!(took, 1);
    let (took, second) = raw_rs_rw(&mut admin, &k, field, "w").await;
    assert_eq!(took, 1, "a resent write lock reported its own hold as busy");
    assert!(second > first, "tokens {first} then {second}");
    // What Redisson reads: one write hold of ours.
    let hash = hgetall(&mut admin, &k.lock).await;
    assert_eq!(hash.get("mode").map(String::as_str), Some("write"));
    assert_eq!(hash.get(field).map(String::as_str), Some("1"), "{hash:?}");
    assert_eq!(hash.len(), 2, "{hash:?}");
    assert_eq!(
        zcard(&mut admin, &k.waiters).await,
        0,
        "a writer intent left"
    );
    assert_eq!(raw_rs_rw_release(&mut admin, &k, field, "w").await, 1);
    assert!(!exists(&mut admin, &k.lock).await);
    let other = connect(&url, &[("redisson_compat", "true")]).await;
    let w = other.rwlock(&name).unwrap().try_write().await.unwrap();
    w.expect("the released write lock is still taken")
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_resent_redisson_read_lock_counts_one_hold() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let name = compat_name("resend-rs-read");
    let k = LockKeys::redisson_rwlock(&name).unwrap();
    let field = "resend-client:8";
    let (took, first) = raw_rs_rw(&mut admin, &k, field, "r").await;
    assert_eq!(took, 1);
    let (took, second) = raw_rs_rw(&mut admin, &k, field, "r").await;
    assert_eq!(took, 1);
    assert!(second > first, "tokens {first} then {second}");
    // What Redisson reads: one read hold, with its one rwlock_timeout key.
    let hash = hgetall(&mut admin, &k.lock).await;
    assert_eq!(hash.get(field).map(String::as_str), Some("1"), "{hash:?}");
    let timeout = |n: u32| format!("{}:{field}:rwlock_timeout:{n}", k.holders);
    assert!(exists(&mut admin, &timeout(1)).await);
    assert!(!exists(&mut admin, &timeout(2)).await, "a second read hold");
    assert_eq!(raw_rs_rw_release(&mut admin, &k, field, "s").await, 1);
    assert!(
        !exists(&mut admin, &k.lock).await,
        "the read lock outlived its only holder"
    );
    assert!(!exists(&mut admin, &timeout(1)).await);
    let other = connect(&url, &[("redisson_compat", "true")]).await;
    let w = other.rwlock(&name).unwrap().try_write().await.unwrap();
    w.expect("the released read lock still keeps writers out")
        .release()
        .await
        .unwrap();
}

/// A permit acquire on Redisson's `RSemaphore` layout.
async fn raw_rs_sem(
    admin: &mut redis::aio::MultiplexedConnection,
    k: &LockKeys,
    member: &str,
    permits: u32,
    capacity: u32,
) -> (i64, i64) {
    let keys = [&*k.lock, &k.holders, &k.fence];
    let (permits, capacity) = (permits.to_string(), capacity.to_string());
    let args = [member, "30000", "3600000", &permits, &capacity, &k.channel];
    run(admin, lockkit_redis::scripts::RS_SEM_ACQUIRE, &keys, &args).await
}

async fn get_i64(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("GET").arg(key).query_async(admin).await.unwrap()
}

#[tokio::test]
async fn a_resent_redisson_semaphore_acquire_takes_its_permits_once() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let name = compat_name("resend-rs-sem");
    let k = LockKeys::redisson_semaphore(&name).unwrap();
    let member = "resend-client:9|2";
    let (took, first) = raw_rs_sem(&mut admin, &k, member, 2, 3).await;
    assert_eq!(took, 1);
    let (took, second) = raw_rs_sem(&mut admin, &k, member, 2, 3).await;
    assert_eq!(took, 1);
    assert!(second > first, "tokens {first} then {second}");
    // Redisson's count: 3 permits, 2 of them ours, taken once.
    assert_eq!(
        get_i64(&mut admin, &k.lock).await,
        1,
        "the resend took the permits twice"
    );
    assert_eq!(zcard(&mut admin, &k.holders).await, 1);
    let latch = k.unlock_latch(member);
    let keys = [&*k.lock, &k.holders, &latch];
    let args = [member, &k.channel, "20000"];
    let released: i64 = run(
        &mut admin,
        lockkit_redis::scripts::RS_SEM_RELEASE,
        &keys,
        &args,
    )
    .await;
    assert_eq!(released, 1);
    assert_eq!(
        get_i64(&mut admin, &k.lock).await,
        3,
        "permits lost for good"
    );
    let other = connect(&url, &[("redisson_compat", "true")]).await;
    let p = other
        .semaphore(&name, 3)
        .unwrap()
        .try_acquire(3)
        .await
        .unwrap();
    p.expect("permits lost for good").release().await.unwrap();
}

#[tokio::test]
async fn a_resent_reentry_counts_one_hold() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let name = unique_name("resend-reenter");
    let k = LockKeys::mutex("lockkit", &name);
    let owner = "resend-client:10";
    assert_eq!(raw_try_acquire(&mut admin, &k, owner).await.0, 1);
    // The guard's first reentry makes 2 holds; it is sent twice.
    for _ in 0..2 {
        let holds: i64 = run(
            &mut admin,
            lockkit_redis::scripts::REENTER,
            &[&k.lock],
            &[owner, "2"],
        )
        .await;
        assert_eq!(holds, 2);
    }
    assert_eq!(
        hold_count(&mut admin, &k, owner).await,
        2,
        "one reentry counted twice"
    );
    let latch = k.unlock_latch(owner);
    let keys = [&*k.lock, &latch, &k.fence, &k.queue, &k.waiters];
    let released: i64 = run(
        &mut admin,
        lockkit_redis::scripts::RELEASE,
        &keys,
        &[owner, "20000", "3600000"],
    )
    .await;
    assert_eq!(released, 1);
    let other = connect(&url, &[]).await;
    let m = other.mutex(&name).unwrap();
    let g = m
        .try_lock()
        .await
        .unwrap()
        .expect("the released lock is still taken");
    // The guard sends the count each reentry makes: 2, then 3.
    let again = g.reenter().await.unwrap();
    let third = again.reenter().await.unwrap();
    let fields = hgetall(&mut admin, &k.lock).await;
    assert_eq!(fields.values().collect::<Vec<_>>(), ["3"], "{fields:?}");
    third.release().await.unwrap();
    again.release().await.unwrap();
    g.release().await.unwrap();
    assert!(!exists(&mut admin, &k.lock).await);
}

/// Sets ACL `rules` on `user`, which applies at once to its open connections.
async fn acl(admin: &mut redis::aio::MultiplexedConnection, user: &str, rules: &[&str]) {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg(rules)
        .query_async(admin)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_rw_release_refused_by_an_acl_is_retried_not_read_as_not_ours() {
    let server = PrivateRedis::start(&[]);
    let mut admin = admin(&server.url()).await;
    acl(
        &mut admin,
        "holder",
        &["on", ">secret", "~*", "&*", "+@all"],
    )
    .await;
    let holder_url = format!("redis://holder:secret@127.0.0.1:{}", server.port);
    let compat = [("redisson_compat", "true"), ("command_timeout", "500ms")];
    let holder = connect(&holder_url, &compat).await;
    let other = connect(&server.url(), &[("redisson_compat", "true")]).await;
    let name = compat_name("noperm");
    let rw = holder.rwlock(&name).unwrap();
    let read = rw.read_lock().await.unwrap();
    let write_name = compat_name("noperm-downgrade");
    let write = holder
        .rwlock(&write_name)
        .unwrap()
        .write_lock()
        .await
        .unwrap();
    // The user may still run scripts, but not the reads inside the release and the downgrade.
    acl(&mut admin, "holder", &["-hget", "-hexists"]).await;
    let err = read
        .release()
        .await
        .expect_err("a release whose HGET is refused cannot succeed");
    assert_ne!(
        err.kind(),
        lockkit_core::ErrorKind::LockLost,
        "NOPERM was read as 'not ours': {err}"
    );
    // Redis 7.2+ says NOPERM; 7.0 "The user executing the script can't run this command".
    assert!(
        err.to_string().contains("NOPERM") || err.to_string().contains("can't run"),
        "{err}"
    );
    let err = write
        .downgrade()
        .await
        .expect_err("a downgrade whose HEXISTS is refused cannot succeed");
    assert_ne!(
        err.kind(),
        lockkit_core::ErrorKind::LockLost,
        "NOPERM was read as 'not ours': {err}"
    );
    // Allowed again: the retried release frees the lock long before its 30 s lease ends.
    acl(&mut admin, "holder", &["+hget", "+hexists"]).await;
    let started = Instant::now();
    let w = other
        .rwlock(&name)
        .unwrap()
        .write(&AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the release was never retried");
    assert!(started.elapsed() < Duration::from_secs(10));
    w.release().await.unwrap();
    // The write guard the failed downgrade dropped is released in the background, as any.
    let w = other
        .rwlock(&write_name)
        .unwrap()
        .write(&AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the dropped write guard was never released");
    assert!(started.elapsed() < Duration::from_secs(10));
    w.release().await.unwrap();
}

/// A resent downgrade finds its read hold in place of the write hold: it answers that it
/// downgraded (not that the lock was lost, which would orphan the read hold for a lease).
#[tokio::test]
async fn a_resent_downgrade_finds_its_read_hold() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    // Native layout.
    let name = unique_name("resend-downgrade");
    let k = LockKeys::rwlock("lockkit", &name);
    let owner = "resend-client:10";
    assert_eq!(raw_write(&mut admin, &k, owner).await.0, 1);
    let downgrade = |admin: &mut redis::aio::MultiplexedConnection| {
        let keys = [k.lock.to_string(), k.holders.clone()];
        let args = [owner.to_string(), "30000".into(), k.channel.clone()];
        let mut admin = admin.clone();
        async move {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run::<i64>(
                &mut admin,
                lockkit_redis::scripts::RW_DOWNGRADE,
                &keys,
                &args,
            )
            .await
        }
    };
    assert_eq!(downgrade(&mut admin).await, 1);
    assert_eq!(
        downgrade(&mut admin).await,
        1,
        "a resent downgrade read as lost"
    );
    assert_eq!(zcard(&mut admin, &k.holders).await, 1);
    assert_eq!(raw_shared_release(&mut admin, &k, owner, "s").await, 1);
    assert_eq!(raw_write(&mut admin, &k, "writer-client:2").await.0, 1);
    assert_eq!(
        raw_shared_release(&mut admin, &k, "writer-client:2", "w").await,
        1
    );

    // Redisson's layout.
    let name = compat_name("resend-rs-downgrade");
    let k = LockKeys::redisson_rwlock(&name).unwrap();
    let (field, reader) = ("resend-client:11:write", "resend-client:11");
    assert_eq!(raw_rs_rw(&mut admin, &k, field, "w").await.0, 1);
    for round in ["first", "resent"] {
        let keys = [&*k.lock];
        let args = [field, reader, "30000", &k.holders, &k.channel];
        let r: i64 = run(
            &mut admin,
            lockkit_redis::scripts::RS_RW_DOWNGRADE,
            &keys,
            &args,
        )
        .await;
        assert_eq!(r, 1, "{round} downgrade");
    }
    let hash = hgetall(&mut admin, &k.lock).await;
    assert_eq!(
        hash.get("mode").map(String::as_str),
        Some("read"),
        "{hash:?}"
    );
    assert_eq!(hash.get(reader).map(String::as_str), Some("1"), "{hash:?}");
    assert_eq!(raw_rs_rw_release(&mut admin, &k, reader, "s").await, 1);
    assert!(!exists(&mut admin, &k.lock).await);
}

/// A Redlock release whose reply was lost is sent once more. The second run found the key gone
/// and answered "not ours", so a release that reached a bare quorum was reported `LockLost`.
/// The release that deletes the key now leaves a latch for a while, and a resend answers 1.
#[tokio::test]
async fn a_resent_redlock_release_finds_its_latch() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    let name = unique_name("resend-redlock");
    let lock = format!("lockkit:redlock:{{{name}}}");
    let waiters = format!("lockkit:redlock-waiters:{{{name}}}");
    let deadlines = format!("lockkit:redlock-deadlines:{{{name}}}");
    let owner = "resend-client:12";
    let latch = format!("lockkit:redlock-released:{{{name}}}:{owner}");
    let release = |admin: &mut redis::aio::MultiplexedConnection, owner: &'static str| {
        let keys = [
            lock.clone(),
            waiters.clone(),
            deadlines.clone(),
            latch.clone(),
        ];
        let mut admin = admin.clone();
        async move {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let args = [owner, "ch", "", "1", "10000"];
            run::<i64>(
                &mut admin,
                lockkit_redis::scripts::REDLOCK_RELEASE,
                &keys,
                &args,
            )
            .await
        }
    };
    let _: () = redis::cmd("SET")
        .arg(&lock)
        .arg(owner)
        .arg("PX")
        .arg(30_000)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(release(&mut admin, "someone-else:1").await, 0);
    assert_eq!(release(&mut admin, owner).await, 1);
    assert_eq!(
        release(&mut admin, owner).await,
        1,
        "a resent release read as lost"
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&latch)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!((1..=10_000).contains(&ttl), "the latch lives {ttl} ms");
    let _: i64 = redis::cmd("DEL")
        .arg(&latch)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        release(&mut admin, owner).await,
        0,
        "gone without a latch: lost"
    );
}
