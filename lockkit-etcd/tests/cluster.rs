//! Failover between endpoints: a private 3-member etcd cluster on free ports; the member the
//! client talks to is killed while a lock is held. Skipped when the `etcd` binary is missing,
//! unless `LOCKKIT_TEST_REQUIRE` names etcd.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockkit_core::{LockConfig, LockState};
use lockkit_etcd::etcd_client::Client;
use lockkit_testing::{free_port, tool_available};

struct Member {
    child: Option<Child>,
    client_port: u16,
}

struct Cluster {
    members: Vec<Member>,
    dir: std::path::PathBuf,
}

impl Cluster {
    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn start_cluster() -> Option<Cluster> {
    if !tool_available("etcd", "--version", "etcd") {
        return None;
    }
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let initial: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (_, p))| format!("m{i}=http://127.0.0.1:{p}"))
        .collect();
    let dir = std::env::temp_dir().join(format!(
        "lockkit-etcd-cluster-{}-{}",
        std::process::id(),
        ports[0].0
    ));
    let mut members = Vec::new();
    for (i, (c, p)) in ports.iter().enumerate() {
        let child = Command::new("etcd")
            .args(["--name", &format!("m{i}"), "--data-dir"])
            .arg(dir.join(format!("m{i}")))
            .args(["--listen-client-urls", &format!("http://127.0.0.1:{c}")])
            .args(["--advertise-client-urls", &format!("http://127.0.0.1:{c}")])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{p}")])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{p}"),
            ])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-state", "new"])
            .args(["--heartbeat-interval=50", "--election-timeout=500"])
            .args(["--logger=zap", "--log-outputs=stderr"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        members.push(Member {
            child: Some(child),
            client_port: *c,
        });
    }
    let cluster = Cluster { members, dir };
    let until = Instant::now() + Duration::from_secs(30);
    for ep in cluster.endpoints() {
        loop {
            let ok = match tokio::time::timeout(
                Duration::from_secs(1),
                Client::connect([ep.as_str()], None),
            )
            .await
            {
                Ok(Ok(mut c)) => {
                    tokio::time::timeout(Duration::from_secs(1), c.put("ready", "", None))
                        .await
                        .is_ok_and(|r| r.is_ok())
                }
                _ => false,
            };
            if ok {
                break;
            }
            assert!(Instant::now() < until, "private etcd cluster did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Some(cluster)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_current_member_fails_over() {
    let Some(mut cluster) = start_cluster().await else {
        return;
    };
    let url = format!("etcd://{}?lease_ttl=3s", cluster.endpoints().join(","));
    let mut cfg = LockConfig::new(url);
    cfg.command_timeout = Some(Duration::from_secs(1));
    let a = lockkit_etcd::connect(&cfg).await.unwrap();
    let b = lockkit_etcd::connect(&cfg).await.unwrap();
    let g = a.mutex("held").unwrap().lock().await.unwrap();
    // Both clients start on the first endpoint; kill it.
    cluster.kill(0);
    // Requests fail over: acquires on both clients keep working...
    let started = Instant::now();
    let other = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match a.mutex("other").unwrap().try_lock().await {
                Ok(x) => return x.expect("free"),
                Err(e) => {
                    assert!(e.is_retryable(), "{e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
    .await
    .expect("an acquire through another member");
    eprintln!("first acquire after the kill took {:?}", started.elapsed());
    other.release().await.unwrap();
    // ...the keepalive fails over too: past two lease TTLs the lock is still held.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(g.state(), LockState::Held, "the session did not survive");
    let busy = loop {
        match b.mutex("held").unwrap().try_lock().await {
            Ok(x) => break x.is_none(),
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(busy, "the held lock was lost in the failover");
    // And the watch of the waiter fails over: B wakes when A releases.
    let mb = b.mutex("held").unwrap();
    let waiter = tokio::spawn(async move { mb.lock_for(Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    g.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("B woke")
        .unwrap()
        .unwrap();
    assert!(got.is_some());
}
