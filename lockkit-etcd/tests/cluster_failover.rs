//! Failover in the 3-member etcd cluster of `scripts/services.sh up --cluster`
//! (`LOCKKIT_TEST_ETCD_CLUSTER_URL`). While one handle holds a lock and two others wait for it:
//! the Raft leader is stopped and started again; or every member is restarted in turn; or every
//! member is paused (SIGSTOP) for 3 s in turn. Checked: never two holders at once (a holder
//! leaves its critical section the moment `lost()` resolves), the holder's guard stays Held or
//! turns Lost with `lost()` resolving, the waiters then get the lock with larger tokens, and a
//! fresh acquisition works. The tests stop servers of the shared cluster (one at a time, one test
//! at a time) and start them again even if they fail. Also: a 2 s lease outlives a hang of the
//! member the handle talks to (the keepalive moves to another endpoint).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit_core::testing::{server_url, unique_name, OverlapDetector};
use lockkit_core::{DistLockExt, LockConfig, LockState, Locks};

const GROUP: &str = "etcd-cluster";
const MEMBERS: [&str; 3] = ["etcd-c1", "etcd-c2", "etcd-c3"];

/// The tests stop servers, so they run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The fault injected while the lock is held and waited for.
enum Fault {
    /// Stop the leader, wait for a new one, start the old one again.
    Leader,
    /// Stop and start every member in turn (so also the one the holder talks to).
    EveryMember,
    /// SIGSTOP every member in turn for 3 s, then SIGCONT: a hung server, not a dead one.
    PauseEveryMember,
}

/// `scripts/services.sh ARGS...`, its trimmed stdout if it succeeded.
fn services(args: &[&str]) -> Option<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/services.sh");
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/services.sh");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Starts the stopped member again if the test fails before it does.
struct Restart(Option<String>);

impl Drop for Restart {
    fn drop(&mut self) {
        if let Some(member) = self.0.take() {
            services(&["start", &member]);
        }
    }
}

/// Resumes the paused member if the test fails before it does.
struct Resume(Option<String>);

impl Drop for Resume {
    fn drop(&mut self) {
        if let Some(member) = self.0.take() {
            services(&["resume", &member]);
        }
    }
}

/// Waits for the group to elect a leader other than `old`.
async fn new_leader(old: &str) -> String {
    let start = Instant::now();
    loop {
        if let Some(l) = services(&["leader", GROUP]).filter(|l| !l.is_empty() && l != old) {
            return l;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no new {GROUP} leader within 30 s after stopping {old}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Stops `member` and starts it again (also when the test fails in between).
async fn stop_start(member: &str, before_start: impl std::future::Future<Output = ()>) {
    let mut restart = Restart(Some(member.to_string()));
    services(&["stop", member]).expect("stop a member");
    before_start.await;
    services(&["start", member]).expect("start the member again");
    restart.0 = None;
}

async fn inject(fault: Fault) {
    match fault {
        Fault::Leader => {
            let leader = services(&["leader", GROUP]).expect("a leader before the fault");
            stop_start(&leader, async {
                let next = new_leader(&leader).await;
                eprintln!("stopped {leader}; {next} leads now");
            })
            .await;
        }
        Fault::EveryMember => {
            for m in MEMBERS {
                stop_start(m, tokio::time::sleep(Duration::from_secs(1))).await;
                eprintln!("restarted {m}");
            }
        }
        Fault::PauseEveryMember => {
            for m in MEMBERS {
                let mut resume = Resume(Some(m.to_string()));
                services(&["pause", m]).expect("pause a member");
                tokio::time::sleep(Duration::from_secs(3)).await;
                services(&["resume", m]).expect("resume the member");
                resume.0 = None;
                eprintln!("paused and resumed {m}");
            }
        }
    }
}

async fn connect(url: &str) -> Locks {
    lockkit_etcd::connect(&LockConfig::new(url)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_failover_keeps_a_single_holder() {
    held_and_waited_through(Fault::Leader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_keeps_a_single_holder() {
    held_and_waited_through(Fault::EveryMember).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_each_member_keeps_a_single_holder() {
    held_and_waited_through(Fault::PauseEveryMember).await;
}

async fn held_and_waited_through(fault: Fault) {
    let Some(url) = server_url("etcd_cluster") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let name = unique_name("failover");
    let detector = OverlapDetector::new();

    let holder = connect(&url).await;
    let guard = holder.mutex(&name).unwrap().lock().await.unwrap();
    let token = guard.token();
    let inside = Arc::new(Mutex::new(Some(detector.enter())));
    let leave_on_lost = {
        let inside = inside.clone();
        let lost = guard.lost();
        tokio::spawn(async move {
            lost.await;
            inside.lock().unwrap().take();
        })
    };

    let mut waiters = Vec::new();
    for _ in 0..2 {
        let locks = connect(&url).await;
        let (detector, name) = (detector.clone(), name.clone());
        waiters.push(tokio::spawn(async move {
            // A wait the fault broke (a session or lease that ended) is retried, as an
            // application would.
            let g = loop {
                match locks
                    .mutex(&name)
                    .unwrap()
                    .lock_for(Duration::from_secs(60))
                    .await
                {
                    Ok(Some(g)) => break g,
                    Ok(None) => panic!("waiter: no lock within 60 s"),
                    Err(e) if e.is_retryable() => {
                        eprintln!("waiter: {e}; waiting again");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("waiter: {e}"),
                }
            };
            let t = g.token();
            let lost = g.lost();
            {
                let _inside = detector.enter();
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = g.lost() => {}
                }
            }
            if let Err(e) = g.release().await {
                // Only a guard that was told it lost the lock may fail to release it.
                tokio::time::timeout(Duration::from_secs(5), lost)
                    .await
                    .unwrap_or_else(|_| panic!("waiter: release failed ({e}) without lost()"));
            }
            t
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    inject(fault).await;

    // The holder's guard settles: Held again, or Lost with lost() resolved.
    let start = Instant::now();
    while !matches!(guard.state(), LockState::Held | LockState::Lost) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "guard still {:?} 30 s after the fault",
            guard.state()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("holder's guard after the fault: {:?}", guard.state());
    if guard.state() == LockState::Held {
        // Still ours on the server too: nobody else gets it, the waiters still wait.
        let probe = connect(&url).await;
        assert!(probe
            .mutex(&name)
            .unwrap()
            .try_lock()
            .await
            .unwrap()
            .is_none());
        assert!(waiters.iter().all(|w| !w.is_finished()));
        inside.lock().unwrap().take();
        guard.release().await.unwrap();
    } else {
        tokio::time::timeout(Duration::from_secs(5), guard.lost())
            .await
            .expect("guard is Lost but lost() did not resolve");
        // Told it lost the lock, the holder gives it up (whatever is left of it on the server).
        let _ = guard.release().await;
    }
    leave_on_lost.abort();

    let mut last = token;
    for w in waiters {
        let t = tokio::time::timeout(Duration::from_secs(60), w)
            .await
            .expect("waiter finished")
            .unwrap();
        assert!(
            t > token,
            "waiter token {t:?} not above the holder's {token:?}"
        );
        last = last.max(t);
    }
    let fresh = connect(&url).await;
    let again = fresh
        .mutex(&name)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("the lock is free after the fault");
    assert!(again.token() > last);
    again.release().await.unwrap();
    assert_eq!(detector.max_inside(), 1, "two holders at once");
}

/// A 2 s lease outlives a 4 s hang (SIGSTOP) of the member the handle talks to (the first
/// endpoint): the keepalive gives up on the hung member and renews through another one, so the
/// guard may turn Suspect but never Lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_lease_survives_a_hung_member() {
    let Some(url) = server_url("etcd_cluster") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let sep = if url.contains('?') { '&' } else { '?' };
    let locks = connect(&format!("{url}{sep}lease_ttl=2s")).await;
    let name = unique_name("hung-member");
    let guard = locks.mutex(&name).unwrap().lock().await.unwrap();
    let mut lost = guard.lost();

    let first = MEMBERS[0];
    let mut resume = Resume(Some(first.to_string()));
    services(&["pause", first]).expect("pause the first member");
    let lost_while_hung = tokio::time::timeout(Duration::from_secs(4), &mut lost)
        .await
        .is_ok();
    services(&["resume", first]).expect("resume it");
    resume.0 = None;
    assert!(
        !lost_while_hung,
        "the 2 s lease was lost while {first} hung"
    );
    let start = Instant::now();
    while guard.state() != LockState::Held {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "guard stayed {:?}",
            guard.state()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    guard.release().await.unwrap();
}
