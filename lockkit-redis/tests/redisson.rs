//! Issue 4, point 4 (Rust side): in `redisson_compat` mode the mutex uses Redisson's RLock key,
//! hash field and channel, and wakes on Redisson's unlock message. The end-to-end test against
//! real Redisson is `scripts/test.d/20-redisson-interop.sh`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use lockkit_core::testing::unique_name;
use lockkit_core::DistLockExt;

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
    let e = locks.mutex("a}b").unwrap_err();
    assert_eq!(e.kind(), &lockkit_core::ErrorKind::InvalidName);
    assert!(locks.mutex("{a}b").is_ok());
}
