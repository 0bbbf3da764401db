//! Failover checks for a 3-member cluster of `scripts/services.sh up --cluster` (feature
//! `testing`).
//!
//! While one handle holds a lock and two others wait for it, a [`Fault`] is injected: the leader is
//! stopped and started again; or every member is restarted in turn; or every member is paused
//! (SIGSTOP) for 3 s in turn. Checked: never two holders at once (a holder leaves its critical
//! section the moment `lost()` resolves), the holder's guard stays Held or turns Lost with
//! `lost()` resolving, the waiters then get the lock with larger tokens, and a fresh acquisition
//! works. [`failover_suite!`] expands the three faults into one `#[tokio::test]` each:
//!
//! ```ignore
//! use lockkit_testing::failover::Cluster;
//!
//! const CLUSTER: Cluster = Cluster {
//!     url_name: "etcd_cluster",
//!     group: "etcd-cluster",
//!     members: ["etcd-c1", "etcd-c2", "etcd-c3"],
//! };
//! async fn connect(url: String) -> lockkit_core::Locks {
//!     lockkit_etcd::connect(&lockkit_core::LockConfig::new(url)).await.unwrap()
//! }
//! lockkit_testing::failover_suite!(CLUSTER, connect);
//! ```
//!
//! The checks stop servers of the shared cluster (one at a time, one test at a time: see
//! [`serial`]) and start them again even if they fail.
//!
//! [`failover_suite!`]: crate::failover_suite

use std::future::Future;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{unique_name, OverlapDetector};
use lockkit_core::{LockGuard, LockState, Locks};

/// The fault injected while the lock is held and waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Stop the leader, wait for a new one, start the old one again.
    Leader,
    /// Stop and start every member in turn (so also the one the holder talks to).
    EveryMember,
    /// SIGSTOP every member in turn for 3 s, then SIGCONT: a hung server, not a dead one.
    PauseEveryMember,
}

/// A cluster of `scripts/services.sh up --cluster`, as the failover checks see it.
#[derive(Debug, Clone, Copy)]
pub struct Cluster {
    /// The [`server_url`](super::server_url) name of its URL (`etcd_cluster` reads
    /// `LOCKKIT_TEST_ETCD_CLUSTER_URL`).
    pub url_name: &'static str,
    /// Its `services.sh` group, as `services.sh leader GROUP` takes it.
    pub group: &'static str,
    /// Its `services.sh` member names, in the order of the URL's hosts.
    pub members: [&'static str; 3],
}

impl Cluster {
    /// The cluster URL, or `None` to skip (see [`server_url`](super::server_url)).
    pub fn url(&self) -> Option<String> {
        super::server_url(self.url_name)
    }

    /// The member that leads now, per `services.sh leader`.
    pub fn leader(&self) -> Option<String> {
        services(&["leader", self.group]).filter(|l| !l.is_empty())
    }

    /// Waits (up to 30 s) for the group to elect a leader other than `old`.
    pub async fn new_leader(&self, old: &str) -> String {
        let start = Instant::now();
        loop {
            if let Some(l) = self.leader().filter(|l| l != old) {
                return l;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no new {} leader within 30 s after stopping {old}",
                self.group
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn inject(&self, fault: Fault) {
        match fault {
            Fault::Leader => {
                let leader = self.leader().expect("a leader before the fault");
                let stopped = Outage::stop(&leader);
                let next = self.new_leader(&leader).await;
                eprintln!("stopped {leader}; {next} leads now");
                stopped.end();
            }
            Fault::EveryMember => {
                for m in self.members {
                    let stopped = Outage::stop(m);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    stopped.end();
                    eprintln!("restarted {m}");
                }
            }
            Fault::PauseEveryMember => {
                for m in self.members {
                    let paused = Outage::pause(m);
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    paused.end();
                    eprintln!("paused and resumed {m}");
                }
            }
        }
    }
}

/// `scripts/services.sh ARGS...`: its trimmed stdout if it succeeded.
pub fn services(args: &[&str]) -> Option<String> {
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

/// The checks stop servers, so they run one at a time: hold this for the whole test (one lock per
/// test binary).
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

/// A member taken out with `services.sh stop`, `pause` (SIGSTOP) or `isolate`; brought back
/// (`start`, `resume`, `heal`) by [`Outage::end`] or, if the test fails first, on drop.
#[derive(Debug)]
pub struct Outage {
    member: Option<String>,
    undo: &'static str,
}

impl Outage {
    /// Stops `member` (panics if that fails).
    pub fn stop(member: &str) -> Self {
        Self::begin(member, "stop", "start")
    }

    /// Pauses `member` (panics if that fails).
    pub fn pause(member: &str) -> Self {
        Self::begin(member, "pause", "resume")
    }

    /// Cuts `member` off from the rest of its group while its clients still reach it
    /// (`services.sh isolate`; panics if that fails).
    pub fn isolate(member: &str) -> Self {
        Self::begin(member, "isolate", "heal")
    }

    fn begin(member: &str, action: &str, undo: &'static str) -> Self {
        let outage = Outage {
            member: Some(member.to_string()),
            undo,
        };
        services(&[action, member]).unwrap_or_else(|| panic!("{action} {member}"));
        outage
    }

    /// Brings the member back (panics if that fails, after which the drop tries once more).
    pub fn end(mut self) {
        let member = self.member.clone().expect("a member that is out");
        services(&[self.undo, &member]).unwrap_or_else(|| panic!("{} {member}", self.undo));
        self.member = None;
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        if let Some(member) = self.member.take() {
            services(&[self.undo, &member]);
        }
    }
}

/// Pauses `member` for 4 s while `guard` is held and checks that the guard is not told `lost()`
/// meanwhile (`what` names the lease or session that must outlive the pause), that it is Held
/// again within 10 s of the resume, and that it releases.
pub async fn outlives_a_pause(guard: LockGuard, member: &str, what: &str) {
    let mut lost = guard.lost();
    let paused = Outage::pause(member);
    let lost_while_hung = tokio::time::timeout(Duration::from_secs(4), &mut lost)
        .await
        .is_ok();
    paused.end();
    assert!(!lost_while_hung, "{what} was lost while {member} hung");
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

/// One handle holds a lock and two others wait for it while `fault` hits `cluster` (see the
/// module docs for what is checked). `connect` makes a handle for a URL. Skips when the
/// cluster's URL is not set and not required.
pub async fn held_and_waited_through<C, F>(cluster: &Cluster, connect: C, fault: Fault)
where
    C: Fn(String) -> F,
    F: Future<Output = Locks>,
{
    let Some(url) = cluster.url() else {
        return;
    };
    let _serial = serial().await;
    let name = unique_name("failover");
    let detector = OverlapDetector::new();

    let holder = connect(url.clone()).await;
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
        let locks = connect(url.clone()).await;
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

    cluster.inject(fault).await;

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
        let probe = connect(url.clone()).await;
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
    let fresh = connect(url).await;
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

/// Expands the failover checks into one `#[tokio::test]` per [`Fault`] for a backend:
/// `$cluster` is a [`Cluster`], `$connect` an async fn from a URL (`String`) to a
/// [`Locks`](lockkit_core::Locks) handle.
///
/// [`Fault`]: crate::failover::Fault
/// [`Cluster`]: crate::failover::Cluster
#[macro_export]
macro_rules! failover_suite {
    ($cluster:expr, $connect:path) => {
        $crate::__failover_cases!($cluster, $connect;
            leader_failover_keeps_a_single_holder => Leader,
            rolling_restart_keeps_a_single_holder => EveryMember,
            pausing_each_member_keeps_a_single_holder => PauseEveryMember,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __failover_cases {
    ($cluster:expr, $connect:path; $($case:ident => $fault:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::failover::held_and_waited_through(
                    &$cluster,
                    $connect,
                    $crate::failover::Fault::$fault,
                )
                .await;
            }
        )*
    };
}

/// After the faults: `mutex` is free again within 5 s (the reaper retries at most every 2 s), so
/// nothing a failed or timed-out acquire left behind (`what`) blocks it. Returns the guard.
pub async fn free_soon_after(mutex: &lockkit_core::Mutex, what: &str) -> LockGuard {
    let started = Instant::now();
    let g = mutex
        .lock_for(Duration::from_secs(20))
        .await
        .unwrap()
        .expect("free after the release");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{what} blocked the lock: {:?}",
        started.elapsed()
    );
    g
}

/// A multi-lock wait on `names` through `locks`, spawned: whether it got the set, and how long
/// it took.
fn multi_wait(
    locks: &Locks,
    names: &[&str],
    budget: Duration,
) -> tokio::task::JoinHandle<(lockkit_core::Result<bool>, Duration)> {
    let m = locks.multi(names).unwrap();
    tokio::spawn(async move {
        let started = Instant::now();
        let r = m.lock_for(budget).await;
        (r.map(|g| g.is_some()), started.elapsed())
    })
}

/// Releases a frozen server (SIGSTOP of `member`, past the command timeout) never answers, a
/// release future dropped half-way, a semaphore wait and multi-lock waits that time out in the
/// freeze (one waiting when it began, one begun in it) leave nothing on the live sessions: once
/// the server is back, `c` gets the mutexes, the multi-locks' members and the permit at once.
/// Each multi-lock's wait ends within its budget plus the kernel's 100 ms for cleanup (and a
/// little for a loaded machine). `a`
/// holds, `b` waits for the permit and the multi-lock; all three use names under `base`.
pub async fn releases_and_permit_waits_in_a_freeze_leave_nothing(
    (a, b, c): (&Locks, &Locks, &Locks),
    member: &str,
    base: &str,
) {
    use lockkit_core::AcquireOptions;
    let (released_name, dropped_name, sem, multi_free) = (
        format!("{base}/frozen-release"),
        format!("{base}/frozen-drop"),
        format!("{base}/frozen-sem"),
        format!("{base}/frozen-multi"),
    );
    let released = a.mutex(&released_name).unwrap().lock().await.unwrap();
    let dropped = a.mutex(&dropped_name).unwrap().lock().await.unwrap();
    let permit = a
        .semaphore(&sem, 1)
        .unwrap()
        .try_acquire(1)
        .await
        .unwrap()
        .expect("a free permit");
    let waiter = {
        let s = b.semaphore(&sem, 1).unwrap();
        tokio::spawn(async move {
            s.acquire(1, &AcquireOptions::new().wait(Duration::from_millis(1200)))
                .await
        })
    };
    // Takes `multi_free`, then waits for `released_name`, which `a` holds.
    let budget = Duration::from_millis(1200);
    let multi_waiter = multi_wait(b, &[&multi_free, &released_name], budget);
    tokio::time::sleep(Duration::from_millis(300)).await; // its entry is in place
    let frozen = Outage::pause(member);
    // A multi-lock of free members begun in the freeze: where the backend takes a set in one
    // step, that step gets no answer (and may be applied when the server wakes).
    let fresh = [
        format!("{base}/frozen-set-a"),
        format!("{base}/frozen-set-b"),
    ];
    let fresh_waiter = multi_wait(c, &[&fresh[0], &fresh[1]], budget);
    let r = tokio::time::timeout(Duration::from_secs(10), released.release())
        .await
        .expect("a release returns within its bound");
    assert!(r.is_err(), "a frozen server confirmed a release");
    // Dropped while it waits for the server: its work goes on in the background.
    let _ = tokio::time::timeout(Duration::from_millis(200), dropped.release()).await;
    let r = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the permit wait ends")
        .unwrap();
    assert!(
        !matches!(r, Ok(Some(_))),
        "a permit granted by a frozen server"
    );
    for (waiter, what) in [
        (multi_waiter, "waiting"),
        (fresh_waiter, "begun in the freeze"),
    ] {
        let (r, took) = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the multi-lock wait ends")
            .unwrap();
        assert!(
            !matches!(r, Ok(true)),
            "a multi-lock ({what}) granted by a frozen server"
        );
        assert!(
            took < budget + Duration::from_millis(100 + 200),
            "a multi-lock wait ({what}) of {budget:?} took {took:?} in a freeze"
        );
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    frozen.end();
    for n in [
        &released_name,
        &dropped_name,
        &multi_free,
        &fresh[0],
        &fresh[1],
    ] {
        let g = free_soon_after(&c.mutex(n).unwrap(), n).await;
        g.release().await.unwrap();
    }
    let until = Instant::now() + Duration::from_secs(10);
    while permit.state() != LockState::Held {
        assert!(
            Instant::now() < until,
            "the permit did not come back to Held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    permit.release().await.unwrap();
    let started = Instant::now();
    let p = c
        .semaphore(&sem, 1)
        .unwrap()
        .acquire(1, &AcquireOptions::new().wait(Duration::from_secs(20)))
        .await
        .unwrap()
        .expect("the permit comes free");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a timed-out permit wait's entry blocked the permit: {:?}",
        started.elapsed()
    );
    p.release().await.unwrap();
}
