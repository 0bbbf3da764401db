//! Issue 3, point 1: one multiplexed command connection and one pub/sub connection per client;
//! URL forms and options.

mod common;

use std::time::Duration;

use common::*;
use lockkit_core::{ErrorKind, LockConfig};

async fn client_count(admin: &mut redis::aio::MultiplexedConnection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(admin)
        .await
        .unwrap();
    list.lines().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_command_and_one_pubsub_connection_per_client() {
    let server = PrivateRedis::start(&[]);
    let mut admin = admin(&server.url()).await;
    let before = client_count(&mut admin).await;
    let locks = connect(&server.url(), &[]).await;
    // Many concurrent acquires, waits and releases on many names through one handle.
    let holder = locks.mutex("busy").unwrap().lock().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..20 {
        let locks = locks.clone();
        tasks.push(tokio::spawn(async move {
            let g = locks.mutex(&format!("n{i}")).unwrap().lock().await.unwrap();
            let w = locks.mutex("busy").unwrap();
            assert!(w
                .lock_for(Duration::from_millis(100))
                .await
                .unwrap()
                .is_none());
            g.release().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    holder.release().await.unwrap();
    assert_eq!(
        client_count(&mut admin).await - before,
        2,
        "one command connection plus one pub/sub connection"
    );
}

#[tokio::test]
async fn url_db_and_prefix_are_used() {
    let server = PrivateRedis::start(&[]);
    let url = format!("{}/3?prefix=myapp", server.url());
    let locks = connect(&url, &[]).await;
    let g = locks.mutex("orders/1").unwrap().lock().await.unwrap();
    let mut db3 = admin(&format!("{}/3", server.url())).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut db3)
        .await
        .unwrap();
    assert!(
        keys.contains(&"myapp:lock:{orders/1}".to_string()),
        "{keys:?}"
    );
    let mut db0 = admin(&server.url()).await;
    let n: i64 = redis::cmd("DBSIZE").query_async(&mut db0).await.unwrap();
    assert_eq!(n, 0, "keys went to db 0");
    g.release().await.unwrap();
}

#[tokio::test]
async fn lease_and_command_timeout_options_apply() {
    let Some(url) = shared_url() else { return };
    let mut cfg = LockConfig::new(format!("{url}?lease=2s&command_timeout=1s"));
    cfg.key_prefix = Some("lktest-opts".into());
    let locks = lockkit_redis::connect(&cfg).await.unwrap();
    let lock = locks.mutex(&lockkit_testing::unique_name("opts")).unwrap();
    // The default lease comes from the config's lease when the guard uses the default options.
    let g = lock
        .acquire(&lockkit_core::AcquireOptions::new().fixed_lease(Duration::from_secs(2)))
        .await
        .unwrap()
        .unwrap();
    let left = lock.remaining_lease().await.unwrap().unwrap();
    assert!(
        left <= Duration::from_secs(2) && left > Duration::from_millis(1500),
        "{left:?}"
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn bad_urls_and_options_are_config_errors() {
    for bad in [
        "redis://127.0.0.1:1/x",
        "redis://127.0.0.1:1?nope=1",
        "redis://127.0.0.1:1?prefix=%7Bx%7D",
        "redis://127.0.0.1:1?wait_replicas=-1",
        "redis://127.0.0.1:1?fair_lock_wait_timeout=10s",
    ] {
        let e = lockkit_redis::connect(&LockConfig::new(bad))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{bad}: {e}");
    }
}

#[cfg(not(feature = "tls"))]
#[tokio::test]
async fn rediss_without_tls_support_says_so() {
    let e = lockkit_redis::connect(&LockConfig::new("rediss://127.0.0.1:1"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert!(e.to_string().contains("tls"), "{e}");
}

/// rediss:// against a private TLS redis-server whose CA is passed with `tls_ca`.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_connects_with_a_private_ca() {
    let dir = std::env::temp_dir().join(format!("lockkit-tls-{}", std::process::id()));
    let certs = lockkit_testing::make_test_certs(&dir);
    let tls_port = free_port();
    let path = |p: &std::path::Path| p.display().to_string();
    let (port_s, cert, key, ca) = (
        tls_port.to_string(),
        path(&certs.cert),
        path(&certs.key),
        path(&certs.ca),
    );
    let server = PrivateRedis::start(&[
        "--tls-port",
        &port_s,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", tls_port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(10), "no TLS port");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let locks = connect(&url, &[("tls_ca", &ca)]).await;
    let g = locks.mutex("tls").unwrap().lock().await.unwrap();
    let plain = connect(&server.url(), &[]).await;
    assert!(
        plain.mutex("tls").unwrap().is_locked().await.unwrap(),
        "not the same server"
    );
    g.release().await.unwrap();
    // Without the CA the server's certificate is not trusted: a refusal that retrying cannot
    // fix, not a hang.
    let e = lockkit_redis::connect(&LockConfig::new(url.as_str()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    assert!(!e.is_retryable(), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Idle waiters cost the server one script per client per heartbeat, not one per waiter:
/// 200 waiters of one client queued on a held lock for 2.5 s of 250 ms heartbeats run about
/// 10 scripts (they ran 2000 when each waiter sent its own heartbeat). Then every waiter gets
/// the lock in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_waiters_cost_one_script_per_client_per_heartbeat() {
    const WAITERS: usize = 200;
    let server = PrivateRedis::start(&[]);
    let mut admin = admin(&server.url()).await;
    let holder = connect(&server.url(), &[]).await;
    let waiting = connect(&server.url(), &[("waiter_heartbeat", "250ms")]).await;
    let name = lockkit_testing::unique_name("idle-waiters");
    let held = holder.mutex(&name).unwrap().lock().await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WAITERS {
        let m = waiting.mutex(&name).unwrap();
        tasks.spawn(async move {
            let g = m.lock_for(Duration::from_secs(60)).await.unwrap();
            g.expect("every waiter gets the lock")
                .release()
                .await
                .unwrap();
        });
    }
    let queue = lockkit_redis::LockKeys::mutex("lockkit", &name).queue;
    let started = std::time::Instant::now();
    loop {
        let queued: usize = redis::cmd("LLEN")
            .arg(&queue)
            .query_async(&mut admin)
            .await
            .unwrap();
        if queued == WAITERS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{queued} queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Waiters that queued before the client's subscription existed look once more after
    // subscribing: let those attempts pass.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = command_calls(&mut admin, &["evalsha", "eval"]).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let run = command_calls(&mut admin, &["evalsha", "eval"]).await - before;
    println!("idle waiters: {run} scripts in 2.5 s");
    // 10 beats, one more at an edge, perhaps the holder's renewal (every 10 s), and a few
    // late looks of a loaded machine; about 2000 when each waiter sent its own heartbeat.
    assert!(
        run <= 20,
        "{run} scripts in 10 heartbeats of {WAITERS} idle waiters in one client"
    );
    held.release().await.unwrap();
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
}
