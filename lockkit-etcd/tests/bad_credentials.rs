//! Bad credentials against the secure profile (`scripts/services.sh up --secure`): a wrong
//! password, a server certificate the client does not trust and an expired or missing client
//! certificate each give a typed, non-retryable error, quickly (the bound on time also rules out
//! a client that keeps reconnecting until its connect timeout).

use std::time::{Duration, Instant};

use lockkit_core::{DistLockExt, Error, ErrorKind, LockConfig};

/// A hang guard, not a performance bound.
const QUICK: Duration = Duration::from_secs(5);

fn secure_url() -> Option<String> {
    lockkit_core::testing::server_url("etcd_secure")
}

/// Connects with `url` and tries a lock; the error it ends in, checked for speed and kind.
async fn refused(url: String, secret: &str) -> Error {
    let start = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(30), async {
        let locks = lockkit_etcd::connect(&LockConfig::new(url)).await?;
        locks.mutex("bad-credentials")?.try_lock().await.map(drop)
    })
    .await
    .expect("a refused connection must not hang");
    let took = start.elapsed();
    let e = outcome.expect_err("bad credentials must be refused");
    assert!(took < QUICK, "refusal took {took:?}: {e}");
    assert!(!e.is_retryable(), "{e} must not be retryable");
    let shown = format!("{e} {e:?} {:?}", std::error::Error::source(&e));
    assert!(
        !shown.contains(secret),
        "the error shows the secret: {shown}"
    );
    e
}

fn password_of(url: &str) -> String {
    lockkit_core::ServerUrl::parse(url)
        .unwrap()
        .password
        .unwrap()
        .expose()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_auth() {
    let Some(url) = secure_url() else { return };
    let pw = password_of(&url);
    let bad = url.replacen(&format!(":{pw}@"), ":not-the-password@", 1);
    let e = refused(bad, "not-the-password").await;
    assert_eq!(e.kind(), &ErrorKind::Auth, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_server_certificate_is_refused() {
    let Some(url) = secure_url() else { return };
    let pw = password_of(&url);
    let bad = url.replacen("/ca.pem", "/untrusted-ca.pem", 1);
    assert_ne!(bad, url);
    let e = refused(bad, &pw).await;
    assert_eq!(e.kind(), &ErrorKind::Auth, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_client_certificate_is_refused() {
    let Some(url) = secure_url() else { return };
    let pw = password_of(&url);
    let bad = url
        .replacen("/client.pem", "/expired-client.pem", 1)
        .replacen("/client.key", "/expired-client.key", 1);
    assert_ne!(bad, url);
    let e = refused(bad, &pw).await;
    assert_eq!(e.kind(), &ErrorKind::Auth, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_client_certificate_is_refused() {
    let Some(url) = secure_url() else { return };
    let pw = password_of(&url);
    let base = url.split_once('?').unwrap().0;
    let ca = lockkit_core::ServerUrl::parse(&url).unwrap();
    let bad = format!("{base}?tls_ca={}", ca.param("tls_ca").unwrap());
    let e = refused(bad, &pw).await;
    assert_eq!(e.kind(), &ErrorKind::Auth, "{e}");
}

/// A private etcd presenting a certificate that expired in 2020, stopped when dropped.
struct ExpiredServer(std::process::Child, std::path::PathBuf);

impl Drop for ExpiredServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_server_certificate_is_refused() {
    let Some(url) = secure_url() else { return };
    let pw = password_of(&url);
    let certs = std::path::PathBuf::from(std::env::var("LOCKKIT_TEST_SECURE_CERTS").unwrap());
    let (port, peer) = (
        lockkit_core::testing::free_port(),
        lockkit_core::testing::free_port(),
    );
    let dir = std::env::temp_dir().join(format!("lockkit-etcd-expired-{port}"));
    let client_url = format!("https://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = std::process::Command::new("etcd")
        .args(["--name", "expired", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("expired={peer_url}")])
        .arg("--cert-file")
        .arg(certs.join("expired-server.pem"))
        .arg("--key-file")
        .arg(certs.join("expired-server.key"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start etcd");
    let _server = ExpiredServer(child, dir);
    let until = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < until, "the private etcd did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let shared = lockkit_core::ServerUrl::parse(&url).unwrap().hosts[0].to_string();
    let bad = url.replacen(&shared, &format!("127.0.0.1:{port}"), 1);
    let e = refused(bad, &pw).await;
    assert_eq!(e.kind(), &ErrorKind::Auth, "{e}");
}
