//! Bad credentials against the secure profile (`scripts/services.sh up --secure`): a wrong
//! password, a server certificate the client does not trust and an expired client certificate
//! each give a typed, non-retryable error, quickly, without a reconnect storm (counted with
//! the server's `total_connections_received`).

use std::time::{Duration, Instant};

use lockkit_core::{DistLockExt, Error, ErrorKind, LockConfig};

/// A hang guard, not a performance bound.
const QUICK: Duration = Duration::from_secs(5);

fn secure_url() -> Option<String> {
    lockkit_core::testing::server_url("redis_secure")
}

/// The connections the server has accepted so far, asked with `redis-cli` as the admin identity.
fn connections_received() -> Option<u64> {
    let admin =
        lockkit_core::ServerUrl::parse(&std::env::var("LOCKKIT_TEST_REDIS_SECURE_ADMIN_URL").ok()?)
            .ok()?;
    let certs = std::path::PathBuf::from(std::env::var("LOCKKIT_TEST_SECURE_CERTS").ok()?);
    let out = std::process::Command::new("redis-cli")
        .arg("--tls")
        .arg("--cacert")
        .arg(certs.join("ca.pem"))
        .arg("--cert")
        .arg(certs.join("client.pem"))
        .arg("--key")
        .arg(certs.join("client.key"))
        .args([
            "-h",
            &admin.hosts[0].host,
            "-p",
            &admin.hosts[0].port.to_string(),
        ])
        .args(["--user", admin.username.as_deref()?, "--no-auth-warning"])
        .env("REDISCLI_AUTH", admin.password.as_ref()?.expose())
        .args(["info", "stats"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Connects with `url` and tries a lock; the error it ends in, checked for speed and kind.
async fn refused(url: String, secret: &str) -> Error {
    // The server's connection count is shared: count one refusal at a time.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_AT_A_TIME.lock().await;
    let before = connections_received();
    let start = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(30), async {
        let locks = lockkit_redis::connect(&LockConfig::new(url)).await?;
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
    if let (Some(b), Some(a)) = (before, connections_received()) {
        // The probe itself adds one; a client that kept reconnecting would add many more.
        assert!(a - b <= 4, "{} connections for one refused connect", a - b);
    }
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

/// A private redis-server presenting a certificate that expired in 2020, stopped when dropped.
struct ExpiredServer(std::process::Child);

impl Drop for ExpiredServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_server_certificate_is_refused() {
    let Some(url) = secure_url() else { return };
    let pw = password_of(&url);
    let certs = std::path::PathBuf::from(std::env::var("LOCKKIT_TEST_SECURE_CERTS").unwrap());
    let port = lockkit_core::testing::free_port();
    let child = std::process::Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
        .arg("--tls-cert-file")
        .arg(certs.join("expired-server.pem"))
        .arg("--tls-key-file")
        .arg(certs.join("expired-server.key"))
        .arg("--tls-ca-cert-file")
        .arg(certs.join("ca.pem"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start redis-server");
    let _server = ExpiredServer(child);
    let until = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < until,
            "the private redis-server did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shared = lockkit_core::ServerUrl::parse(&url).unwrap().hosts[0].to_string();
    let bad = url.replacen(&shared, &format!("127.0.0.1:{port}"), 1);
    let e = refused(bad, &pw).await;
    assert_eq!(e.kind(), &ErrorKind::Auth, "{e}");
}
