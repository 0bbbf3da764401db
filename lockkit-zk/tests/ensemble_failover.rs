//! Failover in the ZooKeeper ensemble of `scripts/services.sh up --cluster`
//! (`LOCKKIT_TEST_ZK_ENSEMBLE_URL`). While one handle holds a lock and two others wait for it:
//! the ensemble leader is stopped and started again; or every member is restarted in turn; or every
//! member is paused (SIGSTOP) for 3 s in turn. Checked: never two holders at once (a holder
//! leaves its critical section the moment `lost()` resolves), the holder's guard stays Held or
//! turns Lost with `lost()` resolving, the waiters then get the lock with larger tokens, and a
//! fresh acquisition works. The tests stop servers of the shared cluster (one at a time, one test
//! at a time) and start them again even if they fail. Also: a 2 s session outlives a hang of the
//! follower the handle talks to (the client moves to another server); a holder whose only server
//! hangs, or is cut off from the rest of the ensemble, is told `lost()` before the ensemble hands
//! the lock to someone else. The fault checks are those of `lockkit_testing::failover`.

mod common;

use std::time::{Duration, Instant};

use lockkit_core::{LockConfig, Locks};
use lockkit_testing::failover::{outlives_a_pause, serial, Cluster, Outage};
use lockkit_testing::unique_name;

const CLUSTER: Cluster = Cluster {
    url_name: "zk_ensemble",
    group: "zk-ensemble",
    members: ["zk-e1", "zk-e2", "zk-e3"],
};

async fn connect(url: String) -> Locks {
    lockkit_zk::connect(&LockConfig::new(url)).await.unwrap()
}

lockkit_testing::failover_suite!(CLUSTER, connect);

/// The ensemble member whose `cons` output lists session `sid`: the one the client talks to.
fn member_serving(url: &str, sid: i64) -> Option<&'static str> {
    use std::io::{Read, Write};
    let hosts = url.trim_start_matches("zk://");
    let hosts = hosts.split(['/', '?']).next().unwrap_or_default();
    let needle = format!("sid={sid:#x},");
    hosts
        .split(',')
        .zip(CLUSTER.members)
        .find_map(|(host, member)| {
            let mut conn = std::net::TcpStream::connect(host).ok()?;
            conn.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
            conn.write_all(b"cons").ok()?;
            let mut out = String::new();
            conn.read_to_string(&mut out).ok()?;
            out.contains(&needle).then_some(member)
        })
}

/// A 2 s session outlives a 4 s hang (SIGSTOP) of the follower the handle talks to: the client
/// gives up on the silent server and resumes the session through another one, so the guard may
/// turn Suspect but never Lost. (A hung leader is different: the ensemble cannot confirm anyone's
/// session until a new leader is elected, so a guard may rightly turn Lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_session_survives_a_hung_follower() {
    let Some(url) = CLUSTER.url() else {
        return;
    };
    let _serial = serial().await;
    let leader = CLUSTER.leader().expect("a leader");
    let sep = if url.contains('?') { '&' } else { '?' };
    let short = format!("{url}{sep}session_timeout=2s");
    // The client picks a server at random: keep a handle that talks to a follower.
    let mut found = None;
    for _ in 0..20 {
        let b = lockkit_zk::connect_zk(&LockConfig::new(&short))
            .await
            .unwrap();
        let sid = b.zk_client().unwrap().session_id().0;
        if let Some(m) = member_serving(&url, sid).filter(|m| *m != leader) {
            found = Some((b, m));
            break;
        }
    }
    let (backend, follower) = found.expect("no handle on a follower in 20 tries");
    let locks = backend.into_locks();
    let name = unique_name("hung-follower");
    let guard = locks.mutex(&name).unwrap().lock().await.unwrap();
    outlives_a_pause(guard, follower, "the 2 s session").await;
}

/// A holder whose only server hangs (SIGSTOP: the connection stays open but silent) while the
/// rest of the ensemble carries on is told `lost()` before the ensemble expires its session and
/// hands the lock to a waiter: the client library notices the silence only some time after the
/// last reply, and the lost deadline must allow for that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_cut_off_by_a_hung_server_is_told_before_the_lock_moves_on() {
    holder_on_a_follower_is_told_first("cut-off", Outage::pause).await;
}

/// A holder whose only server, a follower, is cut off from the rest of the ensemble (its
/// clients still reach it) is told `lost()` before the ensemble expires its session and hands
/// the lock to a waiter. The follower goes on answering reads and pings for `syncLimit` ticks
/// (5 s here) before it notices; the holder's heartbeat used to be such a read, and kept its
/// guard Held that much past the session's end on the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_on_an_isolated_follower_is_told_before_the_lock_moves_on() {
    holder_on_a_follower_is_told_first("isolated-follower", Outage::isolate).await;
}

/// A holder that knows only a follower F, a waiter that knows only the other two members (10 s
/// sessions, where the client notices a silence late, 5 s or more), and `fault` done to F: the
/// holder must be told `lost()` before the waiter gets the lock. F serves again before the next
/// test, which may talk to it alone.
async fn holder_on_a_follower_is_told_first(case: &str, fault: fn(&str) -> Outage) {
    let Some(url) = CLUSTER.url() else {
        return;
    };
    let _serial = serial().await;
    let leader = CLUSTER.leader().expect("a leader");
    let hosts = common::server_addr(&url);
    let hosts: Vec<&str> = hosts.split(',').collect();
    let f = CLUSTER.members.iter().position(|m| *m != leader).unwrap();
    let others: Vec<&str> = (0..CLUSTER.members.len())
        .filter(|i| *i != f)
        .map(|i| hosts[i])
        .collect();
    let holder = connect(format!("zk://{}?session_timeout=10s", hosts[f])).await;
    let waiter = connect(format!("zk://{}?session_timeout=10s", others.join(","))).await;
    let name = unique_name(case);
    let guard = holder.mutex(&name).unwrap().lock().await.unwrap();
    let lost = guard.lost();
    let lost_at = tokio::spawn(async move {
        lost.await;
        Instant::now()
    });
    let lock = waiter.mutex(&name).unwrap();
    let waiting = tokio::spawn(async move {
        let g = lock.lock_for(Duration::from_secs(25)).await;
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let cut = Instant::now();
    let outage = fault(CLUSTER.members[f]);
    let waited = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    outage.end();
    let (acquired_at, g) = waited.expect("waiter finished").unwrap();
    let g = g
        .unwrap()
        .expect("the waiter got the lock once the session expired");
    let lost_at = tokio::time::timeout(Duration::from_secs(10), lost_at)
        .await
        .expect("lost() resolved")
        .unwrap();
    eprintln!(
        "{case} at 0; holder told lost at {:?}; waiter acquired at {:?}",
        lost_at - cut,
        acquired_at - cut
    );
    assert!(
        lost_at < acquired_at,
        "the waiter acquired {:?} after the fault, before the holder was told lost ({:?})",
        acquired_at - cut,
        lost_at - cut
    );
    g.release().await.unwrap();
    let f_url = format!("zk://{}", hosts[f]);
    let back = async {
        while lockkit_zk::connect(&LockConfig::new(&f_url)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), back)
        .await
        .expect("the follower serves again");
}
