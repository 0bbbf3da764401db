//! Bad credentials against the secure profile (`scripts/services.sh up --secure`): a wrong
//! password (ZooKeeper's digest scheme accepts any password as another identity, which the ACL of
//! the prefix then refuses), a server certificate the client does not trust and an expired or
//! missing client certificate each give a typed, non-retryable error, quickly (the bound on time
//! also rules out a client that keeps reconnecting until its connect timeout). The checks shared
//! by every backend are `lockkit_testing::assert_refused` and `bad_credentials_suite!`.

mod common;

use std::time::Duration;

use common::zk_classpath;
use lockkit_core::{Error, ErrorKind, LockConfig};
use lockkit_testing::{
    assert_refused, free_port, secure_certs, wait_for_port, BadCredential, PrivateServer,
};

fn secure_url() -> Option<String> {
    lockkit_testing::server_url("zk_secure")
}

/// Connects with `url` and tries a lock; the error it ends in, checked for speed and kind.
async fn refused(url: String, secret: &str) -> Error {
    assert_refused(lockkit_zk::connect(&LockConfig::new(url)), secret).await
}

lockkit_testing::bad_credentials_suite!(secure_url, refused);

/// A private ZooKeeper whose TLS port presents a certificate that expired in 2020 is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_server_certificate_is_refused() {
    let Some(url) = secure_url() else { return };
    let certs = secure_certs();
    let (port, tls_port) = (free_port(), free_port());
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
    let mut java = std::process::Command::new("java");
    java.args(["-Xmx128m", "-cp", &zk_classpath()])
        .arg("-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory")
        .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
        .arg(dir.join("zoo.cfg"));
    let _server = PrivateServer::spawn(java, Some(dir));
    let (every, within) = (Duration::from_millis(50), Duration::from_secs(30));
    wait_for_port(tls_port, within, every, "the private ZooKeeper").await;
    let (bad, pw) = BadCredential::ServerAt(tls_port).apply(&url);
    let e = refused(bad, &pw).await;
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
}
