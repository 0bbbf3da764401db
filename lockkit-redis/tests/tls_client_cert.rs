//! rediss:// with client certificates (`tls_cert` + `tls_key`) against a private redis-server
//! started with `--tls-auth-clients yes`; refused certificates give a typed, non-retryable error
//! at once, without a reconnect loop.
#![cfg(feature = "tls")]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use lockkit_core::{ErrorKind, LockConfig};
use lockkit_testing::{make_client_cert, make_test_certs, wait_for_port};

struct TlsRedis {
    server: PrivateRedis,
    tls_port: u16,
    ca: String,
    cert: String,
    key: String,
    foreign_cert: String,
    foreign_key: String,
    dirs: [PathBuf; 2],
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl TlsRedis {
    async fn start() -> TlsRedis {
        let base = std::env::temp_dir().join(format!(
            "lockkit-tls-client-{}-{}",
            std::process::id(),
            free_port()
        ));
        let (dir, other) = (base.join("ca"), base.join("other"));
        let certs = make_test_certs(&dir);
        let client = make_client_cert(&dir, "client");
        // A client certificate from a CA the server does not trust.
        make_test_certs(&other);
        let foreign = make_client_cert(&other, "client");
        let tls_port = free_port();
        let s = |p: &Path| p.display().to_string();
        let (port_s, scert, skey, ca) = (
            tls_port.to_string(),
            s(&certs.cert),
            s(&certs.key),
            s(&certs.ca),
        );
        let server = PrivateRedis::start(&[
            "--tls-port",
            &port_s,
            "--tls-cert-file",
            &scert,
            "--tls-key-file",
            &skey,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "yes",
        ]);
        let (every, within) = (Duration::from_millis(10), Duration::from_secs(10));
        wait_for_port(tls_port, within, every, "the TLS port").await;
        TlsRedis {
            server,
            tls_port,
            ca,
            cert: s(&client.cert),
            key: s(&client.key),
            foreign_cert: s(&foreign.cert),
            foreign_key: s(&foreign.key),
            dirs: [base.clone(), base],
        }
    }

    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }

    /// Connections the server accepted so far (TLS ones included).
    async fn connections(&self) -> u64 {
        let mut admin = admin(&self.server.url()).await;
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut admin)
            .await
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Connects with `options`, expecting a refusal: checks its kind and that it is neither
    /// retryable nor followed by more than a few connection attempts.
    async fn refused(&self, options: &[(&str, &str)]) -> lockkit_core::Error {
        let before = self.connections().await;
        let cfg = config(&self.url(), options);
        let e = tokio::time::timeout(Duration::from_secs(10), lockkit_redis::connect(&cfg))
            .await
            .expect("a refused certificate must fail, not hang")
            .unwrap_err();
        // One admin connection for the count, and at most the connect attempt of each of the
        // client's two connections plus their retries.
        let attempts = self.connections().await - before - 1;
        assert!(
            attempts <= 6,
            "{attempts} connection attempts: a retry storm"
        );
        assert!(!e.is_retryable(), "{e}");
        e
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_from_options_is_presented() {
    let t = TlsRedis::start().await;
    let opts = [
        ("tls_ca", &*t.ca),
        ("tls_cert", &*t.cert),
        ("tls_key", &*t.key),
    ];
    let locks = connect(&t.url(), &opts).await;
    let lock = locks.mutex("mtls").unwrap();
    let g = lock.lock().await.unwrap();
    let plain = connect(&t.server.url(), &[]).await;
    assert!(plain.mutex("mtls").unwrap().is_locked().await.unwrap());
    // A second client waits for the release over pub/sub, through TLS as well.
    let other = connect(&t.url(), &opts).await;
    let waiter = tokio::spawn(async move {
        let w = other.mutex("mtls").unwrap();
        w.lock_for(Duration::from_secs(10)).await.unwrap().is_some()
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    g.release().await.unwrap();
    assert!(waiter.await.unwrap(), "the waiter got the lock");

    // Nothing of the key or its path shows in Debug output.
    let key_pem = std::fs::read_to_string(&t.key).unwrap();
    let key_line = key_pem.lines().nth(1).unwrap();
    for shown in [
        format!("{locks:?}"),
        format!("{:?}", config(&t.url(), &opts)),
    ] {
        assert!(!shown.contains(key_line), "{shown}");
        assert!(!shown.contains(&t.key), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_from_url_options() {
    let t = TlsRedis::start().await;
    let url = format!(
        "{}?tls_ca={}&tls_cert={}&tls_key={}",
        t.url(),
        t.ca,
        t.cert,
        t.key
    );
    let locks = lockkit_redis::connect(&LockConfig::new(url.as_str()))
        .await
        .unwrap();
    let g = locks.mutex("mtls-url").unwrap().try_lock().await.unwrap();
    g.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_client_certificate_is_refused() {
    let t = TlsRedis::start().await;
    let e = t.refused(&[("tls_ca", &t.ca)]).await;
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_of_another_ca_is_refused() {
    let t = TlsRedis::start().await;
    let e = t
        .refused(&[
            ("tls_ca", &t.ca),
            ("tls_cert", &t.foreign_cert),
            ("tls_key", &t.foreign_key),
        ])
        .await;
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_server_certificate_is_refused() {
    let t = TlsRedis::start().await;
    // No tls_ca: the system roots do not know the test CA.
    let e = t
        .refused(&[("tls_cert", &t.cert), ("tls_key", &t.key)])
        .await;
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
}

#[tokio::test]
async fn unusable_certificate_options_are_config_errors() {
    let dir = std::env::temp_dir().join(format!("lockkit-tls-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let junk = junk.display().to_string();
    let missing = dir.join("missing.pem").display().to_string();
    let pem = dir.join("looks.pem");
    std::fs::write(&pem, "-----BEGIN CERTIFICATE-----\n").unwrap();
    let pem = pem.display().to_string();
    let url = "rediss://127.0.0.1:1";
    for opts in [
        vec![("tls_cert", junk.as_str())],
        vec![("tls_key", junk.as_str())],
        vec![
            ("tls_cert", missing.as_str()),
            ("tls_key", missing.as_str()),
        ],
        vec![("tls_cert", junk.as_str()), ("tls_key", junk.as_str())],
        vec![("tls_ca", missing.as_str())],
        vec![("tls_cert", pem.as_str()), ("tls_key", missing.as_str())],
    ] {
        let e = lockkit_redis::connect(&config(url, &opts))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{opts:?}: {e}");
        assert!(!e.is_retryable(), "{opts:?}: {e}");
        // The key's path is a secret option value: errors about it do not show it.
        if let Some((_, key)) = opts.iter().find(|(k, _)| *k == "tls_key") {
            if e.to_string().contains("tls_key") {
                assert!(!e.to_string().contains(key), "{e}");
            }
        }
    }
    // TLS options on a plain URL are a mistake, not something to ignore.
    let e = lockkit_redis::connect(&config("redis://127.0.0.1:1", &[("tls_ca", &junk)]))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
