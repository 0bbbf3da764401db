//! Helpers shared by the ZooKeeper backend's own tests.
#![allow(dead_code)]

use std::time::Duration;

use lockkit_core::{LockConfig, LockGuard, LockState};

/// The test server URL, or `None` to skip.
pub fn url() -> Option<String> {
    lockkit_testing::server_url("zk")
}

/// `url` with extra query parameters.
pub fn with_params(url: &str, params: &str) -> String {
    if url.contains('?') {
        format!("{url}&{params}")
    } else {
        format!("{url}?{params}")
    }
}

/// A fresh key prefix, so tests never meet each other's nodes.
pub fn prefix() -> String {
    let name = lockkit_testing::unique_name("zk");
    name.replace('/', "-")
}

pub async fn backend(url: &str) -> lockkit_zk::ZkLocks {
    lockkit_zk::connect_zk(&LockConfig::new(url)).await.unwrap()
}

/// Waits until `guard` reaches `state`, failing after `limit`.
pub async fn wait_state(guard: &LockGuard, state: LockState, limit: Duration) {
    let start = std::time::Instant::now();
    while guard.state() != state {
        assert!(
            start.elapsed() < limit,
            "guard stayed {:?}, expected {state:?} within {limit:?}",
            guard.state()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The children of `dir` (empty if it does not exist).
pub async fn children(b: &lockkit_zk::ZkLocks, dir: &str) -> Vec<String> {
    let client = b.zk_client().unwrap();
    match client.list_children(dir).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {dir}: {e}"),
    }
}

/// Runs `scripts/services.sh stop|start zk`.
pub fn services(cmd: &str) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = std::process::Command::new("bash")
        .arg(root.join("scripts/services.sh"))
        .args([cmd, "zk"])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run services.sh");
    assert!(status.success(), "services.sh {cmd} zk failed");
}

/// `host:port` of a zk:// URL.
pub fn server_addr(url: &str) -> String {
    url.trim_start_matches("zk://")
        .split(['/', '?'])
        .next()
        .unwrap()
        .to_string()
}

/// ZooKeeper's class path from Debian's jars (Netty for the TLS port).
pub fn zk_classpath() -> String {
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

/// A standalone ZooKeeper the test starts on a free port, so it can freeze it (SIGSTOP) without
/// touching the shared server that other tests use. Killed, and its data removed, when dropped.
pub struct PrivateZk {
    /// `zk://127.0.0.1:<port>`.
    pub url: String,
    child: std::process::Child,
    dir: std::path::PathBuf,
}

impl PrivateZk {
    /// Starts the server (session timeouts from 1 s to 60 s, as the shared one) and waits until
    /// it opens sessions.
    pub async fn start() -> PrivateZk {
        let port = lockkit_testing::free_port();
        let dir = std::env::temp_dir().join(format!("lockkit-zk-private-{port}"));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(
            dir.join("zoo.cfg"),
            format!(
                "tickTime=500\nminSessionTimeout=1000\nmaxSessionTimeout=60000\ndataDir={}\n\
                 clientPort={port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
                 maxClientCnxns=0\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let child = std::process::Command::new("java")
            .args(["-Xmx128m", "-cp", &zk_classpath()])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(dir.join("zoo.cfg"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start a private ZooKeeper (java)");
        let server = PrivateZk {
            url: format!("zk://127.0.0.1:{port}"),
            child,
            dir,
        };
        let (within, every) = (Duration::from_secs(60), Duration::from_millis(50));
        lockkit_testing::wait_for_port(port, within, every, "the private ZooKeeper").await;
        // The port opens before the server takes sessions.
        let until = std::time::Instant::now() + within;
        let addr = format!("127.0.0.1:{port}");
        while zookeeper_client::Client::connect(&addr).await.is_err() {
            assert!(
                std::time::Instant::now() < until,
                "the private ZooKeeper takes no sessions"
            );
            tokio::time::sleep(every).await;
        }
        server
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let status = std::process::Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} {}", self.child.id());
    }
}

impl Drop for PrivateZk {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
