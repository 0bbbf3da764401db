//! User/password authentication, against a private etcd started on free ports with auth enabled
//! (the shared test server stays as it is). Skipped when the `etcd` binary is missing, unless
//! `LOCKKIT_TEST_REQUIRE` names etcd.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockkit_core::{ErrorKind, LockConfig};
use lockkit_etcd::etcd_client::Client;
use lockkit_testing::{free_port, tool_available};

/// A private etcd, stopped (SIGKILL, then waited for) when dropped.
struct PrivateEtcd {
    child: Child,
    dir: std::path::PathBuf,
    port: u16,
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn start() -> Option<PrivateEtcd> {
    if !tool_available("etcd", "--version", "etcd") {
        return None;
    }
    let bin = "etcd";
    let (port, peer) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("lockkit-etcd-auth-{}-{port}", std::process::id()));
    let child = Command::new(bin)
        .args(["--name", "auth1", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen-client-urls", &format!("http://127.0.0.1:{port}")])
        .args([
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{port}"),
        ])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
        ])
        .args([
            "--initial-cluster",
            &format!("auth1=http://127.0.0.1:{peer}"),
        ])
        .args([
            "--initial-cluster-state",
            "new",
            "--logger=zap",
            "--log-outputs=stderr",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let etcd = PrivateEtcd { child, dir, port };
    let ep = format!("127.0.0.1:{port}");
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Ok(mut c)) =
            tokio::time::timeout(Duration::from_secs(1), Client::connect([ep.as_str()], None)).await
        {
            if c.get("x", None).await.is_ok() {
                break;
            }
        }
        assert!(Instant::now() < until, "private etcd did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Some(etcd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_and_password() {
    let Some(etcd) = start().await else { return };
    let ep = format!("127.0.0.1:{}", etcd.port);
    let mut c = Client::connect([ep.as_str()], None).await.unwrap();
    c.user_add("root", "s3cret", None).await.unwrap();
    c.user_grant_role("root", "root").await.unwrap();
    c.auth_enable().await.unwrap();

    let bad = lockkit_etcd::connect(&LockConfig::new(format!("etcd://root:wrong@{ep}")))
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::Auth, "{bad}");
    assert!(!bad.is_retryable());
    assert!(!format!("{bad:?}").contains("wrong"));

    let anonymous = lockkit_etcd::connect(&LockConfig::new(format!("etcd://{ep}"))).await;
    match anonymous {
        Ok(locks) => {
            let e = locks.mutex("a").unwrap().try_lock().await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
        }
        Err(e) => assert_eq!(e.kind(), ErrorKind::Auth, "{e}"),
    }

    let mut cfg = LockConfig::new(format!("etcd://{ep}?lease_ttl=2s"));
    cfg.username = Some("root".into());
    cfg.password = Some(lockkit_core::Secret::new("s3cret"));
    let locks = lockkit_etcd::connect(&cfg).await.unwrap();
    let m = locks.mutex("authed").unwrap();
    let g = m.lock().await.unwrap();
    assert!(m.try_lock().await.unwrap().is_none());
    g.release().await.unwrap();
    locks.close().await.unwrap();
}
