//! `etcds://` against a private etcd serving TLS with a certificate from a throwaway CA made in
//! a temp dir (rcgen, through `make_test_certs`). Skipped when `etcd` is missing, unless
//! `LOCKKIT_TEST_REQUIRE` names etcd.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockkit_core::{ErrorKind, LockConfig};
use lockkit_testing::{free_port, make_test_certs, tool_available};

/// A private TLS etcd, killed and waited for when dropped.
struct TlsEtcd {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl TlsEtcd {
    fn start() -> Option<TlsEtcd> {
        if !tool_available("etcd", "--version", "etcd") {
            return None;
        }
        let (port, peer) = (free_port(), free_port());
        let dir =
            std::env::temp_dir().join(format!("lockkit-etcd-tls-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let certs = make_test_certs(&dir);
        let client = format!("https://127.0.0.1:{port}");
        let peer = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "tls1", "--data-dir"])
            .arg(dir.join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                &format!("tls1={peer}"),
                "--initial-cluster-state",
                "new",
            ])
            .arg("--cert-file")
            .arg(&certs.cert)
            .arg("--key-file")
            .arg(&certs.key)
            .args([
                "--heartbeat-interval=50",
                "--election-timeout=500",
                "--logger=zap",
                "--log-outputs=stderr",
            ])
            .env_remove("ETCD_NAME")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd");
        Some(TlsEtcd { child, dir, port })
    }

    fn config(&self, with_ca: bool) -> LockConfig {
        let mut cfg = LockConfig::new(format!("etcds://127.0.0.1:{}?lease_ttl=2s", self.port));
        if with_ca {
            cfg.options.insert(
                "tls_ca".into(),
                self.dir.join("ca.pem").display().to_string(),
            );
        }
        cfg.connect_timeout = Some(Duration::from_secs(2));
        cfg.command_timeout = Some(Duration::from_secs(2));
        cfg
    }
}

#[tokio::test]
async fn etcds_with_the_servers_ca_locks_and_untrusted_or_plain_fails() {
    let Some(server) = TlsEtcd::start() else {
        return;
    };

    // Wait for the server through the real TLS path.
    let started = Instant::now();
    let locks = loop {
        match lockkit_etcd::connect(&server.config(true)).await {
            Ok(l) => break l,
            Err(e) if started.elapsed() < Duration::from_secs(20) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("TLS etcd never answered: {e}"),
        }
    };
    let lock = locks.mutex("tls/job").unwrap();
    let g = lock.lock().await.unwrap();
    assert!(locks
        .mutex("tls/job")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_none());
    g.release().await.unwrap();
    assert!(lock.try_lock().await.unwrap().is_some());
    locks.close().await.unwrap();

    // A client that does not trust the throwaway CA must fail, quickly, never hang.
    let t = Instant::now();
    let err = lockkit_etcd::connect(&server.config(false))
        .await
        .expect_err("untrusted certificate accepted");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "untrusted TLS took {:?}",
        t.elapsed()
    );
    // etcd-client passes the TLS error along: it is read as a refusal from that error itself,
    // not from a handshake probe of our own (whose message says "TLS with ... refused").
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert!(!err.to_string().contains("refused"), "{err}");

    // Plain etcd:// to a TLS port fails too.
    let mut plain = server.config(false);
    plain.url = format!("etcd://127.0.0.1:{}", server.port);
    assert!(
        lockkit_etcd::connect(&plain).await.is_err(),
        "plaintext client talked to a TLS server"
    );
}

#[tokio::test]
async fn tls_options_are_checked() {
    let mut cfg = LockConfig::new("etcds://127.0.0.1:1");
    cfg.options
        .insert("tls_ca".into(), "/nonexistent/ca.pem".into());
    let e = lockkit_etcd::connect(&cfg).await.unwrap_err();
    assert_eq!(e.kind(), lockkit_core::ErrorKind::Config, "{e}");
    let mut cfg = LockConfig::new("etcds://127.0.0.1:1");
    cfg.options.insert("tls_cert".into(), "/x.pem".into());
    let e = lockkit_etcd::connect(&cfg).await.unwrap_err();
    assert_eq!(e.kind(), lockkit_core::ErrorKind::Config, "{e}");
}
