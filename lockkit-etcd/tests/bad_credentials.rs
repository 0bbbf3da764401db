//! Bad credentials against the secure profile (`scripts/services.sh up --secure`): a wrong
//! password, a server certificate the client does not trust and an expired or missing client
//! certificate each give a typed, non-retryable error, quickly (the bound on time also rules out
//! a client that keeps reconnecting until its connect timeout). The checks shared by every
//! backend are `lockkit_testing::assert_refused` and `bad_credentials_suite!`.

use std::time::Duration;

use lockkit_core::{Error, ErrorKind, LockConfig};
use lockkit_testing::{
    assert_refused, free_port, secure_certs, wait_for_port, BadCredential, PrivateServer,
};

fn secure_url() -> Option<String> {
    lockkit_testing::server_url("etcd_secure")
}

/// Connects with `url` and tries a lock; the error it ends in, checked for speed and kind.
async fn refused(url: String, secret: &str) -> Error {
    assert_refused(lockkit_etcd::connect(&LockConfig::new(url)), secret).await
}

lockkit_testing::bad_credentials_suite!(secure_url, refused);

/// A private etcd presenting a certificate that expired in 2020 is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_server_certificate_is_refused() {
    let Some(url) = secure_url() else { return };
    let certs = secure_certs();
    let (port, peer) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("lockkit-etcd-expired-{port}"));
    let client_url = format!("https://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let mut etcd = std::process::Command::new("etcd");
    etcd.args(["--name", "expired", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("expired={peer_url}")])
        .arg("--cert-file")
        .arg(certs.join("expired-server.pem"))
        .arg("--key-file")
        .arg(certs.join("expired-server.key"));
    let _server = PrivateServer::spawn(etcd, Some(dir));
    let (every, within) = (Duration::from_millis(50), Duration::from_secs(20));
    wait_for_port(port, within, every, "the private etcd").await;
    let (bad, pw) = BadCredential::ServerAt(port).apply(&url);
    let e = refused(bad, &pw).await;
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
}

/// A password with no user name used to be dropped without a word, and the handle connected
/// unauthenticated; ZooKeeper refuses the same URL.
#[tokio::test]
async fn a_password_without_a_user_is_refused() {
    let mut set = LockConfig::new("etcd://127.0.0.1:1");
    set.password = Some(lockkit_core::Secret::new("hunter2"));
    for cfg in [LockConfig::new("etcd://:hunter2@127.0.0.1:1"), set] {
        let e = lockkit_etcd::connect(&cfg).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{e}");
        assert!(e.to_string().contains("needs a name"), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
