//! Every mutex name of one client shares one watch stream. Alone in their binary, one at a time:
//! one reads etcd's own count of watch streams, which tests running at the same time would move,
//! and one compacts the server's history, which would break other tests' watches from past
//! revisions.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::{connect, eventually, name, raw, url};
use lockkit_core::{LockConfig, LockState};
use lockkit_testing::proxy::Proxy;

const SOON: Duration = Duration::from_secs(5);

/// The cases run one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// etcd's metric `metric` (a gauge), read from its `/metrics` page on the client port.
fn gauge(url: &str, metric: &str) -> f64 {
    let u = lockkit_core::ServerUrl::parse_for(url, &lockkit_etcd::INFO).unwrap();
    let mut conn = std::net::TcpStream::connect(u.hosts[0].to_string()).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut page = String::new();
    conn.read_to_string(&mut page).unwrap();
    page.lines()
        .find_map(|l| {
            l.strip_prefix(metric)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {metric} on etcd's /metrics page"))
}

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
