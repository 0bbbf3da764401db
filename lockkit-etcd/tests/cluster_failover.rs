//! Failover in the 3-member etcd cluster of `scripts/services.sh up --cluster`
//! (`LOCKKIT_TEST_ETCD_CLUSTER_URL`). While one handle holds a lock and two others wait for it:
//! the Raft leader is stopped and started again; or every member is restarted in turn; or every
//! member is paused (SIGSTOP) for 3 s in turn. Checked: never two holders at once (a holder
//! leaves its critical section the moment `lost()` resolves), the holder's guard stays Held or
//! turns Lost with `lost()` resolving, the waiters then get the lock with larger tokens, and a
//! fresh acquisition works. The tests stop servers of the shared cluster (one at a time, one test
//! at a time) and start them again even if they fail. Also: a 2 s lease outlives a hang of the
//! follower the handle talks to (the keepalive moves to another endpoint), and a waiter wakes
//! while the member its watch runs on is cut off from the quorum or frozen. The fault checks are
//! those of `lockkit_testing::failover`.

use lockkit_core::{LockConfig, Locks};
use std::time::{Duration, Instant};

use lockkit_testing::failover::{outlives_a_pause, serial, Cluster, Outage};
use lockkit_testing::unique_name;

const CLUSTER: Cluster = Cluster {
    url_name: "etcd_cluster",
    group: "etcd-cluster",
    members: ["etcd-c1", "etcd-c2", "etcd-c3"],
};

async fn connect(url: String) -> Locks {
    lockkit_etcd::connect(&LockConfig::new(url)).await.unwrap()
}

lockkit_testing::failover_suite!(CLUSTER, connect);

/// A 2 s lease outlives a 4 s hang (SIGSTOP) of the follower the handle talks to (its first
/// endpoint): the keepalive gives up on the hung member and renews through another one, so the
/// guard may turn Suspect but never Lost. (Not the leader: etcd before 3.4.28 and 3.5.11, such as
/// Debian's 3.4.23, lets a leader that hung revoke every lease once it resumes, etcd issue 15247;
/// lockkit then rightly turns the guard Lost, which `pausing_each_member_keeps_a_single_holder`
/// covers.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_lease_survives_a_hung_follower() {
    let Some(url) = CLUSTER.url() else {
        return;
    };
    let _serial = serial().await;
    let leader = CLUSTER.leader().expect("a leader");
    let follower = CLUSTER
        .members
        .iter()
        .position(|m| *m != leader)
        .expect("a follower");
    let (hosts, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let (scheme, hosts) = hosts.split_once("://").expect("a URL");
    // The members' endpoints, in the URL's order; the follower's first.
    let mut hosts: Vec<&str> = hosts.split(',').collect();
    assert_eq!(hosts.len(), CLUSTER.members.len(), "{url}");
    hosts.rotate_left(follower);
    let sep = if query.is_empty() { "" } else { "&" };
    let url = format!("{scheme}://{}?{query}{sep}lease_ttl=2s", hosts.join(","));
    let locks = connect(url).await;
    let name = unique_name("hung-follower");
    let guard = locks.mutex(&name).unwrap().lock().await.unwrap();
    outlives_a_pause(guard, CLUSTER.members[follower], "the 2 s lease").await;
}

/// The members' endpoints of `url`, rotated so that member `first` comes first, with `extra`
/// options added.
fn url_starting_at(url: &str, first: usize, extra: &str) -> String {
    let (hosts, query) = url.split_once('?').unwrap_or((url, ""));
    let (scheme, hosts) = hosts.split_once("://").expect("a URL");
    let mut hosts: Vec<&str> = hosts.split(',').collect();
    hosts.rotate_left(first);
    let sep = if query.is_empty() { "" } else { "&" };
    format!("{scheme}://{}?{query}{sep}{extra}", hosts.join(","))
}

/// Issue 17: a waiter whose name watch runs on a member cut off from the quorum (still reachable,
/// so its connection looks healthy) wakes when the lock is released through another member: the
/// stream requires a leader, a silent one is asked for progress, and a failover of the pool
/// moves it. Before, the waiter slept until the member came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_while_its_watched_member_is_cut_off() {
    waiter_wakes_through(Outage::isolate).await;
}

/// The same with the member frozen (SIGSTOP): nothing answers on its connection at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_while_its_watched_member_is_frozen() {
    waiter_wakes_through(Outage::pause).await;
}

async fn waiter_wakes_through(fault: fn(&str) -> Outage) {
    let Some(url) = CLUSTER.url() else {
        return;
    };
    let _serial = serial().await;
    let leader = CLUSTER.leader().expect("a leader");
    let members: Vec<usize> = (0..CLUSTER.members.len()).collect();
    let follower = *members
        .iter()
        .find(|&&m| CLUSTER.members[m] != leader)
        .expect("a follower");
    let other = *members
        .iter()
        .find(|&&m| m != follower)
        .expect("another member");
    let waiter = connect(url_starting_at(&url, follower, "command_timeout=1s")).await;
    let holder = connect(url_starting_at(&url, other, "command_timeout=1s")).await;
    let name = unique_name("silent-watch");
    let held = holder.mutex(&name).unwrap().lock().await.unwrap();
    let waiting = {
        let m = waiter.mutex(&name).unwrap();
        tokio::spawn(async move { m.lock().await })
    };
    // The waiter's key is in place (its watch too: a waiter watches before it waits).
    let queued = Instant::now();
    while holder
        .inspect(&name, lockkit_core::Primitive::Mutex)
        .await
        .unwrap()
        .waiters
        .is_empty()
    {
        assert!(
            queued.elapsed() < Duration::from_secs(5),
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let outage = fault(CLUSTER.members[follower]);
    held.release().await.unwrap();
    let released = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the waiter slept through the release while its member was out")
        .unwrap()
        .unwrap();
    let woke_after = released.elapsed();
    assert_eq!(guard.state(), lockkit_core::LockState::Held);
    eprintln!("woke {woke_after:?} after the release");
    guard.release().await.unwrap();
    outage.end();
    // The member is back: the cluster has a leader again before the next test.
    CLUSTER.new_leader("").await;
}
