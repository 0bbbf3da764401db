//! What the server sees: every mutex name of one client shares one watch stream, idle waiters
//! send nothing, and a delete compacted away while the stream was down is still found. Alone in
//! their binary, one at a time: they read etcd's own counters, which tests running at the same
//! time would move, or compact the server's history, which would break other tests' watches
//! from past revisions.

mod common;

use std::time::Duration;

use common::{connect, eventually, gauge, name, raw, url};
use lockkit_core::{LockConfig, LockState};
use lockkit_testing::proxy::Proxy;

const SOON: Duration = Duration::from_secs(5);

/// The cases run one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const STREAMS: &str = "etcd_debugging_mvcc_watch_stream_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_mutex_names_share_one_watch_stream() {
    let Some(url) = url() else { return };
    let _alone = ONE_AT_A_TIME.lock().await;
    let before = gauge(&url, STREAMS);
    let locks = connect(&url, "").await;
    let names: Vec<String> = (0..20).map(|i| name(&format!("one-stream-{i}"))).collect();
    let mut guards = Vec::new();
    for n in &names {
        guards.push(locks.mutex(n).unwrap().lock().await.unwrap());
    }
    let streams = gauge(&url, STREAMS) - before;
    assert!(
        streams <= 1.0,
        "{streams} watch streams for 20 mutex names held by one client"
    );

    // Each name's watches are on it: a force_unlock of one name from elsewhere turns that
    // guard, and only that one, Lost at once.
    let other = connect(&url, "").await;
    assert!(other
        .mutex(&names[7])
        .unwrap()
        .force_unlock()
        .await
        .unwrap());
    tokio::time::timeout(SOON, guards[7].lost())
        .await
        .expect("the guard whose key was deleted turned Lost");
    assert_eq!(guards[0].state(), LockState::Held);
    assert_eq!(guards[19].state(), LockState::Held);

    // A waiter on another name in the same client is woken when the holder releases.
    let m3 = locks.mutex(&names[3]).unwrap();
    let waiter = tokio::spawn(async move { m3.lock_for(SOON).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let held3 = guards.remove(3);
    held3.release().await.unwrap();
    let g3 = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("the waiter got the lock");
    g3.release().await.unwrap();

    for g in guards {
        let _ = g.release().await;
    }
    locks.close().await.unwrap();
    other.close().await.unwrap();
    eventually(SOON, "the stream closed with its handle", || async {
        gauge(&url, STREAMS) <= before
    })
    .await;
}

/// A holder's key deleted while its client's watch stream was down, with the revisions in
/// between compacted away: the stream that comes back cannot replay the delete, so it reads the
/// key, and the guard turns Lost (it stayed Held, its session lease alive, before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_deleted_and_compacted_while_the_stream_was_down_turns_the_guard_lost() {
    let Some(url) = url() else { return };
    let _alone = ONE_AT_A_TIME.lock().await;
    let authority = url
        .trim_start_matches("etcd://")
        .split(['/', '?'])
        .next()
        .unwrap()
        .to_string();
    let proxy = Proxy::start(authority).await.unwrap();
    let mut cfg = LockConfig::new(format!("etcd://{}", proxy.addr()));
    cfg.command_timeout = Some(Duration::from_secs(1));
    cfg.connect_timeout = Some(Duration::from_secs(1));
    let holder = lockkit_etcd::connect(&cfg).await.unwrap();
    let other = connect(&url, "").await;
    let mut r = raw(&url).await;
    let n = name("compacted-own-key");
    let g = holder.mutex(&n).unwrap().lock().await.unwrap();
    assert_eq!(g.state(), LockState::Held);

    proxy.cut();
    assert!(other.mutex(&n).unwrap().force_unlock().await.unwrap());
    let data = format!("lockkit-test-data/{n}");
    let put = r.put(data.clone(), "", None).await.unwrap();
    let rev = put.header().unwrap().revision();
    r.compact(rev, None).await.unwrap();
    r.delete(data, None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.heal();

    tokio::time::timeout(Duration::from_secs(10), g.lost())
        .await
        .expect("the guard whose key was deleted (and compacted) turned Lost");
    holder.close().await.unwrap();
    other.close().await.unwrap();
}

/// Idle waiters cost etcd nothing per waiter: each waits on a watch (of the key before its own),
/// and keepalives are one per session lease per client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_waiters_cost_the_server_nothing_per_waiter() {
    let Some(url) = url() else { return };
    let _alone = ONE_AT_A_TIME.lock().await;
    let cfg = LockConfig::new(url.clone());
    let holder = lockkit_etcd::connect(&cfg).await.unwrap();
    let waiting = lockkit_etcd::connect(&cfg).await.unwrap();
    let (waiters, quiet) = lockkit_testing::idle::sizes();
    let received = || async { gauge(&url, "grpc_server_msg_received_total") as u64 };
    let taken =
        lockkit_testing::idle::idle_waiters(&holder, &waiting, waiters, quiet, received).await;
    eprintln!("etcd: {taken} requests in {quiet:?} from {waiters} idle waiters");
    // Two session leases' keepalives (every third of the TTL) and a watch progress check a
    // second at most; one request per waiter would be hundreds.
    let bound = 2 * quiet.as_secs() + 10;
    assert!(
        taken <= bound,
        "{taken} requests in {quiet:?} from {waiters} idle waiters (bound {bound})"
    );
    holder.close().await.unwrap();
    waiting.close().await.unwrap();
}
