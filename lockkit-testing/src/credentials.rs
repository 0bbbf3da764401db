//! Checks for bad credentials against the secure profile (`scripts/services.sh up --secure`),
//! shared by the backends' `bad_credentials` tests (feature `testing`).
//!
//! A wrong password, a server certificate the client does not trust and an expired or missing
//! client certificate must each give a typed, non-retryable error, quickly, that does not show the
//! secret. [`bad_credentials_suite!`] expands the cases that only change the URL into one
//! `#[tokio::test]` each; a backend adds its own cases (a private server with an expired
//! certificate, say) with [`BadCredential::ServerAt`] and [`assert_refused`]:
//!
//! ```ignore
//! fn secure_url() -> Option<String> {
//!     lockkit_testing::server_url("etcd_secure")
//! }
//! async fn refused(url: String, secret: &str) -> lockkit_core::Error {
//!     let config = lockkit_core::LockConfig::new(url);
//!     lockkit_testing::assert_refused(lockkit_etcd::connect(&config), secret).await
//! }
//! lockkit_testing::bad_credentials_suite!(secure_url, refused);
//! ```
//!
//! [`bad_credentials_suite!`]: crate::bad_credentials_suite

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lockkit_core::{Error, Locks, ServerUrl};

/// A hang guard, not a performance bound: a refusal takes less than this (which also rules out
/// a client that keeps reconnecting until its connect timeout).
pub const QUICK: Duration = Duration::from_secs(5);

/// The password [`BadCredential::WrongPassword`] puts in the URL.
pub const WRONG_PASSWORD: &str = "not-the-password";

/// One way to spoil a working secure-profile URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadCredential {
    /// The password replaced with [`WRONG_PASSWORD`].
    WrongPassword,
    /// `tls_ca` pointing at `untrusted-ca.pem`, a CA that did not sign the server certificate.
    UntrustedServerCa,
    /// The client certificate and key replaced with `expired-client.pem` / `.key`.
    ExpiredClientCert,
    /// No client certificate: only `tls_ca` is kept of the query.
    MissingClientCert,
    /// The first host replaced with `127.0.0.1:PORT` (a private server, e.g. one presenting an
    /// expired certificate).
    ServerAt(u16),
}

impl BadCredential {
    /// `url` spoilt this way, and the secret the error must not show (the password that was
    /// sent). Panics if `url` has no password or lacks what this variant replaces.
    pub fn apply(self, url: &str) -> (String, String) {
        let pw = password_of(url);
        let bad = match self {
            BadCredential::WrongPassword => {
                let bad = url.replacen(&format!(":{pw}@"), &format!(":{WRONG_PASSWORD}@"), 1);
                return (bad, WRONG_PASSWORD.to_string());
            }
            BadCredential::UntrustedServerCa => url.replacen("/ca.pem", "/untrusted-ca.pem", 1),
            BadCredential::ExpiredClientCert => url
                .replacen("/client.pem", "/expired-client.pem", 1)
                .replacen("/client.key", "/expired-client.key", 1),
            BadCredential::MissingClientCert => {
                let base = url.split_once('?').expect("a query in the secure URL").0;
                let parsed = ServerUrl::parse(url).expect("a valid URL");
                let ca = parsed.param("tls_ca").expect("tls_ca in the secure URL");
                format!("{base}?tls_ca={ca}")
            }
            BadCredential::ServerAt(port) => {
                let parsed = ServerUrl::parse(url).expect("a valid URL");
                let shared = parsed.hosts[0].to_string();
                url.replacen(&shared, &format!("127.0.0.1:{port}"), 1)
            }
        };
        assert_ne!(bad, url, "{self:?} changed nothing");
        (bad, pw)
    }
}

/// The password in `url` (panics if there is none).
pub fn password_of(url: &str) -> String {
    ServerUrl::parse(url)
        .expect("a valid URL")
        .password
        .expect("a password in the URL")
        .expose()
        .to_string()
}

/// The secure profile's certificate directory (`LOCKKIT_TEST_SECURE_CERTS`; panics if unset).
pub fn secure_certs() -> PathBuf {
    std::env::var("LOCKKIT_TEST_SECURE_CERTS")
        .expect("LOCKKIT_TEST_SECURE_CERTS (scripts/services.sh up --secure)")
        .into()
}

/// Runs `connect` and tries a lock on the handle; checks that this ends in an error within
/// [`QUICK`], that the error is not retryable and that neither it nor its source shows `secret`.
/// Returns the error, for the caller to check its kind.
pub async fn assert_refused<F>(connect: F, secret: &str) -> Error
where
    F: Future<Output = Result<Locks, Error>>,
{
    let start = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(30), async {
        let locks = connect.await?;
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

/// Expands the URL-only bad-credential cases into one `#[tokio::test]` each, every one expecting
/// an `Auth` error: `$url` is a fn returning the secure URL (`Option<String>`, `None` skips),
/// `$refused` an async fn `(url: String, secret: &str) -> Error`, typically built on
/// [`assert_refused`](crate::assert_refused).
#[macro_export]
macro_rules! bad_credentials_suite {
    ($url:path, $refused:path) => {
        $crate::__bad_credentials_cases!($url, $refused;
            wrong_password_is_auth => WrongPassword,
            untrusted_server_certificate_is_refused => UntrustedServerCa,
            expired_client_certificate_is_refused => ExpiredClientCert,
            missing_client_certificate_is_refused => MissingClientCert,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __bad_credentials_cases {
    ($url:path, $refused:path; $($case:ident => $bad:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(url) = $url() else { return };
                let (bad, secret) = $crate::BadCredential::$bad.apply(&url);
                let e = $refused(bad, &secret).await;
                assert_eq!(e.kind(), $crate::__core::ErrorKind::Auth, "{e}");
            }
        )*
    };
}
