//! Failover under Sentinel, against a topology the test starts itself (a primary, two replicas
//! and three Sentinels on free loopback ports, `down-after-milliseconds 1000`), so killing the
//! primary disturbs nobody else:
//!
//! * a lock the replicas acknowledged (`wait_replicas=2`) survives: its guard turns Suspect while
//!   the primary is gone and Held again once the client follows the promoted replica;
//! * a lock whose lease runs out before the failover completes is Lost (the promoted replica
//!   expires it too), and a new acquisition afterwards succeeds with a larger token;
//! * waiters are woken over pub/sub on the new primary, also those that subscribed before the
//!   failover (their subscription moves with the primary), and also when the new primary
//!   refused the subscription at first (it is asked for again until it takes it).
//!
//! What these tests cannot show, because it is a race: a lock acknowledged by the primary but not
//! yet replicated when it dies is unknown to the promoted replica, so a second client can be
//! granted it while the first still thinks it holds it (until its next renewal finds the lock
//! gone and marks it Lost). `wait_replicas` narrows that window; only a consensus store closes it.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{config, eventually, free_port};
use lockkit_core::{AcquireOptions, LockGuard, LockState, Locks, Mutex};

const MASTER: &str = "lockkit";

/// One redis-server (data node or Sentinel) of the test's own, killed on drop.
struct Node {
    port: u16,
    child: Option<Child>,
}

impl Node {
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A primary, two replicas and three Sentinels.
struct SentinelSetup {
    dir: PathBuf,
    data: Vec<Node>,
    sentinels: Vec<Node>,
}

impl Drop for SentinelSetup {
    fn drop(&mut self) {
        self.data.clear();
        self.sentinels.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn(args: &[String]) -> Child {
    Command::new("redis-server")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server on PATH")
}

fn query(port: u16, args: &[&str]) -> Option<redis::Value> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut conn).ok()
}

fn info_field(port: u16, section: &str, field: &str) -> Option<String> {
    let v = query(port, &["INFO", section])?;
    let text: String = redis::from_redis_value(v).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|s| s.trim().to_string())
}

fn wait_until(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ok() {
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl SentinelSetup {
    fn start() -> SentinelSetup {
        let dir = std::env::temp_dir().join(format!(
            "lockkit-sentinel-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut data = Vec::new();
        let primary = free_port();
        for i in 0..3 {
            let port = if i == 0 { primary } else { free_port() };
            let d = dir.join(format!("data{i}"));
            std::fs::create_dir_all(&d).unwrap();
            let mut args: Vec<String> = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--repl-diskless-sync-delay",
                "0",
                "--dir",
                &d.display().to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if i > 0 {
                args.extend([
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    primary.to_string(),
                ]);
            }
            data.push(Node {
                port,
                child: Some(spawn(&args)),
            });
        }
        for n in &data {
            wait_until(Duration::from_secs(10), "data node answers", || {
                query(n.port, &["PING"]).is_some()
            });
        }
        for n in &data[1..] {
            wait_until(Duration::from_secs(30), "replica in sync", || {
                info_field(n.port, "replication", "master_link_status").as_deref() == Some("up")
            });
        }
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let port = free_port();
            let conf = dir.join(format!("sentinel{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {MASTER} 1000\n\
                     sentinel failover-timeout {MASTER} 3000\n",
                    dir.display()
                ),
            )
            .unwrap();
            sentinels.push(Node {
                port,
                child: Some(spawn(&[conf.display().to_string(), "--sentinel".into()])),
            });
        }
        // Sentinels find the replicas and each other (hello messages every 2 s) before they
        // can agree on a failover.
        for s in &sentinels {
            wait_until(
                Duration::from_secs(20),
                "Sentinels see the whole group",
                || {
                    let count = |sub: &str| match query(s.port, &["SENTINEL", sub, MASTER]) {
                        Some(redis::Value::Array(v)) => v.len(),
                        _ => 0,
                    };
                    count("replicas") == 2 && count("sentinels") == 2
                },
            );
        }
        SentinelSetup {
            dir,
            data,
            sentinels,
        }
    }

    fn url(&self, options: &str) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER}?{options}", hosts.join(","))
    }

    /// The data node the Sentinels currently name as primary.
    fn primary_port(&self) -> Option<u16> {
        let v = query(
            self.sentinels[0].port,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER],
        )?;
        let (_, port): (String, u16) = redis::from_redis_value(v).ok()?;
        Some(port)
    }

    /// SIGKILLs the primary (a crash) and returns its port.
    fn kill_primary(&mut self) -> u16 {
        let port = self.primary_port().expect("a primary");
        let node = self.data.iter_mut().find(|n| n.port == port).unwrap();
        node.kill();
        port
    }

    /// Whether the group has settled on `p`: every live Sentinel names it and has no failover
    /// under way, it is a primary, and every other live data node is its replica with its link
    /// up.
    fn settled_on(&self, p: u16) -> bool {
        let sentinels_agree = self
            .sentinels
            .iter()
            .filter(|s| s.child.is_some())
            .all(|s| {
                let named = query(s.port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER])
                    .and_then(|v| redis::from_redis_value::<(String, u16)>(v).ok())
                    .is_some_and(|(_, port)| port == p);
                let flags = query(s.port, &["SENTINEL", "MASTER", MASTER])
                    .and_then(|v| redis::from_redis_value::<Vec<String>>(v).ok())
                    .and_then(|kv| {
                        kv.chunks(2)
                            .find(|f| f[0] == "flags")
                            .and_then(|f| f.get(1).cloned())
                    });
                named && flags.is_some_and(|f| f.split(',').all(|flag| flag == "master"))
            });
        let replica_of_p = |n: u16| {
            info_field(n, "replication", "role").as_deref() == Some("slave")
                && info_field(n, "replication", "master_port") == Some(p.to_string())
                && info_field(n, "replication", "master_link_status").as_deref() == Some("up")
        };
        sentinels_agree
            && info_field(p, "replication", "role").as_deref() == Some("master")
            && self
                .data
                .iter()
                .filter(|n| n.child.is_some() && n.port != p)
                .all(|n| replica_of_p(n.port))
    }

    /// Waits until the Sentinels name a primary other than `old` and the group has stayed
    /// [settled](Self::settled_on) on it for [`STABLE`]. Under load the Sentinels may fail over
    /// twice: one that cannot reach the newly promoted primary within `down-after-milliseconds`
    /// (1 s here) takes it down and promotes the other replica in a later epoch. Until the first
    /// one promoted is turned back into a replica it takes writes that the group then drops, so
    /// a client that had not yet followed would lose them, and the test would look for the
    /// waiter's subscription on a node the clients have left.
    async fn wait_failover(&self, old: u16) -> u16 {
        let started = Instant::now();
        let mut since: Option<(u16, Instant)> = None;
        loop {
            // Blocking reads of every node: off the runtime's workers, which the clients need.
            let now = tokio::task::block_in_place(|| {
                self.primary_port()
                    .filter(|p| *p != old && self.settled_on(*p))
            });
            match (now, since) {
                (Some(p), Some((q, at))) if p == q => {
                    if at.elapsed() >= STABLE {
                        return p;
                    }
                }
                (now, _) => since = now.map(|p| (p, Instant::now())),
            }
            assert!(
                started.elapsed() < Duration::from_secs(40),
                "no settled failover within 40 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// How long the group must stay settled on a new primary before a test relies on it: longer
/// than a Sentinel takes to judge the new primary down (`down-after-milliseconds`, 1 s) and
/// start another failover.
const STABLE: Duration = Duration::from_millis(2500);

/// Acquires `lock` with a watchdog lease of `lease` (renewed every lease/3).
async fn hold(lock: &Mutex, lease: Duration) -> LockGuard {
    lock.acquire(&AcquireOptions::new().watchdog_lease(lease))
        .await
        .unwrap()
        .unwrap()
}

async fn connect(url: &str) -> Locks {
    lockkit_redis::connect(&config(url, &[])).await.unwrap()
}

/// The first answer of `op` that is not a retryable error (within 10 s).
async fn settled<T, F>(op: impl Fn() -> F) -> T
where
    F: std::future::Future<Output = lockkit_core::Result<T>>,
{
    let started = Instant::now();
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "still failing: {e}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `state` until it is `want`, for at most `limit`.
async fn reaches(limit: Duration, what: &str, state: impl Fn() -> LockState, want: LockState) {
    eventually(limit, what, || state() == want).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_lock_survives_failover_and_waiters_follow() {
    if !lockkit_testing::tool_available("redis-server", "--version", "redis") {
        return;
    }
    let mut setup = SentinelSetup::start();
    // `a` acquires only once both replicas have the lock; `b` and `c` do not wait (after the
    // failover only one replica is left).
    let a = connect(&setup.url("command_timeout=500ms&wait_replicas=2")).await;
    let b = connect(&setup.url("command_timeout=500ms")).await;
    let c = connect(&setup.url("command_timeout=500ms")).await;
    let kept = a.mutex("kept").unwrap();
    // Renewed every 2 s: a renewal fails while the primary is gone (the Sentinels take more than
    // 1 s to agree it is down), long before the lease ends.
    let g = hold(&kept, Duration::from_secs(6)).await;
    let t1 = g.token();
    // A waiter that subscribed before the failover: its subscription must move to the new
    // primary. The holder's lease (30 s) outlasts the wait budget, so only a wake-up gets it in.
    let moving = hold(&a.mutex("moving").unwrap(), Duration::from_secs(30)).await;
    let early_waiter = tokio::spawn({
        let c = c.clone();
        async move {
            c.mutex("moving")
                .unwrap()
                .lock_for(Duration::from_secs(20))
                .await
                .unwrap()
        }
    });
    eventually(
        Duration::from_secs(5),
        "the early waiter subscribed",
        || {
            c.backend_as::<lockkit_redis::RedisBackend>()
                .is_some_and(|r| r.waiting_channels() == 1)
        },
    )
    .await;

    let old = setup.kill_primary();
    reaches(
        Duration::from_secs(10),
        "guard Suspect after the primary died",
        || g.state(),
        LockState::Suspect,
    )
    .await;
    let new = setup.wait_failover(old).await;
    assert_ne!(new, old);
    // The acknowledged lock was on the promoted replica: the next renewal there succeeds.
    reaches(
        Duration::from_secs(10),
        "guard Held again on the new primary",
        || g.state(),
        LockState::Held,
    )
    .await;
    // `b` may not have noticed the failover yet: its first commands can fail (retryable) until
    // it follows the new primary.
    reaches(
        Duration::from_secs(10),
        "the other guard Held again",
        || moving.state(),
        LockState::Held,
    )
    .await;
    // The waiter's client follows the primary and subscribes there again (its attempts that
    // failed meanwhile did not end its wait); then the release hands it the lock.
    let waiting = c.backend_as::<lockkit_redis::RedisBackend>().unwrap();
    // The channel on which the waiter hears that the lock was handed to it.
    let channel = format!(
        "{}:{}",
        waiting.keys("moving").unwrap().lock,
        waiting.client_id()
    );
    eventually(
        Duration::from_secs(5),
        "the waiter's subscription moved",
        || match query(new, &["PUBSUB", "NUMSUB", &channel]) {
            Some(redis::Value::Array(v)) => v.get(1) == Some(&redis::Value::Int(1)),
            _ => false,
        },
    )
    .await;
    moving.release().await.unwrap();
    let moved = early_waiter
        .await
        .unwrap()
        .expect("the early waiter was woken on the new primary");
    moved.release().await.unwrap();

    let kept_b = b.mutex("kept").unwrap();
    assert!(settled(|| kept_b.is_locked()).await);
    assert!(b.mutex("kept").unwrap().try_lock().await.unwrap().is_none());

    g.release().await.unwrap();
    let g2 = settled(|| kept_b.try_lock())
        .await
        .expect("free after release");
    assert!(g2.token() > t1, "{} > {t1}", g2.token());
    g2.release().await.unwrap();

    // A waiter in one client is woken over pub/sub on the new primary by a release in the
    // other: the holder's lease (30 s) is far longer than the wait budget, so only the wake-up
    // can get it in time.
    let holder = hold(&b.mutex("woken").unwrap(), Duration::from_secs(30)).await;
    let waiter = tokio::spawn({
        let c = c.clone();
        async move {
            c.mutex("woken")
                .unwrap()
                .lock_for(Duration::from_secs(5))
                .await
                .unwrap()
        }
    });
    eventually(Duration::from_secs(5), "the waiter subscribed", || {
        c.backend_as::<lockkit_redis::RedisBackend>()
            .is_some_and(|r| r.waiting_channels() == 1)
    })
    .await;
    holder.release().await.unwrap();
    let g3 = waiter.await.unwrap().expect("the waiter was woken");
    g3.release().await.unwrap();
}

/// The number of subscribers of `channel` on the data node at `port`.
fn subscribers(port: u16, channel: &str) -> Option<i64> {
    match query(port, &["PUBSUB", "NUMSUB", channel])? {
        redis::Value::Array(v) => match v.get(1) {
            Some(redis::Value::Int(n)) => Some(*n),
            _ => None,
        },
        _ => None,
    }
}

/// A new primary that refuses a channel at the switch (here its ACL does not allow it yet) is
/// asked again until it takes it: the waiter's subscription comes back without another
/// failover, and the release hands the waiter the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_the_new_primary_refused_is_subscribed_once_it_can_be() {
    if !lockkit_testing::tool_available("redis-server", "--version", "redis") {
        return;
    }
    let mut setup = SentinelSetup::start();
    // Each replica allows no channel but the Sentinels' own, until the test says otherwise.
    for n in &setup.data[1..] {
        let set = [
            "ACL",
            "SETUSER",
            "default",
            "resetchannels",
            "&__sentinel__:hello",
        ];
        assert!(query(n.port, &set).is_some(), "ACL SETUSER on {}", n.port);
    }
    let a = connect(&setup.url("command_timeout=500ms&wait_replicas=2")).await;
    let c = connect(&setup.url("command_timeout=500ms")).await;
    let holder = hold(&a.mutex("refused").unwrap(), Duration::from_secs(30)).await;
    let waiter = tokio::spawn({
        let c = c.clone();
        async move {
            c.mutex("refused")
                .unwrap()
                .lock_for(Duration::from_secs(60))
                .await
                .unwrap()
        }
    });
    let waiting = c.backend_as::<lockkit_redis::RedisBackend>().unwrap();
    eventually(Duration::from_secs(5), "the waiter subscribed", || {
        waiting.waiting_channels() == 1
    })
    .await;
    let channel = format!(
        "{}:{}",
        waiting.keys("refused").unwrap().lock,
        waiting.client_id()
    );

    let old = setup.kill_primary();
    let new = setup.wait_failover(old).await;
    // `c` follows the new primary (a command of its own goes there), and its resubscribe there
    // is refused.
    let probe = c.mutex("probe").unwrap();
    assert!(!settled(|| probe.is_locked()).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(subscribers(new, &channel), Some(0), "refused by the ACL");

    let allow = ["ACL", "SETUSER", "default", "allchannels"];
    assert!(query(new, &allow).is_some());
    eventually(
        Duration::from_secs(10),
        "the refused channel subscribed on the new primary",
        || subscribers(new, &channel) == Some(1),
    )
    .await;
    reaches(
        Duration::from_secs(10),
        "the holder Held on the new primary",
        || holder.state(),
        LockState::Held,
    )
    .await;
    holder.release().await.unwrap();
    let g = waiter
        .await
        .unwrap()
        .expect("the waiter was handed the lock");
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_whose_lease_ends_during_failover_is_lost() {
    if !lockkit_testing::tool_available("redis-server", "--version", "redis") {
        return;
    }
    let mut setup = SentinelSetup::start();
    // A 1 s lease ends before the Sentinels can even agree that the primary is down (1 s).
    let a = connect(&setup.url("command_timeout=300ms&wait_replicas=2")).await;
    let lock = a.mutex("short").unwrap();
    let g = hold(&lock, Duration::from_secs(1)).await;
    let t1 = g.token();
    let lost = g.lost();

    let old = setup.kill_primary();
    reaches(
        Duration::from_secs(5),
        "guard Suspect after the primary died",
        || g.state(),
        LockState::Suspect,
    )
    .await;
    tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("lost() resolves at the lease's local deadline");
    assert_eq!(g.state(), LockState::Lost);
    setup.wait_failover(old).await;

    // After the failover the lock is free (it expired on the promoted replica too) and a new
    // acquisition gets a larger token: the counter was replicated with the acquire.
    let b = connect(&setup.url("command_timeout=300ms")).await;
    let started = Instant::now();
    let g2 = loop {
        match b.mutex("short").unwrap().try_lock().await {
            Ok(Some(g2)) => break g2,
            Ok(None) => {}
            Err(e) => assert!(e.is_retryable(), "{e}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no acquisition after the failover"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(g2.token() > t1, "{} > {t1}", g2.token());
    assert!(
        g.release().await.is_err(),
        "a lost guard's release reports it"
    );
    g2.release().await.unwrap();
}

#[tokio::test]
async fn unknown_master_name_is_a_config_error() {
    if !lockkit_testing::tool_available("redis-server", "--version", "redis") {
        return;
    }
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("lockkit-sentinel-bad-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!("port {port}\nbind 127.0.0.1\ndir {}\n", dir.display()),
    )
    .unwrap();
    let _sentinel = Node {
        port,
        child: Some(spawn(&[conf.display().to_string(), "--sentinel".into()])),
    };
    wait_until(Duration::from_secs(10), "sentinel answers", || {
        query(port, &["PING"]).is_some()
    });
    let e = lockkit_redis::connect(&config(
        &format!("redis+sentinel://127.0.0.1:{port}/nosuchmaster"),
        &[],
    ))
    .await
    .unwrap_err();
    assert_eq!(e.kind(), lockkit_core::ErrorKind::Config, "{e}");
    assert!(e.to_string().contains("nosuchmaster"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sentinels that require a password (`requirepass` in sentinel.conf) are asked with
/// `sentinel_password`; a missing or wrong one is a non-retryable `Auth` error.
#[tokio::test]
async fn sentinel_password_is_used() {
    if !lockkit_testing::tool_available("redis-server", "--version", "redis") {
        return;
    }
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("lockkit-sentinel-auth-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {}\nrequirepass s3cret\n",
            dir.display()
        ),
    )
    .unwrap();
    let _sentinel = Node {
        port,
        child: Some(spawn(&[conf.display().to_string(), "--sentinel".into()])),
    };
    wait_until(Duration::from_secs(10), "sentinel answers", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let url = format!("redis+sentinel://127.0.0.1:{port}/nosuchmaster");
    for (opts, want) in [
        (vec![], lockkit_core::ErrorKind::Auth),
        (
            vec![("sentinel_password", "wrong")],
            lockkit_core::ErrorKind::Auth,
        ),
        // Past the Sentinel's password check: it answers that it knows no such master.
        (
            vec![("sentinel_password", "s3cret")],
            lockkit_core::ErrorKind::Config,
        ),
    ] {
        let e = lockkit_redis::connect(&config(&url, &opts))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), want, "{opts:?}: {e}");
        assert!(!e.is_retryable(), "{opts:?}: {e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
