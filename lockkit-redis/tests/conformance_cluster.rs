//! The lockkit conformance suite against a Redis Cluster (`LOCKKIT_TEST_REDIS_CLUSTER_URL`,
//! e.g. `redis+cluster://127.0.0.1:16410,…`, as `scripts/services.sh up --cluster` prints it).

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("redis_cluster").map(lockkit_core::LockConfig::new)
}

async fn locks() -> Option<lockkit_core::Locks> {
    Some(lockkit_redis::connect(&config()?).await.unwrap())
}

lockkit_testing::conformance_suite!(config, lockkit_redis::connect);

mod cluster {
    use std::time::Duration;

    use lockkit_core::{AcquireOptions, LockState};

    async fn connect() -> Option<lockkit_core::Locks> {
        super::locks().await
    }

    /// Many locks spread over every node, renewed together: the watchdog groups each renewal
    /// call by slot (a multi-key script across slots would fail with CROSSSLOT, and the guards
    /// would turn Suspect, then Lost).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn renewals_are_batched_per_slot() {
        let Some(locks) = connect().await else { return };
        let base = lockkit_testing::unique_name("batch");
        let lease = AcquireOptions::new().watchdog_lease(Duration::from_millis(900));
        let (mut guards, mut reads, mut permits) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..40 {
            let name = format!("{base}-{i}");
            let m = locks.mutex(&name).unwrap();
            guards.push(m.acquire(&lease).await.unwrap().unwrap());
            let rw = locks.rwlock(&format!("{name}-rw")).unwrap();
            reads.push(rw.read(&lease).await.unwrap().unwrap());
            let sem = locks.semaphore(&format!("{name}-sem"), 2).unwrap();
            permits.push(sem.acquire(1, &lease).await.unwrap().unwrap());
        }
        // Three leases: every guard was renewed several times, in calls of one slot each.
        tokio::time::sleep(Duration::from_millis(2700)).await;
        let states = guards
            .iter()
            .map(|g| g.state())
            .chain(reads.iter().map(|g| g.state()))
            .chain(permits.iter().map(|p| p.state()));
        for s in states {
            assert_eq!(s, LockState::Held);
        }
        let other = connect().await.unwrap();
        for i in 0..40 {
            let m = other.mutex(&format!("{base}-{i}")).unwrap();
            assert!(m.try_lock().await.unwrap().is_none(), "lock {i} still held");
        }
        for g in guards {
            g.release().await.unwrap();
        }
        for g in reads {
            g.release().await.unwrap();
        }
        for p in permits {
            p.release().await.unwrap();
        }
    }

    /// Wake-ups reach waiters whatever node owns the lock's slot: the holder's lease is far
    /// longer than the wait budget, so only the release's message gets the waiter in.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_are_woken_on_every_node() {
        let Some(a) = connect().await else { return };
        let b = connect().await.unwrap();
        let base = lockkit_testing::unique_name("wake");
        let long = AcquireOptions::new().watchdog_lease(Duration::from_secs(30));
        for i in 0..12 {
            let name = format!("{base}-{i}");
            let holder = a
                .mutex(&name)
                .unwrap()
                .acquire(&long)
                .await
                .unwrap()
                .unwrap();
            let waiter = tokio::spawn({
                let (b, name) = (b.clone(), name.clone());
                async move {
                    b.mutex(&name)
                        .unwrap()
                        .lock_for(Duration::from_secs(5))
                        .await
                        .unwrap()
                }
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            holder.release().await.unwrap();
            let g = waiter.await.unwrap().expect("woken by the release");
            g.release().await.unwrap();
        }
    }
}

/// Failover in a Redis Cluster the test starts itself (3 primaries + 3 replicas on free loopback
/// ports, `cluster-node-timeout 1000`): a guard whose primary dies turns Suspect, then Lost when
/// its lease ends before a replica takes over, and the same client acquires again on the promoted
/// replica with a larger token.
mod failover {
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use lockkit_core::{AcquireOptions, LockState};

    struct Node {
        port: u16,
        child: Option<Child>,
    }

    impl Drop for Node {
        fn drop(&mut self) {
            if let Some(mut c) = self.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    struct Cluster {
        dir: PathBuf,
        nodes: Vec<Node>,
    }

    impl Drop for Cluster {
        fn drop(&mut self) {
            self.nodes.clear();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn cli(port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .output()
            .expect("redis-cli on PATH");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A free port whose cluster bus port (+10000) is free too.
    fn cluster_port() -> u16 {
        loop {
            let p = lockkit_testing::free_port();
            if p < 55000 && std::net::TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
                return p;
            }
        }
    }

    fn wait_until(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
        let started = Instant::now();
        while !ok() {
            assert!(started.elapsed() < limit, "{what} within {limit:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    impl Cluster {
        fn start() -> Cluster {
            let dir = std::env::temp_dir().join(format!(
                "lockkit-cluster-{}-{}",
                std::process::id(),
                lockkit_testing::free_port()
            ));
            let mut nodes = Vec::new();
            for i in 0..6 {
                let port = cluster_port();
                let d = dir.join(format!("n{i}"));
                std::fs::create_dir_all(&d).unwrap();
                let child = Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
                    .args(["--repl-diskless-sync-delay", "0"])
                    .arg("--dir")
                    .arg(&d)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server on PATH");
                nodes.push(Node {
                    port,
                    child: Some(child),
                });
            }
            for n in &nodes {
                wait_until(Duration::from_secs(10), "node answers", || {
                    cli(n.port, &["PING"]).trim() == "PONG"
                });
            }
            let addrs: Vec<String> = nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port))
                .collect();
            let mut create = Command::new("redis-cli");
            create.arg("--cluster").arg("create").args(&addrs);
            create.args(["--cluster-replicas", "1", "--cluster-yes"]);
            let ok = create
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap()
                .success();
            assert!(ok, "redis-cli --cluster create");
            for n in &nodes {
                wait_until(Duration::from_secs(20), "cluster_state:ok", || {
                    cli(n.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
                });
            }
            // Every replica in sync, so a failover has someone to promote.
            wait_until(Duration::from_secs(20), "replicas in sync", || {
                nodes
                    .iter()
                    .filter(|n| cli(n.port, &["INFO", "replication"]).contains("role:slave"))
                    .all(|n| {
                        cli(n.port, &["INFO", "replication"]).contains("master_link_status:up")
                    })
            });
            Cluster { dir, nodes }
        }

        /// The port of the primary that owns `key`'s slot.
        fn primary_of(&self, key: &str) -> u16 {
            let port = self.nodes[0].port;
            let slot: u16 = cli(port, &["CLUSTER", "KEYSLOT", key])
                .trim()
                .parse()
                .unwrap();
            for line in cli(port, &["CLUSTER", "NODES"]).lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if !f[2].contains("master") || f[2].contains("fail") {
                    continue;
                }
                let owns = f[8..].iter().any(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if a <= slot && slot <= b)
                });
                if owns {
                    let addr = f[1].split('@').next().unwrap();
                    return addr.rsplit_once(':').unwrap().1.parse().unwrap();
                }
            }
            panic!("no primary owns slot {slot}");
        }

        fn kill(&mut self, port: u16) {
            self.nodes.retain(|n| n.port != port);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lease_ending_during_failover_is_lost_and_the_lock_comes_back() {
        if !lockkit_testing::tool_available("redis-server", "--version", "redis") {
            return;
        }
        let mut cluster = Cluster::start();
        let url = format!(
            "redis+cluster://127.0.0.1:{},127.0.0.1:{}?command_timeout=300ms",
            cluster.nodes[0].port, cluster.nodes[1].port
        );
        let locks = lockkit_redis::connect(&lockkit_core::LockConfig::new(url))
            .await
            .unwrap();
        let lock = locks.mutex("failover").unwrap();
        let keys = locks
            .backend_as::<lockkit_redis::RedisBackend>()
            .unwrap()
            .keys("failover")
            .unwrap();
        // A 1 s lease ends before the cluster can even mark the primary failed (1 s node
        // timeout), let alone promote its replica.
        let g = lock
            .acquire(&AcquireOptions::new().watchdog_lease(Duration::from_secs(1)))
            .await
            .unwrap()
            .unwrap();
        let t1 = g.token();
        let lost = g.lost();
        // The lock's primary may be one of the URL's seed nodes: redis-rs knows every node
        // after its first topology read, so it refreshes from the others.
        let primary = cluster.primary_of(&keys.lock);
        cluster.kill(primary);
        // Suspect at the first failed renewal (or already Lost, if that renewal was still
        // waiting on the dead node when the deadline passed).
        common_eventually(Duration::from_secs(5), || g.state() != LockState::Held).await;
        tokio::time::timeout(Duration::from_secs(5), lost)
            .await
            .expect("lost() resolves at the lease's local deadline");

        // The same client finds the promoted replica and takes the lock again.
        let started = Instant::now();
        let g2 = loop {
            match lock.try_lock().await {
                Ok(Some(g2)) => break g2,
                Ok(None) => {}
                Err(e) => assert!(e.is_retryable(), "{e}"),
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no acquisition after the failover"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(g2.token() > t1, "{} > {t1}", g2.token());
        assert_ne!(cluster.primary_of(&keys.lock), primary);
        g2.release().await.unwrap();
    }

    async fn common_eventually(limit: Duration, mut f: impl FnMut() -> bool) {
        let started = Instant::now();
        while !f() {
            assert!(started.elapsed() < limit, "within {limit:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
