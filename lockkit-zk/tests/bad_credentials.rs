//! Bad credentials against the secure profile (`scripts/services.sh up --secure`): a wrong
//! password (ZooKeeper's digest scheme accepts any password as another identity, which the ACL of
//! the prefix then refuses), a server certificate the client does not trust and an expired or
//! missing client certificate each give a typed, non-retryable error, quickly (the bound on time
//! also rules out a client that keeps reconnecting until its connect timeout).

use std::time::{Duration, Instant};

use lockkit_core::{DistLockExt, Error, ErrorKind, LockConfig};

/// A hang guard, not a performance bound.
const QUICK: Duration = Duration::from_secs(5);

fn secure_url() -> Option<String> {
    lockkit_core::testing::server_url("zk_secure")
}

/// Connects with `url` and tries a lock; the error it ends in, checked for speed and kind.
async fn refused(url: String, secret: &str) -> Error {
    let start = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(30), async {
        let locks = lockkit_zk::connect(&LockConfig::new(url)).await?;
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

/// A private ZooKeeper whose TLS port presents a certificate that expired in 2020, stopped when
/// dropped.
struct ExpiredServer(std::process::Child, std::path::PathBuf);

impl Drop for ExpiredServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// ZooKeeper's class path as the secure profile builds it (Debian's jars; Netty for TLS).
fn zk_classpath() -> String {
    let jars = [
        "zookeeper",
        "zookeeper-jute",
        "netty-handler",
        "netty-transport",
        "netty-common",
        "netty-buffer",
        "netty-codec",
        "netty-resolver",
        "netty-transport-native-unix-common",
        "netty-transport-native-epoll",
        "slf4j-api",
        "commons-cli",
        "commons-io",
        "metrics-core",
        "jackson-databind",
        "jackson-core",
        "jackson-annotations",
    ];
    jars.iter()
        .map(|j| format!("/usr/share/java/{j}.jar"))
        .filter(|p| std::path::Path::new(p).exists())
        .collect::<Vec<_>>()
        .join(":")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_server_certificate_is_refused() {
    let Some(url) = secure_url() else { return };
    let pw = password_of(&url);
    let certs = std::path::PathBuf::from(std::env::var("LOCKKIT_TEST_SECURE_CERTS").unwrap());
    let (port, tls_port) = (
        lockkit_core::testing::free_port(),
        lockkit_core::testing::free_port(),
    );
    let dir = std::env::temp_dir().join(format!("lockkit-zk-expired-{tls_port}"));
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let keystore = dir.join("server.pem");
    let key = std::fs::read_to_string(certs.join("expired-server.key")).unwrap();
    let cert = std::fs::read_to_string(certs.join("expired-server.pem")).unwrap();
    std::fs::write(&keystore, key + &cert).unwrap();
    std::fs::write(
        dir.join("zoo.cfg"),
        format!(
            "tickTime=500\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             secureClientPort={tls_port}\nsecureClientPortAddress=127.0.0.1\n\
             admin.enableServer=false\nssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
             ssl.trustStore.location={}\nssl.trustStore.type=PEM\nssl.clientAuth=none\n",
            dir.join("data").display(),
            keystore.display(),
            certs.join("ca.pem").display(),
        ),
    )
    .unwrap();
    let child = std::process::Command::new("java")
        .args(["-Xmx128m", "-cp", &zk_classpath()])
        .arg("-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory")
        .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
        .arg(dir.join("zoo.cfg"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start ZooKeeper");
    let _server = ExpiredServer(child, dir);
    let until = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", tls_port)).is_err() {
        assert!(
            Instant::now() < until,
            "the private ZooKeeper did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let shared = lockkit_core::ServerUrl::parse(&url).unwrap().hosts[0].to_string();
    let bad = url.replacen(&shared, &format!("127.0.0.1:{tls_port}"), 1);
    let e = refused(bad, &pw).await;
    assert_eq!(e.kind(), &ErrorKind::Auth, "{e}");
}
