//! Replica safety (`wait_replicas`) on a Redis Cluster (`LOCKKIT_TEST_REDIS_CLUSTER_URL`, the
//! cluster profile of `scripts/services.sh`): acquires, renewals and releases are followed by a
//! `WAIT` on the primary that owns the lock's slot, on a connection of the handle's own; an
//! acquire that slot's replica did not get is rolled back with `ReplicaSync`, as on one server.
//!
//! Some tests pause (SIGSTOP) the replica of a lock's primary, through `scripts/services.sh`:
//! the tests of this binary run one at a time, so a paused replica never fails another test.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use lockkit_core::{AcquireOptions, ErrorKind, LockState};
use lockkit_redis::LockKeys;
use lockkit_testing::unique_name;
use redis::Value;

/// One test at a time: a paused replica must not fail the others.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cluster_url() -> Option<String> {
    lockkit_testing::server_url("redis_cluster")
}

/// The seed addresses of a `redis+cluster://` URL.
fn seeds(url: &str) -> Vec<String> {
    let hosts = url.trim_start_matches("redis+cluster://");
    let hosts = hosts.split(['/', '?']).next().unwrap();
    hosts.split(',').map(str::to_string).collect()
}

/// The primary that owns `key`'s slot now and the port of its (first online) replica.
async fn owner_of(url: &str, key: &str) -> (u16, u16) {
    let slot = i64::from(key_slot(key));
    let mut any = admin(&format!("redis://{}", seeds(url)[0])).await;
    let slots: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut any)
        .await
        .unwrap();
    let Value::Array(ranges) = slots else {
        panic!("CLUSTER SLOTS: {slots:?}")
    };
    let primary = ranges
        .iter()
        .find_map(|r| {
            let Value::Array(parts) = r else { return None };
            let (Value::Int(start), Value::Int(end), Value::Array(node)) =
                (&parts[0], &parts[1], &parts[2])
            else {
                return None;
            };
            let Value::Int(port) = node[1] else {
                return None;
            };
            (*start..=*end).contains(&slot).then_some(port as u16)
        })
        .expect("an owner of the slot");
    let mut conn = admin(&format!("redis://127.0.0.1:{primary}")).await;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await
        .unwrap();
    let replica = info
        .lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .find_map(|l| l.split(',').find_map(|f| f.strip_prefix("port=")))
        .expect("the primary has an online replica")
        .parse()
        .unwrap();
    (primary, replica)
}

/// How many `WAIT` commands the node at `port` ran.
async fn waits_run(port: u16) -> u64 {
    let mut conn = admin(&format!("redis://127.0.0.1:{port}")).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// The cluster member (`scripts/services.sh` name) listening on `port`.
fn member_at(port: u16) -> String {
    let state = std::env::var("LOCKKIT_SERVICES_STATE").unwrap_or("/tmp/lockkit-services".into());
    let ports = std::fs::read_to_string(format!("{state}/cluster/ports")).unwrap();
    let list = ports
        .lines()
        .find_map(|l| l.strip_prefix("REDIS_CLUSTER_PORTS="))
        .expect("REDIS_CLUSTER_PORTS in the cluster profile's ports file");
    let i = list
        .split(',')
        .position(|p| p.trim() == port.to_string())
        .expect("a cluster member on that port");
    format!("redis-c{}", i + 1)
}

fn services(verb: &str, member: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services.sh");
    let ok = Command::new(script)
        .arg(verb)
        .arg(member)
        .status()
        .unwrap()
        .success();
    assert!(ok, "services.sh {verb} {member}");
}

/// A replica paused (SIGSTOP: it stays connected and acknowledges nothing) until dropped.
struct Paused(String);

impl Paused {
    fn replica(port: u16) -> Paused {
        let member = member_at(port);
        services("pause", &member);
        Paused(member)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        services("resume", &self.0);
    }
}

/// Whether the replica at `port` has `key` (a replica answers reads after `READONLY`).
async fn on_replica(port: u16, key: &str) -> bool {
    let mut conn = admin(&format!("redis://127.0.0.1:{port}")).await;
    let _: () = redis::cmd("READONLY").query_async(&mut conn).await.unwrap();
    redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_acquire_renewal_and_release_wait_for_the_slots_replica() {
    let Some(url) = cluster_url() else { return };
    let _serial = SERIAL.lock().await;
    let locks = connect(&url, &[]).await;
    let name = unique_name("synced");
    let key = LockKeys::mutex("lockkit", &name).lock;
    let (primary, replica) = owner_of(&url, &key).await;
    let before = waits_run(primary).await;
    let g = locks
        .mutex(&name)
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(Duration::from_millis(600)))
        .await
        .unwrap()
        .unwrap();
    // The slot's replica has the lock as soon as the acquire returns.
    assert!(
        on_replica(replica, &key).await,
        "the replica did not see the acquire"
    );
    let after_acquire = waits_run(primary).await;
    assert!(after_acquire > before, "no WAIT after the acquire");
    // Renewals (every 200 ms here) wait too.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let after_renewals = waits_run(primary).await;
    assert!(after_renewals > after_acquire, "no WAIT after a renewal");
    assert_eq!(g.state(), LockState::Held);
    g.release().await.unwrap();
    // The release's WAIT: its caller learns nothing from it, the replica loses the key.
    let released = Instant::now();
    while waits_run(primary).await <= after_renewals || on_replica(replica, &key).await {
        assert!(
            released.elapsed() < Duration::from_secs(3),
            "no WAIT after the release"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Another lock whose slot the same primary owns as `key`'s.
async fn neighbour_of(url: &str, primary: u16) -> String {
    loop {
        let name = unique_name("neighbour");
        if owner_of(url, &LockKeys::mutex("lockkit", &name).lock)
            .await
            .0
            == primary
        {
            return name;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_never_holds_up_the_handles_other_commands() {
    let Some(url) = cluster_url() else { return };
    let _serial = SERIAL.lock().await;
    let locks = connect(&url, &[("wait_timeout", "1s")]).await;
    let name = unique_name("slow-wait");
    let (primary, replica) = owner_of(&url, &LockKeys::mutex("lockkit", &name).lock).await;
    let other = locks.mutex(&neighbour_of(&url, primary).await).unwrap();
    // Warm up the handle's connections to that primary.
    assert!(!other.is_locked().await.unwrap());
    let paused = Paused::replica(replica);
    let started = Instant::now();
    let waiting = {
        let m = locks.mutex(&name).unwrap();
        tokio::spawn(async move { m.try_lock().await.map(|g| g.is_some()) })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A command of the same handle, to the same primary, runs while that WAIT blocks.
    let asked = Instant::now();
    assert!(!other.is_locked().await.unwrap());
    assert!(
        asked.elapsed() < Duration::from_millis(400) && !waiting.is_finished(),
        "the other commands waited for the WAIT ({:?})",
        asked.elapsed()
    );
    drop(paused);
    // The replica was back in time or not: either way the WAIT ended within its timeout.
    let _ = waiting.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_the_replica_did_not_acknowledge_is_rolled_back() {
    let Some(url) = cluster_url() else { return };
    let _serial = SERIAL.lock().await;
    let locks = connect(&url, &[("wait_timeout", "200ms")]).await;
    let plain = connect(&url, &[("wait_replicas", "0")]).await;
    let name = unique_name("unsynced");
    let (_, replica) = owner_of(&url, &LockKeys::mutex("lockkit", &name).lock).await;
    let paused = Paused::replica(replica);
    let e = locks.mutex(&name).unwrap().try_lock().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ReplicaSync, "{e}");
    assert!(e.is_retryable());
    assert!(
        !plain.mutex(&name).unwrap().is_locked().await.unwrap(),
        "not rolled back"
    );
    let e = locks.rwlock(&name).unwrap().try_read().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ReplicaSync, "{e}");
    assert!(!plain.rwlock(&name).unwrap().is_locked().await.unwrap());
    drop(paused);
    let g = locks.mutex(&name).unwrap().try_lock().await.unwrap();
    g.expect("free").release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_the_replica_missed_makes_the_guard_suspect() {
    let Some(url) = cluster_url() else { return };
    let _serial = SERIAL.lock().await;
    let locks = connect(&url, &[("wait_timeout", "500ms")]).await;
    let name = unique_name("renewal");
    let (_, replica) = owner_of(&url, &LockKeys::mutex("lockkit", &name).lock).await;
    let g = locks
        .mutex(&name)
        .unwrap()
        .acquire(&AcquireOptions::new().watchdog_lease(Duration::from_secs(3)))
        .await
        .unwrap()
        .unwrap();
    let mut changes = g.state_changes();
    let paused = Paused::replica(replica);
    let suspect = tokio::time::timeout(Duration::from_secs(3), async {
        while changes.next().await != Some(LockState::Suspect) {}
    })
    .await;
    drop(paused);
    assert!(
        suspect.is_ok(),
        "a renewal the replica missed still counted"
    );
    let held = tokio::time::timeout(Duration::from_secs(3), async {
        while changes.next().await != Some(LockState::Held) {}
    })
    .await;
    assert!(
        held.is_ok(),
        "the guard did not recover once the replica was back"
    );
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_replicas_0_turns_it_off() {
    let Some(url) = cluster_url() else { return };
    let _serial = SERIAL.lock().await;
    let off = connect(&url, &[("wait_replicas", "0")]).await;
    let auto = connect(&url, &[("wait_timeout", "200ms")]).await;
    let name = unique_name("off");
    let (primary, replica) = owner_of(&url, &LockKeys::mutex("lockkit", &name).lock).await;
    let paused = Paused::replica(replica);
    // The default fails for want of the replica...
    let e = auto.mutex(&name).unwrap().try_lock().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ReplicaSync, "{e}");
    // ... wait_replicas=0 neither waits nor sends WAIT.
    let before = waits_run(primary).await;
    let started = Instant::now();
    let g = off
        .mutex(&name)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("free");
    g.release().await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(150));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        waits_run(primary).await,
        before,
        "wait_replicas=0 sent WAIT"
    );
    drop(paused);
}
