//! RW lock and semaphore specifics on etcd: rank by create revision, FIFO, in-place downgrade.

mod common;

use std::time::Duration;

use common::{connect, name, url};
use lockkit_core::AcquireOptions;

const SOON: Duration = Duration::from_secs(5);

/// Readers queued behind a writer all come in together when it leaves; a writer queued behind
/// them waits for the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_behind_a_writer_wake_together() {
    let Some(url) = url() else { return };
    let (a, b) = (connect(&url, "").await, connect(&url, "").await);
    let n = name("rw-wake");
    let w = a.rwlock(&n).unwrap().write_lock().await.unwrap();
    let mut readers = Vec::new();
    for _ in 0..3 {
        let rw = b.rwlock(&n).unwrap();
        readers.push(tokio::spawn(async move { rw.read_lock().await.unwrap() }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rw2 = a.rwlock(&n).unwrap();
    let writer2 = tokio::spawn(async move { rw2.write_lock().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    w.release().await.unwrap();
    let mut guards = Vec::new();
    for r in readers {
        guards.push(
            tokio::time::timeout(SOON, r)
                .await
                .expect("reader woke")
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !writer2.is_finished(),
        "a writer came in with readers inside"
    );
    let last = guards.pop().unwrap();
    for g in guards {
        g.release().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !writer2.is_finished(),
        "a writer came in with a reader inside"
    );
    last.release().await.unwrap();
    let w2 = tokio::time::timeout(SOON, writer2)
        .await
        .expect("writer woke")
        .unwrap();
    w2.release().await.unwrap();
}

/// Downgrade keeps the rank: readers queued behind us come in, a writer queued behind us waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_lets_queued_readers_in_but_not_writers() {
    let Some(url) = url() else { return };
    let (a, b) = (connect(&url, "").await, connect(&url, "").await);
    let n = name("rw-downgrade");
    let w = a.rwlock(&n).unwrap().write_lock().await.unwrap();
    let token = w.token();
    let rb = b.rwlock(&n).unwrap();
    let reader = tokio::spawn(async move { rb.read_lock().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let wb = b.rwlock(&n).unwrap();
    let writer = tokio::spawn(async move { wb.write_lock().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = w.downgrade().await.unwrap();
    assert_eq!(r.token(), token, "downgrade keeps the key and its rank");
    let rg = tokio::time::timeout(SOON, reader)
        .await
        .expect("queued reader came in after the downgrade")
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "a writer came in after a downgrade");
    r.release().await.unwrap();
    rg.release().await.unwrap();
    let wg = tokio::time::timeout(SOON, writer).await.unwrap().unwrap();
    assert!(wg.token() > token);
    wg.release().await.unwrap();
}

/// First come, first served: a request for many permits is not overtaken by later small ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_is_fifo() {
    let Some(url) = url() else { return };
    let (a, b) = (connect(&url, "").await, connect(&url, "").await);
    let n = name("sem-fifo");
    let one = a.semaphore(&n, 3).unwrap().acquire_one().await.unwrap();
    let sb = b.semaphore(&n, 3).unwrap();
    let big = tokio::spawn(async move { sb.acquire(3, &AcquireOptions::new()).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = a.semaphore(&n, 3).unwrap();
    assert!(
        s.try_acquire(1).await.unwrap().is_none(),
        "a small request overtook a queued big one"
    );
    assert_eq!(s.available().await.unwrap(), 2);
    one.release().await.unwrap();
    let all = tokio::time::timeout(SOON, big)
        .await
        .expect("big request woke")
        .unwrap()
        .expect("acquired");
    assert_eq!(all.permits(), 3);
    assert_eq!(s.available().await.unwrap(), 0);
    all.release().await.unwrap();
    assert_eq!(s.available().await.unwrap(), 3);
}
