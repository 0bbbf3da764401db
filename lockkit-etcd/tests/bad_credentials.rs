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
