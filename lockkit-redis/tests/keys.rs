//! Issue 3, point 6: every key and channel of one lock shares a hash tag (one cluster slot).

mod common;

use common::*;
use lockkit_redis::LockKeys;

#[test]
fn all_keys_of_a_lock_share_one_slot() {
    for name in [
        "a",
        "orders/42",
        "{tag}",
        "a}b{c",
        "ünï 锁",
        "%7B",
        "x:y",
        "}",
    ] {
        for k in [
            LockKeys::mutex("lockkit", name),
            LockKeys::rwlock("lockkit", name),
            LockKeys::semaphore("lockkit", name),
            LockKeys::election("lockkit", name),
        ]
        .into_iter()
        .chain(LockKeys::redisson_mutex(name).ok())
        {
            let slot = key_slot(&k.lock);
            for other in [
                &k.fence,
                &k.channel,
                &k.unlock_latch("uuid:1"),
                &k.queue,
                &k.waiters,
                &k.holders,
            ]
            .into_iter()
            .chain(k.leader.as_ref())
            {
                assert_eq!(
                    key_slot(other),
                    slot,
                    "{name:?}: {other} is in another slot"
                );
            }
        }
    }
    // Different names spread over slots (not everything in one).
    let slots: std::collections::HashSet<u16> = (0..100)
        .map(|i| key_slot(&LockKeys::mutex("lockkit", &format!("n{i}")).lock))
        .collect();
    assert!(slots.len() > 50);
}

#[tokio::test]
async fn keys_written_follow_the_layout() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let g = locks.mutex("a}b").unwrap().lock().await.unwrap();
    let mut admin = admin(&server.url()).await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut admin)
        .await
        .unwrap();
    keys.sort();
    let k = LockKeys::mutex("lockkit", "a}b");
    assert_eq!(keys, vec![k.fence.clone(), k.lock.clone()]);
    g.release().await.unwrap();
    let slot = key_slot(&k.lock);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut admin)
        .await
        .unwrap();
    for key in keys {
        assert_eq!(key_slot(&key), slot, "{key}");
    }
}

/// Issue 17: locks that share a hash tag (`a{eu}`, `b{eu}`, `eu`) share a slot, never a queue:
/// with `redisson_compat`, the fair queue is Redisson's, named by the lock.
#[test]
fn locks_sharing_a_tag_never_share_a_queue() {
    let names = ["a{eu}", "b{eu}", "eu"];
    let mutexes: Vec<LockKeys> = names
        .iter()
        .map(|n| LockKeys::redisson_mutex(n).unwrap())
        .collect();
    let rwlocks: Vec<LockKeys> = names
        .iter()
        .map(|n| LockKeys::redisson_rwlock(n).unwrap())
        .collect();
    let semaphores: Vec<LockKeys> = names
        .iter()
        .map(|n| LockKeys::redisson_semaphore(n).unwrap())
        .collect();
    for keys in [&mutexes, &rwlocks, &semaphores] {
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a.queue, b.queue);
                assert_ne!(a.waiters, b.waiters);
            }
        }
    }
    assert_eq!(mutexes[0].queue, "redisson_lock_queue:a{eu}");
    assert_eq!(mutexes[2].waiters, "redisson_lock_timeout:{eu}");
}
