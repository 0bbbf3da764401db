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

/// A TCP proxy in front of the server that can cut the network (a partition), so the server
/// expires our session while it keeps running for everyone else.
pub struct Proxy {
    pub addr: String,
    blocked: std::sync::Arc<std::sync::atomic::AtomicBool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: String) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let blocked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (b, c) = (blocked.clone(), conns.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if b.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let target = target.clone();
                let handle = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                c.lock().unwrap().push(handle.abort_handle());
            }
        });
        Proxy {
            addr,
            blocked,
            conns,
            task,
        }
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.blocked
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.blocked
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

/// `host:port` of a zk:// URL.
pub fn server_addr(url: &str) -> String {
    url.trim_start_matches("zk://")
        .split(['/', '?'])
        .next()
        .unwrap()
        .to_string()
}
