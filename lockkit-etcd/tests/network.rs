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

async fn read_cut_off(opts: AcquireOptions) {
    let Some(url) = common::url() else { return };
    assert!(
        lockkit_testing::spans::capture(),
        "lockkit's events are seen"
    );
    let authority = url.trim_start_matches("etcd://");
    let authority = &authority[..authority.find(['/', '?']).unwrap_or(authority.len())];
    let proxy = Proxy::start(authority).await.unwrap();
    let waiter_locks = common::connect(
        &format!("etcd://{}", proxy.addr()),
        "lease_ttl=10s&command_timeout=5s",
    )
    .await
    .locks()
    .clone();
    let other = common::connect(&url, "").await.locks().clone();
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
