//! Bad credentials against the secure profile (`scripts/services.sh up --secure`): a wrong
//! password, a server certificate the client does not trust and an expired client certificate
//! each give a typed, non-retryable error, quickly, without a reconnect storm (counted with
//! the server's `total_connections_received`). The checks shared by every backend are
//! `lockkit_testing::assert_refused` and `bad_credentials_suite!`.

mod common;

use std::time::Duration;

use common::{free_port, PrivateRedis};
use lockkit_core::{Error, ErrorKind, LockConfig};
use lockkit_testing::{assert_refused, secure_certs, wait_for_port, BadCredential};

fn secure_url() -> Option<String> {
    lockkit_testing::server_url("redis_secure")
}

/// The connections the server has accepted so far, asked with `redis-cli` as the admin identity.
fn connections_received() -> Option<u64> {
    let admin = lockkit_core::ServerUrl::parse_for(
        &std::env::var("LOCKKIT_TEST_REDIS_SECURE_ADMIN_URL").ok()?,
        &lockkit_redis::INFO,
    )
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

/// Connects with `url` and tries a lock; the error it ends in, checked for speed and kind, and
/// for the connections it cost the server.
async fn refused(url: String, secret: &str) -> Error {
    // The server's connection count is shared: count one refusal at a time.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_AT_A_TIME.lock().await;
    let before = connections_received();
    let e = assert_refused(lockkit_redis::connect(&LockConfig::new(url)), secret).await;
    if let (Some(b), Some(a)) = (before, connections_received()) {
        // The probe itself adds one; a client that kept reconnecting would add many more.
        assert!(a - b <= 4, "{} connections for one refused connect", a - b);
    }
    e
}

lockkit_testing::bad_credentials_suite!(secure_url, refused);

/// A private redis-server presenting a certificate that expired in 2020 is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_server_certificate_is_refused() {
    let Some(url) = secure_url() else { return };
    let certs = secure_certs();
    let port = free_port();
    let path = |name: &str| certs.join(name).display().to_string();
    let (cert, key, ca) = (
        path("expired-server.pem"),
        path("expired-server.key"),
        path("ca.pem"),
    );
    let _server = PrivateRedis::start(&[
        "--tls-port",
        &port.to_string(),
        "--tls-auth-clients",
        "no",
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
    ]);
    let (every, within) = (Duration::from_millis(20), Duration::from_secs(10));
    wait_for_port(port, within, every, "the private redis-server's TLS port").await;
    let (bad, pw) = BadCredential::ServerAt(port).apply(&url);
    let e = refused(bad, &pw).await;
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
}
