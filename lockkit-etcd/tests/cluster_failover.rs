//! Failover in the 3-member etcd cluster of `scripts/services.sh up --cluster`
//! (`LOCKKIT_TEST_ETCD_CLUSTER_URL`). While one handle holds a lock and two others wait for it:
//! the Raft leader is stopped and started again; or every member is restarted in turn; or every
//! member is paused (SIGSTOP) for 3 s in turn. Checked: never two holders at once (a holder
//! leaves its critical section the moment `lost()` resolves), the holder's guard stays Held or
//! turns Lost with `lost()` resolving, the waiters then get the lock with larger tokens, and a
//! fresh acquisition works. The tests stop servers of the shared cluster (one at a time, one test
//! at a time) and start them again even if they fail. Also: a 2 s lease outlives a hang of the
//! follower the handle talks to (the keepalive moves to another endpoint). The fault checks are
//! those of `lockkit_testing::failover`.

use lockkit_core::{LockConfig, Locks};
use lockkit_testing::failover::{outlives_a_pause, serial, Cluster};
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
