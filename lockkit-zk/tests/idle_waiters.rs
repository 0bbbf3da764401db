//! Idle waiters cost ZooKeeper nothing per waiter: each waits on a watch of the node ahead of
//! its own, and the session heartbeat is one per client. Alone in its binary: it reads the
//! server's packet count (`mntr`), which tests running at the same time would move.

use std::io::{Read, Write};

use lockkit_core::LockConfig;
use lockkit_testing::idle::{idle_waiters, sizes};

/// `zk_packets_received` from the server's `mntr` (a four-letter word on the client port).
async fn packets(url: &str) -> u64 {
    let host = url
        .trim_start_matches("zk://")
        .split(['/', '?', ','])
        .next()
        .unwrap()
        .to_string();
    let page = tokio::task::spawn_blocking(move || {
        let mut conn = std::net::TcpStream::connect(host).unwrap();
        conn.write_all(b"mntr").unwrap();
        let mut page = String::new();
        conn.read_to_string(&mut page).unwrap();
        page
    })
    .await
    .unwrap();
    page.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received")?.trim().parse().ok())
        .expect("zk_packets_received in mntr")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_waiters_cost_the_server_nothing_per_waiter() {
    let Some(url) = lockkit_testing::server_url("zk") else {
        return;
    };
    let cfg = LockConfig::new(url.clone());
    let holder = lockkit_zk::connect(&cfg).await.unwrap();
    let waiting = lockkit_zk::connect(&cfg).await.unwrap();
    let (waiters, quiet) = sizes();
    let taken = idle_waiters(&holder, &waiting, waiters, quiet, || packets(&url)).await;
    eprintln!("zk: {taken} requests in {quiet:?} from {waiters} idle waiters");
    // Two sessions' heartbeats (every quarter of the session timeout) and the client's pings:
    // a few a second at most, however many wait. One request per waiter would be hundreds.
    let bound = 4 * quiet.as_secs() + 10;
    assert!(
        taken <= bound,
        "{taken} requests in {quiet:?} from {waiters} idle waiters (bound {bound})"
    );
    holder.close().await.unwrap();
    waiting.close().await.unwrap();
}
