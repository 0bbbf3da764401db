//! Through etcd's own gRPC proxy (`etcd grpc-proxy start`), which numbers watches itself
//! instead of taking the ids a client chooses: the client maps the proxy's ids to its own, so
//! every name's watches still reach their holders and waiters.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{connect, gauge, name, url};
use lockkit_core::LockState;

const SOON: Duration = Duration::from_secs(5);

/// Watch streams the proxy's clients opened.
const WATCH_STREAMS: &str =
    "grpc_server_started_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\"";

/// An `etcd grpc-proxy` in front of the test server, stopped (by its PID) when dropped.
struct GrpcProxy {
    child: Child,
    url: String,
}

impl Drop for GrpcProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn grpc_proxy(server: &str) -> GrpcProxy {
    let u = lockkit_core::ServerUrl::parse_for(server, &lockkit_etcd::INFO).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let child = Command::new("etcd")
        .args([
            "grpc-proxy",
            "start",
            &format!("--endpoints={}", u.hosts[0]),
            &format!("--listen-addr={listen}"),
        ])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd (installed by scripts/services.sh) runs the gRPC proxy");
    let proxy = GrpcProxy {
        child,
        url: format!("etcd://{listen}"),
    };
    common::eventually(SOON, "the gRPC proxy listens", || async {
        tokio::net::TcpStream::connect(&listen).await.is_ok()
    })
    .await;
    proxy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_through_a_grpc_proxy_reach_their_holders_and_waiters() {
    let Some(url) = url() else { return };
    let proxy = grpc_proxy(&url).await;
    // A short command timeout, so that a quiet stream is checked within the test.
    let locks = connect(&proxy.url, "command_timeout=500ms").await;
    let direct = connect(&url, "").await;

    // Several names on one client's stream, so that ids the proxy numbers differ from ours.
    let names: Vec<String> = (0..4).map(|i| name(&format!("grpc-proxy-{i}"))).collect();
    let mut guards = Vec::new();
    for n in &names {
        guards.push(locks.mutex(n).unwrap().lock().await.unwrap());
    }

    // The proxy answers no progress request: a quiet stream is probed instead, and stays.
    let streams = || gauge(&proxy.url, WATCH_STREAMS);
    let opened = streams();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        streams() - opened,
        0.0,
        "watch streams opened while the client's stayed quiet for 6 command timeouts"
    );

    // A delete of one name's key from elsewhere reaches that holder, and only that one.
    assert!(direct
        .mutex(&names[2])
        .unwrap()
        .force_unlock()
        .await
        .unwrap());
    tokio::time::timeout(SOON, guards[2].lost())
        .await
        .expect("the guard whose key was deleted turned Lost through the proxy");
    for i in [0, 1, 3] {
        assert_eq!(guards[i].state(), LockState::Held, "guard {i}");
    }

    // A waiter through the proxy is woken when the holder releases, and in turn.
    let m = locks.mutex(&names[1]).unwrap();
    let waiter = tokio::spawn(async move { m.lock_for(SOON).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    guards.remove(1).release().await.unwrap();
    let g = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("the waiter got the lock");
    g.release().await.unwrap();

    for g in guards {
        if g.state() == LockState::Held {
            g.release().await.unwrap();
        }
    }

    // An RW lock's prefix watch through the proxy: a reader waiting on a writer gets in when
    // the writer releases.
    let rw = name("grpc-proxy-rw");
    let w = locks.rwlock(&rw).unwrap().write_lock().await.unwrap();
    let r = locks.rwlock(&rw).unwrap();
    let reader = tokio::spawn(async move {
        r.read(&lockkit_core::AcquireOptions::new().wait(SOON))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    w.release().await.unwrap();
    let g = reader
        .await
        .unwrap()
        .unwrap()
        .expect("the reader got the lock");
    g.release().await.unwrap();
    locks.close().await.unwrap();
    direct.close().await.unwrap();
}
