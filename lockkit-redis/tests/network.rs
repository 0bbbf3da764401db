//! Network faults between a holder and the shared test server, through a fault-injecting proxy
//! (`lockkit_testing::network`): a half-open connection, a link slower than the lease, a short
//! partition that heals in place, every connection reset.

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("redis").map(lockkit_core::LockConfig::new)
}

lockkit_testing::network_suite!(config, lockkit_redis::connect);

mod common;

use std::time::Duration;

use lockkit_testing::proxy::Proxy;

/// An acquire whose answer is lost may have taken the lock with its whole lease: giving it back
/// is tried that long, not only for twice the waiter's heartbeat timeout, so a link that stays
/// down a little longer than that no longer leaves the lock held by nobody until its lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_take_is_given_back_after_a_longer_outage() {
    let Some(url) = common::shared_url() else {
        return;
    };
    // A heartbeat timeout of 300 ms: the give-back used to stop trying after 600 ms.
    let (proxy, locks, other) = proxied(&url, &[("waiter_heartbeat", "100ms")]).await;
    let name = lockkit_testing::unique_name("lost-take");
    let m = locks.mutex(&name).unwrap();
    // The server knows the scripts from here on.
    m.try_lock()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    // The acquire runs on the server; its answer never comes back, and nothing more gets
    // through until the link heals.
    proxy.update(|t| t.hold_down = true);
    let take = tokio::spawn(async move { m.try_lock().await.map(|g| g.is_some()) });
    let probe = other.mutex(&name).unwrap();
    let taken = async {
        while !probe.is_locked().await.unwrap() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), taken)
        .await
        .expect("the take reaches the server");
    proxy.partition();
    assert!(take.await.unwrap().is_err(), "the take's answer was lost");
    proxy.cut();
    assert!(probe.is_locked().await.unwrap(), "the lost take holds it");
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.heal();
    assert!(
        freed_within(&probe, Duration::from_secs(10)).await,
        "the lock is given back once the link heals, long before its 30 s lease ends"
    );
}

/// A release that fails after renewals whose answers were lost is tried for as long as those
/// renewals may keep the lock: each reset the key's expiry to a whole lease while the guard's
/// deadline stood still. Giving up at that deadline left the lock held by nobody until the
/// last renewal's lease ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_release_outlasts_renewals_whose_answers_were_lost() {
    let Some(url) = common::shared_url() else {
        return;
    };
    let (proxy, locks, other) = proxied(&url, &[("lease", "10s")]).await;
    let name = lockkit_testing::unique_name("lost-renewals");
    let g = locks.mutex(&name).unwrap().lock().await.unwrap();
    // The first renewal (at a third of the lease) loads its script on the server.
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Every renewal from here on runs on the server, and its answer never comes back.
    proxy.update(|t| t.hold_down = true);
    tokio::time::timeout(Duration::from_secs(12), g.lost())
        .await
        .expect("the guard turns Lost at its deadline");
    proxy.cut();
    assert!(
        g.release().await.is_err(),
        "the release cannot reach the server"
    );
    let probe = other.mutex(&name).unwrap();
    assert!(
        probe.is_locked().await.unwrap(),
        "the last renewals keep the lock"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.heal();
    let left = probe.remaining_lease().await.unwrap();
    assert!(
        freed_within(&probe, Duration::from_secs(5)).await,
        "the release is retried once the link heals ({left:?} left)"
    );
}

/// A proxy to the shared server, a handle through it (a 500 ms command timeout, and `options`)
/// and a handle on the server itself.
async fn proxied(
    url: &str,
    options: &[(&str, &str)],
) -> (Proxy, lockkit_core::Locks, lockkit_core::Locks) {
    let proxy = Proxy::start(url.trim_start_matches("redis://"))
        .await
        .unwrap();
    let mut all = vec![("command_timeout", "500ms")];
    all.extend_from_slice(options);
    let locks = common::connect(&format!("redis://{}", proxy.addr()), &all).await;
    (proxy, locks, common::connect(url, &[]).await)
}

/// Whether `probe`'s lock is free within `limit`.
async fn freed_within(probe: &lockkit_core::Mutex, limit: Duration) -> bool {
    let freed = async {
        while probe.is_locked().await.unwrap() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(limit, freed).await.is_ok()
}
