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

/// The size a semaphore's watch shows may be behind the server's; it is never taken on the
/// watch's word. B's watch lags 500 ms. After A changes the size, B's handles settle against
/// the server: a handle of the new size is admitted (the watch still shows the old one), and a
/// handle of the old size is refused by the transaction's compare on the size key, although
/// its watch shows that size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_watch_never_decides_a_semaphore_size() {
    let Some(url) = url() else { return };
    let server = common::server(&url);
    let proxy = common::lagging_proxy(&server, Duration::from_millis(500)).await;
    let a = connect(&url, "").await;
    let b = connect(&format!("etcd://{}", proxy.addr()), "").await;
    let n = name("sem-lag");
    // B stores 2 and its watch, in step by now, shows it.
    let b2 = b.semaphore(&n, 2).unwrap();
    b2.try_acquire(1)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let admin = a.open_semaphore(&n).unwrap();
    assert_eq!(admin.set_permits(3).await.unwrap(), Some(2));
    // B's watch still shows 2.
    let p = b.semaphore(&n, 3).unwrap().try_acquire(3).await;
    let p = p.unwrap().expect("3 of the stored 3");
    p.release().await.unwrap();
    let e = b2.try_acquire(1).await.unwrap_err();
    assert_eq!(e.kind(), lockkit_core::ErrorKind::InvalidArgument, "{e}");

    // Now B's watch shows 3 and the server 2: B's handle of 3 is refused on the server.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(admin.set_permits(2).await.unwrap(), Some(3));
    let e = b
        .semaphore(&n, 3)
        .unwrap()
        .try_acquire(1)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("has 2 permits"), "{e}");
    let p = b2.try_acquire(2).await.unwrap().expect("2 of the stored 2");
    assert!(a
        .semaphore(&n, 2)
        .unwrap()
        .try_acquire(1)
        .await
        .unwrap()
        .is_none());
    p.release().await.unwrap();
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// The first permit of a new semaphore is created in one transaction with its size key, so both
/// have the create revision that is the permit's token: the permit's key, never the size key,
/// backs `key_of` and `is_owner`, so the compare fails once the permit is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_permit_is_fenced_by_its_own_key() {
    let Some(url) = url() else { return };
    let a = connect(&url, "").await;
    let n = name("sem-first-fence");
    let p = a
        .semaphore(&n, 2)
        .unwrap()
        .try_acquire(1)
        .await
        .unwrap()
        .unwrap();
    let key = a.key_of(&p).await.unwrap();
    assert!(
        !key.ends_with(b"%size"),
        "{}",
        String::from_utf8_lossy(&key)
    );
    let owner = a.is_owner(&p).await.unwrap();
    p.release().await.unwrap();
    let put = lockkit_etcd::etcd_client::TxnOp::put(format!("{n}-fenced"), "x", None);
    assert!(
        !common::txn_if(&mut a.client(), owner, put).await,
        "a fenced write went through after the release"
    );
    a.close().await.unwrap();
}

/// A semaphore's size key holding something else than a size is a typed `WrongType` error for
/// every call that reads it, and is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_size_key_is_refused_and_kept() {
    let Some(url) = url() else { return };
    let a = connect(&url, "").await;
    let mut raw = common::raw(&url).await;
    let n = name("sem-foreign-size");
    let key = format!("lockkit/%sem/{}/%size", lockkit_core::encode_name(&n));
    raw.put(key.clone(), "three", None).await.unwrap();
    lockkit_testing::cases::foreign_size_is_refused(&a, &n).await;
    let got = raw.get(key.clone(), None).await.unwrap();
    assert_eq!(got.kvs()[0].value(), b"three");
    raw.delete(key, None).await.unwrap();
    a.close().await.unwrap();
}

/// A semaphore waiter whose turn came as its (lagging) watch shows it, while an operator shrinks
/// the size so that it does not fit after all, keeps its place: the read that settles the turn
/// refuses it, and it goes on waiting with the key it queued with. It used to take that for a
/// broken watch and queue again with a fresh key, behind the waiters that came after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shrink_as_a_turn_comes_keeps_the_waiters_place() {
    let Some(url) = url() else { return };
    let server = common::server(&url);
    let proxy = common::lagging_proxy(&server, Duration::from_millis(500)).await;
    let a = connect(&url, "").await;
    let b = connect(&format!("etcd://{}", proxy.addr()), "").await;
    let mut raw = common::raw(&url).await;
    let n = name("sem-shrink-turn");
    let prefix = format!("lockkit/%sem/{}/", lockkit_core::encode_name(&n));
    let queue = |raw: &mut lockkit_etcd::etcd_client::Client| {
        let (mut raw, prefix) = (raw.clone(), prefix.clone());
        async move {
            let opts = lockkit_etcd::etcd_client::GetOptions::new().with_prefix();
            let resp = raw.get(prefix, Some(opts)).await.unwrap();
            let mut revs: Vec<i64> = resp
                .kvs()
                .iter()
                .filter(|kv| !kv.key().ends_with(b"%size"))
                .map(|kv| kv.create_revision())
                .collect();
            revs.sort_unstable();
            revs
        }
    };
    let sa = a.semaphore(&n, 2).unwrap();
    let h1 = sa.acquire_one().await.unwrap();
    let h2 = sa.acquire_one().await.unwrap();
    let wait = AcquireOptions::new().wait(Duration::from_secs(30));

    let sb = b.open_semaphore(&n).unwrap();
    let opts = wait;
    let waiter = tokio::spawn(async move { sb.acquire(1, &opts).await });
    common::eventually(SOON, "the waiter's key", || {
        let mut raw = raw.clone();
        async move { queue(&mut raw).await.len() == 3 }
    })
    .await;
    let sl = a.open_semaphore(&n).unwrap();
    let opts = wait;
    let later = tokio::spawn(async move { sl.acquire(1, &opts).await });
    common::eventually(SOON, "the later waiter's key", || {
        let mut raw = raw.clone();
        async move { queue(&mut raw).await.len() == 4 }
    })
    .await;
    let queued = queue(&mut raw).await;
    // B's watch is in step by now, half a second behind the server.
    tokio::time::sleep(Duration::from_millis(1200)).await;

    // B's watch shows the release (its turn) half a second late, and the shrink just after.
    h1.release().await.unwrap();
    let admin = a.open_semaphore(&n).unwrap();
    assert_eq!(admin.set_permits(1).await.unwrap(), Some(2));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        queue(&mut raw).await,
        queued[1..],
        "the waiter kept its key"
    );

    h2.release().await.unwrap();
    let p = tokio::time::timeout(SOON, waiter)
        .await
        .expect("the waiter is next")
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(p.token().0, queued[2] as u64, "with the key it queued with");
    p.release().await.unwrap();
    let p = tokio::time::timeout(SOON, later)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .unwrap();
    p.release().await.unwrap();
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// The read guard a downgrade makes reports the lease the write guard had last: the one
/// `extend` set, not the one it was acquired with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_after_an_extend_reports_the_extended_lease() {
    let Some(url) = url() else { return };
    let a = connect(&url, "").await;
    let rw = a.rwlock(&name("downgrade-extended")).unwrap();
    let w = rw
        .write(&AcquireOptions::new().fixed_lease(Duration::from_secs(2)))
        .await
        .unwrap()
        .unwrap();
    w.extend(Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        w.lease(),
        lockkit_core::Lease::Fixed(Duration::from_secs(30))
    );
    let r = w.downgrade().await.unwrap();
    assert_eq!(
        r.lease(),
        lockkit_core::Lease::Fixed(Duration::from_secs(30))
    );
    r.release().await.unwrap();
}
