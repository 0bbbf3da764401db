//! Through etcd's own gRPC proxy (`etcd grpc-proxy start`), which numbers watches itself
//! instead of taking the ids a client chooses: the client maps the proxy's ids to its own, so
//! every name's watches still reach their holders and waiters.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{connect, name, url};
use lockkit_core::{LockGuard, LockState};
use lockkit_etcd::EtcdLocks;

const SOON: Duration = Duration::from_secs(5);

/// Watch streams this process gave up and restarted, from lockkit's own events (the proxy's
/// `/metrics` page is etcd's, which counts the proxy's streams, not its clients').
fn restarts() -> usize {
    lockkit_testing::spans::events_mentioning("restarting it")
}

/// Asserts that no watch stream restarts while `what` stays quiet for 4 command timeouts.
async fn stays_quiet(what: &str) {
    let opened = restarts();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        restarts() - opened,
        0,
        "watch streams restarted while {what} stayed quiet for 4 command timeouts"
    );
}

/// Deletes `name`'s key from `direct`, and asserts that `guard` (its holder through the proxy)
/// turns Lost.
async fn force_unlock_reaches(direct: &EtcdLocks, name: &str, guard: &LockGuard, what: &str) {
    assert!(direct.mutex(name).unwrap().force_unlock().await.unwrap());
    tokio::time::timeout(SOON, guard.lost()).await.expect(what);
}

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
    assert!(
        lockkit_testing::spans::capture(),
        "lockkit's events are seen"
    );
    let proxy = grpc_proxy(&url).await;
    // A short command timeout, so that a quiet stream is checked within the test.
    let locks = connect(&proxy.url, "command_timeout=1s").await;
    let direct = connect(&url, "").await;

    // Several names on one client's stream, so that ids the proxy numbers differ from ours.
    let names: Vec<String> = (0..4).map(|i| name(&format!("grpc-proxy-{i}"))).collect();
    let mut guards = Vec::new();
    for n in &names {
        guards.push(locks.mutex(n).unwrap().lock().await.unwrap());
    }

    // The proxy answers no progress request: a quiet stream is probed instead, and stays.
    stays_quiet("the client's").await;

    // A delete of one name's key from elsewhere reaches that holder, and only that one.
    force_unlock_reaches(
        &direct,
        &names[2],
        &guards[2],
        "the guard whose key was deleted turned Lost through the proxy",
    )
    .await;
    for i in [0, 1, 3] {
        assert_eq!(guards[i].state(), LockState::Held, "guard {i}");
    }

    // Many creates and cancels at once on the client's stream (waits that end at once, their
    // watches cancelled while their creates may still be in flight), and the watches still
    // reach the right guards.
    let opened = restarts();
    let mut churn = Vec::new();
    for t in 0..8 {
        let (locks, held, own) = (
            locks.clone(),
            names[3].clone(),
            name(&format!("grpc-proxy-churn-{t}")),
        );
        churn.push(tokio::spawn(async move {
            for _ in 0..10 {
                assert!(locks
                    .mutex(&held)
                    .unwrap()
                    .try_lock()
                    .await
                    .unwrap()
                    .is_none());
                let g = locks.mutex(&own).unwrap().lock().await.unwrap();
                g.release().await.unwrap();
            }
        }));
    }
    for c in churn {
        c.await.unwrap();
    }
    assert_eq!(
        restarts() - opened,
        0,
        "the stream restarted (a cancel reached another watch?)"
    );
    force_unlock_reaches(
        &direct,
        &names[0],
        &guards[0],
        "after the churn, the guard whose key was deleted turned Lost",
    )
    .await;
    assert_eq!(guards[3].state(), LockState::Held);

    // A waiter through the proxy is woken when the holder releases, by its watch: well before
    // its wait would have ended and looked anyway.
    let m = locks.mutex(&names[1]).unwrap();
    let waiter = tokio::spawn(async move { m.lock_for(SOON * 2).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    guards.remove(1).release().await.unwrap();
    let released = std::time::Instant::now();
    let g = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("the waiter got the lock");
    assert!(
        released.elapsed() < SOON,
        "the waiter got in {:?} after the release",
        released.elapsed()
    );
    g.release().await.unwrap();

    for g in guards {
        if g.state() == LockState::Held {
            g.release().await.unwrap();
        }
    }

    // An RW lock's prefix watch through the proxy: a reader waiting on a writer gets in when
    // the writer releases, by its watch.
    let rw = name("grpc-proxy-rw");
    let w = locks.rwlock(&rw).unwrap().write_lock().await.unwrap();
    let r = locks.rwlock(&rw).unwrap();
    let reader = tokio::spawn(async move {
        r.read(&lockkit_core::AcquireOptions::new().wait(SOON * 2))
            .await
    });
    // Its prefix stream is quiet while the writer holds: probed too, it stays.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stays_quiet("an RW lock's").await;
    w.release().await.unwrap();
    let released = std::time::Instant::now();
    let g = reader
        .await
        .unwrap()
        .unwrap()
        .expect("the reader got the lock");
    assert!(
        released.elapsed() < SOON,
        "the reader got in {:?} after the release",
        released.elapsed()
    );
    g.release().await.unwrap();
    locks.close().await.unwrap();
    direct.close().await.unwrap();
}

/// The proxy passes etcd's "lease not found" on without its code (as `Unknown`): a session
/// lease revoked behind the client's back is still told apart from a broken connection, and the
/// next acquire through the proxy takes a new lease instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_revoked_behind_the_proxy_is_replaced() {
    let Some(url) = url() else { return };
    let proxy = grpc_proxy(&url).await;
    let locks = connect(&proxy.url, "").await;
    let mut raw = common::raw(&url).await;
    let n = name("grpc-proxy-lease");
    let mutex = locks.mutex(&n).unwrap();
    let g = mutex.lock().await.unwrap();
    let lease = common::keys(&mut raw, &n).await[0].2;
    g.release().await.unwrap();
    // Revoked, and the next acquire sent at once, before a keepalive can notice.
    raw.lease_revoke(lease).await.unwrap();
    let g = mutex
        .lock_for(SOON)
        .await
        .expect("an acquire on a revoked lease takes a new one")
        .expect("the lock is free");
    let now = common::keys(&mut raw, &n).await[0].2;
    assert_ne!(now, lease, "the acquire kept the dead lease");
    g.release().await.unwrap();
    locks.close().await.unwrap();
}
