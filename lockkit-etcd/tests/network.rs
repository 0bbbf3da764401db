//! Network faults between a holder and the shared test server, through a fault-injecting proxy
//! (`lockkit_testing::network`): a half-open connection, a link slower than the lease, a short
//! partition that heals in place, every connection reset.

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("etcd").map(lockkit_core::LockConfig::new)
}

lockkit_testing::network_suite!(config, lockkit_etcd::connect);

mod common;

use std::time::Duration;

use lockkit_core::AcquireOptions;
use lockkit_testing::network;
use lockkit_testing::proxy::Proxy;

/// A waiter whose read of the queue (the one its watch's event sends it to) is in flight when
/// its connections are reset fails that request: the acquire driver bears it (the waiter's key
/// lives on with its lease), reads again once the client reconnected, and the waiter gets the
/// lock it was next for, with the key it queued with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_cut_off_in_flight_is_borne() {
    read_cut_off(AcquireOptions::new().wait(Duration::from_secs(30))).await;
}

/// The same for a waiter with a fixed lease, whose key waits on the session lease and is moved
/// onto a lease of its own once the read after the reset finds its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_waiter_bears_a_read_cut_off_in_flight() {
    let opts = AcquireOptions::new()
        .fixed_lease(Duration::from_secs(20))
        .wait(Duration::from_secs(30));
    read_cut_off(opts).await;
}

/// A proxy to the test server and a handle whose first endpoint it is, the server itself the
/// second, with `query` set (a request the proxy holds past the command timeout is sent again
/// to the server).
async fn proxy_first(url: &str, query: &str) -> (Proxy, lockkit_core::Locks) {
    let proxy = Proxy::start(common::server(url)).await.unwrap();
    let endpoints = format!("etcd://{},{}", proxy.addr(), common::server(url));
    let locks = common::connect(&endpoints, query).await.locks().clone();
    (proxy, locks)
}

/// A proxy to the test server, a handle whose every request goes through it (10 s session lease,
/// 5 s command timeout), and a handle that reaches the server directly. The driver's events are
/// captured.
async fn waiter_behind_a_proxy(url: &str) -> (Proxy, lockkit_core::Locks, lockkit_core::Locks) {
    assert!(
        lockkit_testing::spans::capture(),
        "lockkit's events are seen"
    );
    let proxy = Proxy::start(common::server(url)).await.unwrap();
    let waiter_locks = common::connect(
        &format!("etcd://{}", proxy.addr()),
        "lease_ttl=10s&command_timeout=5s",
    )
    .await
    .locks()
    .clone();
    let other = common::connect(url, "").await.locks().clone();
    (proxy, waiter_locks, other)
}

async fn read_cut_off(opts: AcquireOptions) {
    let Some(url) = common::url() else { return };
    let (proxy, waiter_locks, other) = waiter_behind_a_proxy(&url).await;
    let name = common::name("cut-read");
    let held = other.mutex(&name).unwrap().lock().await.unwrap();
    let mutex = waiter_locks.mutex(&name).unwrap();
    let waiter = tokio::spawn(async move { mutex.acquire(&opts).await });
    network::waiters_reach(&other, &name, 1).await;
    // The waiter's key: the lock it gets must be this one's, its place kept.
    let queued = common::keys(&mut common::raw(&url).await, &name).await;
    assert_eq!(
        queued.len(),
        2,
        "the holder's key and the waiter's: {queued:?}"
    );
    let place = queued[1].1 as u64;
    let g = network::cut_off_a_look(&proxy, &name, held, waiter).await;
    assert_eq!(
        g.token().0,
        place,
        "the waiter kept its key, and so its place"
    );
    g.release().await.unwrap();
}

/// A fixed-lease waiter moves its key onto the session lease to wait (it parks). When that
/// move lands but its answer is lost, and the lock comes free before the waiter waits again,
/// the waiter must still hold on a fixed lease of its own: the key moves off the session lease
/// before the guard is made, and the first fixed lease is revoked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_waiter_whose_park_answer_is_lost_holds_on_a_fixed_lease() {
    let Some(url) = common::url() else { return };
    let (proxy, waiter_locks, other) = waiter_behind_a_proxy(&url).await;
    let mut raw = common::raw(&url).await;
    let name = common::name("lost-park");
    let borne = || {
        lockkit_testing::spans::events_of_lock_mentioning(&name, "waiting through a failed request")
    };
    let before = borne();
    let held = other.mutex(&name).unwrap().lock().await.unwrap();
    // Every message of the waiter's takes 500 ms each way: the park's answer is still in the
    // proxy when the server shows the move.
    proxy.latency(Duration::from_millis(500), Duration::ZERO);
    let mutex = waiter_locks.mutex(&name).unwrap();
    let opts = AcquireOptions::new()
        .fixed_lease(Duration::from_secs(20))
        .wait(Duration::from_secs(30));
    let waiter = tokio::spawn(async move { mutex.acquire(&opts).await });
    let (place, first) = loop {
        let keys = common::keys(&mut raw, &name).await;
        if let Some(k) = keys.get(1) {
            break (k.1, k.2);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let parked_on = loop {
        let keys = common::keys(&mut raw, &name).await;
        let lease = keys.get(1).expect("the waiter's key").2;
        if lease != first {
            break lease;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // The move landed; its answer is held, then lost in a reset once the lock is free.
    proxy.update(|t| t.hold_down = true);
    held.release().await.unwrap();
    proxy.reset();
    proxy.set(Default::default());
    let g = waiter
        .await
        .unwrap()
        .expect("the lost answer is borne")
        .expect("the waiter gets the lock");
    assert!(borne() > before, "the lost answer failed a step, borne");
    assert_eq!(g.token().0, place as u64, "the waiter kept its place");
    let keys = common::keys(&mut raw, &name).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    let on = keys[0].2;
    assert!(
        on != parked_on && on != first,
        "the held key is on a fixed lease of its own, not the session's ({parked_on:x}) nor \
         the first ({first:x}): {on:x}"
    );
    let ttl = raw.lease_time_to_live(on, None).await.unwrap();
    assert!(
        ttl.granted_ttl() == 20,
        "the guard's fixed lease: {}",
        ttl.granted_ttl()
    );
    common::eventually(
        Duration::from_secs(5),
        "the first fixed lease revoked",
        || {
            let mut raw = raw.clone();
            async move { raw.lease_time_to_live(first, None).await.unwrap().ttl() == -1 }
        },
    )
    .await;
    g.release().await.unwrap();
}

/// A release whose delete is applied but whose answer is lost (the endpoint goes silent past the
/// command timeout, so the delete is sent again to the next endpoint, where its compare on the
/// key's create revision fails) is a release, not a lost lock: that key is gone either way. An
/// admin's force-unlock sends the same delete, and so no longer goes on to unlock the next
/// holder too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_answer_is_lost_is_a_release() {
    let Some(url) = common::url() else { return };
    let (proxy, locks) = proxy_first(&url, "command_timeout=1s").await;
    let mut raw = common::raw(&url).await;
    let name = common::name("lost-release");
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    proxy.update(|t| t.hold_down = true);
    g.release()
        .await
        .expect("released: the key is gone, by this release");
    assert!(common::keys(&mut raw, &name).await.is_empty());
    proxy.set(Default::default());
}

/// A semaphore waiter whose mark as holding is applied but whose answer is lost, while an
/// operator shrinks the size, holds: the mark was put under the size it was let in with, and
/// every other acquirer counts its permits as held from then on. Before, the resent mark's
/// compare failed on the new size, the waiter went back to waiting on its marked key, and a
/// waiter ranked before it (which counts those permits) could wait on it for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_mark_whose_answer_is_lost_holds() {
    lost_mark(1, 1, 2, 1).await;
}

/// The same with a shrink below what the waiter asked for: the size check came before the
/// look at our key's mark, so the waiter was refused (`InvalidArgument`) while every other
/// client counted its permits as held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_mark_whose_answer_is_lost_holds_through_a_shrink_below_it() {
    lost_mark(2, 2, 3, 1).await;
}

/// A waiter for `n` permits of a semaphore of `size` (one held by another client) is let in
/// when the size grows to `grown`; its mark's answer is lost while the size shrinks to
/// `shrunk`.
async fn lost_mark(size: u32, n: u32, grown: u32, shrunk: u32) {
    use lockkit_etcd::etcd_client::{EventType, WatchOptions};

    let Some(url) = common::url() else { return };
    let (proxy, waiter) = proxy_first(&url, "command_timeout=1s").await;
    let other = common::connect(&url, "").await.locks().clone();
    let mut raw = common::raw(&url).await;
    let name = common::name("lost-mark");
    let prefix = format!("lockkit/%sem/{}/", lockkit_core::encode_name(&name));
    let first = other
        .semaphore(&name, size)
        .unwrap()
        .acquire_one()
        .await
        .unwrap();

    let sem = waiter.open_semaphore(&name).unwrap();
    let opts = AcquireOptions::new().wait(Duration::from_secs(8));
    let acquire = tokio::spawn(async move { sem.acquire(n, &opts).await });
    let mut events = raw
        .watch(prefix.clone(), Some(WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    common::eventually(Duration::from_secs(5), "the waiter's key", || {
        let mut raw = raw.clone();
        let prefix = prefix.clone();
        async move {
            let opts = lockkit_etcd::etcd_client::GetOptions::new().with_prefix();
            raw.get(prefix, Some(opts)).await.unwrap().kvs().len() == 3
        }
    })
    .await;
    // Every answer to the waiter now comes 600 ms after its request was applied, so the test
    // sees the mark on the server before the waiter does.
    proxy.latency(Duration::from_millis(300), Duration::ZERO);
    let admin = other.open_semaphore(&name).unwrap();
    assert_eq!(admin.set_permits(grown).await.unwrap(), Some(size));
    'marked: while let Some(resp) = events.message().await.unwrap() {
        for e in resp.events() {
            let kv = e.kv().unwrap();
            if e.event_type() == EventType::Put && kv.value().ends_with(b"+") && kv.version() > 1 {
                break 'marked;
            }
        }
    }
    // The mark's answer is lost: the waiter resends it to the server, after a shrink.
    proxy.update(|t| t.hold_down = true);
    assert_eq!(admin.set_permits(shrunk).await.unwrap(), Some(grown));
    let second = acquire
        .await
        .unwrap()
        .unwrap()
        .expect("the waiter holds the permit its key is marked with");
    drop(events);
    proxy.set(Default::default());
    second.release().await.unwrap();
    first.release().await.unwrap();
    let opts = lockkit_etcd::etcd_client::GetOptions::new().with_prefix();
    let left = raw.get(prefix, Some(opts)).await.unwrap();
    assert_eq!(left.kvs().len(), 1, "only the size key is left");
}

/// An acquire dropped while it waits has its key deleted; a delete that reaches the server late
/// (its endpoint went silent, so it was sent again to the next, and the first copy arrived once
/// the link healed) never deletes the key the handle's next acquire has put in the same slot
/// since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_applied_late_spares_the_next_key_in_its_slot() {
    let Some(url) = common::url() else { return };
    let (proxy, waiter) = proxy_first(&url, "command_timeout=1s").await;
    let other = common::connect(&url, "").await.locks().clone();
    let mut raw = common::raw(&url).await;
    let name = common::name("late-leave");
    let held = other.mutex(&name).unwrap().lock().await.unwrap();

    let m = waiter.mutex(&name).unwrap();
    let first = tokio::spawn(async move { m.lock_for(Duration::from_secs(30)).await });
    common::until_keys(&raw, &name, 2).await;
    // Nothing the waiter sends through the proxy reaches the server until the link heals.
    proxy.update(|t| t.hold_up = true);
    first.abort();
    common::until_keys(&raw, &name, 1).await;

    let m = waiter.mutex(&name).unwrap();
    let second = tokio::spawn(async move { m.lock_for(Duration::from_secs(30)).await });
    common::until_keys(&raw, &name, 2).await;
    let queued = common::keys(&mut raw, &name).await;
    // The first waiter's delete reaches the server now.
    proxy.update(|t| t.hold_up = false);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        common::keys(&mut raw, &name).await,
        queued,
        "the next key is kept"
    );
    held.release().await.unwrap();
    let g = second
        .await
        .unwrap()
        .unwrap()
        .expect("the next acquire holds");
    assert_eq!(
        g.token().0,
        queued[1].1 as u64,
        "with the key it queued with"
    );
    g.release().await.unwrap();
    assert!(common::keys(&mut raw, &name).await.is_empty());
}
