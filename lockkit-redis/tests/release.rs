//! Issue 3, point 4: a release retried after a lost reply neither fails nor releases another
//! owner's lock.

mod common;

use std::time::Duration;

use common::*;
use lockkit_core::{AcquireOptions, Locks, Primitive};
use lockkit_redis::LockKeys;
use lockkit_testing::unique_name;

/// Runs the release script exactly as a retry would: same owner, same latch.
async fn raw_release(
    admin: &mut redis::aio::MultiplexedConnection,
    k: &LockKeys,
    owner: &str,
) -> i64 {
    redis::Script::new(lockkit_redis::scripts::RELEASE)
        .key(&k.lock)
        .key(k.unlock_latch(owner))
        .key(&k.fence)
        .key(&k.queue)
        .key(&k.waiters)
        .arg(owner)
        .arg(10_000)
        .arg(3_600_000)
        .invoke_async(admin)
        .await
        .unwrap()
}

#[tokio::test]
async fn retried_release_is_idempotent_and_never_frees_the_next_owner() {
    let Some(url) = shared_url() else { return };
    let (a, b) = (connect(&url, &[]).await, connect(&url, &[]).await);
    let mut admin = admin(&url).await;
    let name = unique_name("idem");
    let k = LockKeys::mutex("lockkit", &name);
    let g = a.mutex(&name).unwrap().lock().await.unwrap();
    let owner = a.inspect(&name, Primitive::Mutex).await.unwrap().holders[0]
        .owner
        .clone();
    // The first attempt runs, its reply is "lost"; the retry must also report success.
    assert_eq!(raw_release(&mut admin, &k, &owner).await, 1);
    assert_eq!(raw_release(&mut admin, &k, &owner).await, 1);
    // Another owner takes the lock; a late retry must leave it alone.
    let g2 = b
        .mutex(&name)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("free");
    assert_eq!(raw_release(&mut admin, &k, &owner).await, 1);
    assert!(
        b.mutex(&name).unwrap().is_locked().await.unwrap(),
        "retry freed the new owner's lock"
    );
    // A release by an owner that never released gets 0 (LockLost), not 1.
    assert_eq!(raw_release(&mut admin, &k, "someone-else:1").await, 0);
    drop(g);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(b.mutex(&name).unwrap().is_locked().await.unwrap());
    g2.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_whose_reply_times_out_is_retried_and_succeeds() {
    let server = PrivateRedis::start(&[]);
    let locks: Locks = connect(&server.url(), &[("command_timeout", "300ms")]).await;
    let mut admin = admin(&server.url()).await;
    let g = locks.mutex("lost-reply").unwrap().lock().await.unwrap();
    // Writes pause for 500 ms: the first release attempt times out on the client while the
    // server runs it later; the retries then find the unlock latch.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(500)
        .arg("WRITE")
        .query_async(&mut admin)
        .await
        .unwrap();
    g.release().await.expect("a retried release succeeds");
    let lock = locks.mutex("lost-reply").unwrap();
    assert!(!lock.is_locked().await.unwrap());
    let again = lock.try_lock().await.unwrap();
    assert!(again.is_some());
}

#[tokio::test]
async fn double_release_through_guards_is_not_possible_and_drop_after_release_is_quiet() {
    let Some(url) = shared_url() else { return };
    let locks = connect(&url, &[]).await;
    let name = unique_name("idem-guard");
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    let g2 = g.reenter().await.unwrap();
    g.release().await.unwrap();
    g2.release().await.unwrap();
    // Released for good; a new holder is unaffected by anything left over.
    let g3 = locks
        .mutex(&name)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(locks.mutex(&name).unwrap().is_locked().await.unwrap());
    g3.release().await.unwrap();
}

/// A guard whose handle was dropped builds its keys again (it does not keep them): its reentry,
/// extend and release reach the lock's own keys, in the native layout and in Redisson's, and
/// leave none behind. An election's leader (whose listener keeps its keys while it leads)
/// proclaims and resigns on its own keys too.
#[tokio::test]
async fn a_guard_outliving_its_handle_acts_on_its_own_keys() {
    let Some(url) = shared_url() else { return };
    let mut admin = admin(&url).await;
    for redisson in [false, true] {
        let opts: &[(&str, &str)] = if redisson {
            &[("redisson_compat", "true")]
        } else {
            &[]
        };
        let locks = connect(&url, opts).await;
        let name = unique_name("outlives");
        let k = if redisson {
            LockKeys::redisson_mutex(&name).unwrap()
        } else {
            LockKeys::mutex("lockkit", &name)
        };
        let g = locks
            .mutex(&name)
            .unwrap()
            .acquire(&AcquireOptions::new().fixed_lease(Duration::from_secs(5)))
            .await
            .unwrap()
            .expect("free");
        let again = g.reenter().await.unwrap();
        g.extend(Duration::from_secs(20)).await.unwrap();
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&k.lock)
            .query_async(&mut admin)
            .await
            .unwrap();
        assert!(pttl > 15_000, "extend missed {}: pttl {pttl}", k.lock);
        again.release().await.unwrap();
        g.release().await.unwrap();
        let left = exists(&mut admin, &k.lock).await;
        assert!(
            !left,
            "release missed {} (redisson_compat {redisson})",
            k.lock
        );
        locks.close().await.unwrap();
    }
    let locks = connect(&url, &[]).await;
    let name = unique_name("outlives-elect");
    let k = LockKeys::election("lockkit", &name);
    let lead = locks.election(&name).unwrap().campaign("a").await.unwrap();
    lead.proclaim("b").await.unwrap();
    let value: Vec<u8> = redis::cmd("HGET")
        .arg(k.leader.as_deref().unwrap())
        .arg("value")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(value, b"b");
    lead.resign().await.unwrap();
    assert!(
        !exists(&mut admin, &k.lock).await,
        "resign missed {}",
        k.lock
    );
    locks.close().await.unwrap();
}

async fn exists(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap();
    n == 1
}
