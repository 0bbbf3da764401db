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
            // Tokens lapse after 2 s unused (etcd's default is 5 minutes).
            "--auth-token-ttl=2",
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
    let ep = enable_auth(&etcd).await;

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

    let locks = lockkit_etcd::connect(&as_root(format!("etcd://{ep}?lease_ttl=2s")))
        .await
        .unwrap();
    let m = locks.mutex("authed").unwrap();
    let g = m.lock().await.unwrap();
    assert!(m.try_lock().await.unwrap().is_none());
    g.release().await.unwrap();
    locks.close().await.unwrap();
}

/// `root` with password `s3cret` and auth enabled on `etcd`; returns its endpoint.
async fn enable_auth(etcd: &PrivateEtcd) -> String {
    let ep = format!("127.0.0.1:{}", etcd.port);
    let mut c = Client::connect([ep.as_str()], None).await.unwrap();
    c.user_add("root", "s3cret", None).await.unwrap();
    c.user_grant_role("root", "root").await.unwrap();
    c.auth_enable().await.unwrap();
    ep
}

/// A lockkit config for `url` as `root`.
fn as_root(url: String) -> LockConfig {
    let mut cfg = LockConfig::new(url);
    cfg.username = Some("root".into());
    cfg.password = Some(lockkit_core::Secret::new("s3cret"));
    cfg
}

/// etcd forgets an auth token unused for its `--auth-token-ttl` (5 minutes by default): a
/// handle then logs in again and goes on, as etcd's Go client does. Each endpoint's client kept
/// the token it got when it connected, so once a handle had sat idle that long every request
/// failed with `Auth` (not retryable), a holder's release included: nothing could be acquired
/// or released until the process restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_idle_past_the_token_ttl_logs_in_again() {
    let Some(etcd) = start().await else { return };
    let ep = enable_auth(&etcd).await;
    let locks = lockkit_etcd::connect(&as_root(format!("etcd://{ep}?lease_ttl=10s")))
        .await
        .unwrap();
    let waiter = lockkit_etcd::connect(&as_root(format!("etcd://{ep}?lease_ttl=10s")))
        .await
        .unwrap();
    let m = locks.mutex("idle").unwrap();
    let w = waiter.mutex("idle").unwrap();
    let g = m.try_lock().await.unwrap().expect("free");
    // The waiter's watch stream is open, and stays so through the idle time.
    let short = w.lock_for(Duration::from_millis(200)).await.unwrap();
    assert!(short.is_none(), "held by the other handle");
    // etcd looks for lapsed tokens every second.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let waiting = tokio::spawn(async move { w.lock_for(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    g.release().await.expect("a release after the token lapsed");
    let g = waiting
        .await
        .unwrap()
        .expect("a wait after the token lapsed");
    g.expect("handed on").release().await.unwrap();
    let g = m
        .try_lock()
        .await
        .expect("an acquire after the token lapsed");
    g.expect("free").release().await.unwrap();
    assert!(!m.is_locked().await.unwrap());
    // A new name's watch, on the watch stream the waiter opened before the token lapsed.
    let r = waiter.rwlock("fresh").unwrap();
    let read = r
        .read_lock()
        .await
        .expect("a new watch after the token lapsed");
    read.release().await.unwrap();
    locks.close().await.unwrap();
    waiter.close().await.unwrap();
}
