//! Election interop with Go's `concurrency.Election`, through `etcdctl elect` (which is built on
//! it) and the Go peer in `interop/go-etcd` (built here with `go build`): a Go candidate and a
//! lockkit candidate on one election never lead at once, each names the other as leader, and
//! leadership passes both ways; `etcdctl elect -l` (Go's `Observe`) follows lockkit's leaders
//! and proclamations, and lockkit's `leader` and `observe` follow Go's `Proclaim`. Also, on
//! Go's layout, what a revoked lease (as Go's `Session.Close` does) looks like to observers.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use lockkit_core::ErrorKind;

const SOON: Duration = Duration::from_secs(10);

/// The test server's endpoints, comma-separated.
fn endpoints(url: &str) -> String {
    let u = lockkit_core::ServerUrl::parse_for(url, &lockkit_etcd::INFO).unwrap();
    let eps: Vec<String> = u.hosts.iter().map(|h| h.to_string()).collect();
    eps.join(",")
}

/// A Go peer (`etcdctl`, or `interop/go-etcd`'s) on the test server, its stdout read line by
/// line, its stdin ours.
struct GoPeer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl GoPeer {
    fn etcdctl(url: &str, args: &[&str]) -> GoPeer {
        let mut cmd = Command::new("etcdctl");
        cmd.arg(format!("--endpoints={}", endpoints(url)))
            .args(args)
            .env_remove("ETCDCTL_ENDPOINTS");
        GoPeer::spawn(cmd, "etcdctl runs (scripts/services.sh installs it)")
    }

    /// `interop/go-etcd`'s peer in mode `elect`, campaigning on `prefix` with `value`.
    fn go_candidate(url: &str, peer: &std::path::Path, prefix: &str, value: &str) -> GoPeer {
        let mut cmd = Command::new(peer);
        cmd.args(["elect", "-endpoints", &endpoints(url), "-prefix", prefix])
            .args(["-value", value]);
        GoPeer::spawn(cmd, "the Go peer runs")
    }

    fn spawn(mut cmd: Command, what: &str) -> GoPeer {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect(what);
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        GoPeer {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// Sends it one line.
    fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("the peer reads its stdin");
    }

    /// The next line it prints, within `limit`.
    fn line(&self, limit: Duration) -> Option<String> {
        self.lines.recv_timeout(limit).ok()
    }

    /// Lines until one equals `want`, within `limit`; panics otherwise.
    fn expect(&self, want: &str, limit: Duration) {
        let until = std::time::Instant::now() + limit;
        let mut seen = Vec::new();
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            match self.line(left) {
                Some(l) if l == want => return,
                Some(l) => seen.push(l),
                None => break,
            }
        }
        panic!("the Go peer did not print {want:?} within {limit:?}; printed {seen:?}");
    }

    /// Asks it to stop as a user would (Ctrl-C): `etcdctl elect` resigns then.
    fn interrupt(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for GoPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `interop/go-etcd`'s peer, built into cargo's scratch directory for tests (Go modules come
/// through the module proxy or the cache); removed when dropped.
struct GoBinary(PathBuf);

impl GoBinary {
    /// `None` when there is no `go` and the etcd tests are not required (`scripts/test.sh`
    /// requires them; Go comes from the machine, as for `40-go-etcd-interop.sh`).
    fn build() -> Option<GoBinary> {
        let go = Command::new("go")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !go {
            let required = std::env::var("LOCKKIT_TEST_REQUIRE").is_ok_and(|r| {
                r.split(',')
                    .any(|b| b.trim() == "etcd" || b.trim() == "all")
            });
            assert!(!required, "`go` is needed for the Go election interop test");
            return None;
        }
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../interop/go-etcd");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("go-etcd-peer-{}", std::process::id()));
        let built = Command::new("go")
            .args(["build", "-o"])
            .arg(&out)
            .arg(".")
            .current_dir(&dir)
            .status()
            .expect("go build runs");
        assert!(built.success(), "go build of interop/go-etcd failed");
        Some(GoBinary(out))
    }
}

impl Drop for GoBinary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The election's prefix as Go names it (lockkit adds the trailing `/`).
fn go_prefix(name: &str) -> String {
    format!("lockkit/%election/{}", lockkit_core::encode_name(name))
}

/// A Go candidate leads first: lockkit sees it as leader and waits; once Go resigns, lockkit
/// leads with a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_leads_then_hands_over_to_lockkit() {
    let Some(url) = url() else { return };
    let name = lockkit_testing::unique_name("elect-go-first");
    let mut go = GoPeer::etcdctl(&url, &["elect", &go_prefix(&name), "go-candidate"]);
    // Elected: it prints its key, then its value.
    go.expect("go-candidate", SOON);

    let locks = connect(&url, "").await;
    let e = locks.election(&name).unwrap();
    let go_leader = e.leader().await.unwrap().expect("Go leads");
    assert_eq!(go_leader.value(), b"go-candidate");
    let mut changes = e.observe().await.unwrap();
    assert_eq!(
        changes.next().await.unwrap().unwrap(),
        Some(go_leader.clone())
    );
    let waited = e
        .campaign_for("lockkit", Duration::from_millis(300))
        .await
        .unwrap();
    assert!(waited.is_none(), "lockkit led while Go did");

    let contender = e.clone();
    let campaign = tokio::spawn(async move { contender.campaign("lockkit").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!campaign.is_finished(), "lockkit led while Go did");
    go.interrupt();
    let lead = tokio::time::timeout(SOON, campaign)
        .await
        .expect("lockkit leads once Go resigned")
        .unwrap()
        .unwrap();
    assert!(lead.term() > go_leader.term(), "the term rises");
    let now = e.leader().await.unwrap().expect("lockkit leads");
    assert_eq!((now.value(), now.term()), (&b"lockkit"[..], lead.term()));
    // The observer saw Go go and lockkit come, in order.
    let mut last = changes.next().await.unwrap().unwrap();
    if last.is_none() {
        last = changes.next().await.unwrap().unwrap();
    }
    assert_eq!(last, Some(now));
    assert!(lead.resign().await.unwrap());
}

/// lockkit leads first: Go's observer (`etcdctl elect -l`) names it and follows its
/// proclamation, a Go candidate waits, and leads once lockkit resigns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockkit_leads_then_hands_over_to_go() {
    let Some(url) = url() else { return };
    let name = lockkit_testing::unique_name("elect-rs-first");
    let locks = connect(&url, "").await;
    let e = locks.election(&name).unwrap();
    let lead = e.campaign("lockkit-1").await.unwrap();

    let listen = GoPeer::etcdctl(&url, &["elect", "-l", &go_prefix(&name)]);
    listen.expect("lockkit-1", SOON);
    lead.proclaim("lockkit-2").await.unwrap();
    listen.expect("lockkit-2", SOON);

    let mut go = GoPeer::etcdctl(&url, &["elect", &go_prefix(&name), "go-candidate"]);
    assert_eq!(
        go.line(Duration::from_millis(500)),
        None,
        "Go led while lockkit did"
    );
    let mut changes = e.observe().await.unwrap();
    let first = changes
        .next()
        .await
        .unwrap()
        .unwrap()
        .expect("lockkit leads");
    assert_eq!(first.value(), b"lockkit-2");

    assert!(lead.resign().await.unwrap());
    go.expect("go-candidate", SOON);
    listen.expect("go-candidate", SOON);
    let mut seen = changes.next().await.unwrap().unwrap();
    if seen.is_none() {
        seen = changes.next().await.unwrap().unwrap();
    }
    let go_leader = seen.expect("Go leads");
    assert_eq!(go_leader.value(), b"go-candidate");
    assert!(go_leader.term() > first.term(), "the term rises");

    // A lockkit leader whose key someone else deletes is told, unlike Go's.
    go.interrupt();
    let again = e.campaign("lockkit-3").await.unwrap();
    let mut raw = raw(&url).await;
    let key = raw
        .get(
            format!("{}/", go_prefix(&name)),
            Some(lockkit_etcd::etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap()
        .kvs()
        .iter()
        .find(|kv| kv.value() == b"lockkit-3")
        .map(|kv| kv.key().to_vec())
        .expect("lockkit's key");
    raw.delete(key, None).await.unwrap();
    tokio::time::timeout(SOON, again.lost())
        .await
        .expect("a deleted leader is told");
    let refused = again.proclaim("late").await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::LockLost);
}

/// A Go candidate proclaims: lockkit's `leader` and `observe` follow its new value in the same
/// term; once it resigns, a waiting lockkit candidate leads with a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_proclaims_and_lockkit_follows() {
    let Some(url) = url() else { return };
    let Some(peer) = GoBinary::build() else {
        return;
    };
    let name = lockkit_testing::unique_name("elect-go-proclaim");
    let mut go = GoPeer::go_candidate(&url, &peer.0, &go_prefix(&name), "go-1");
    let line = go.line(SOON).expect("the Go candidate leads");
    let term: u64 = line
        .strip_prefix("leading ")
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("not a leading line: {line:?}"));

    let locks = connect(&url, "").await;
    let e = locks.election(&name).unwrap();
    let now = e.leader().await.unwrap().expect("Go leads");
    assert_eq!((now.value(), now.term().0), (&b"go-1"[..], term));
    let mut changes = e.observe().await.unwrap();
    let first = tokio::time::timeout(SOON, changes.next())
        .await
        .expect("lockkit's observer starts")
        .unwrap()
        .unwrap()
        .expect("Go leads");
    assert_eq!((first.value(), first.term().0), (&b"go-1"[..], term));

    go.say("proclaim go-2");
    go.expect("proclaimed go-2", SOON);
    let seen = tokio::time::timeout(SOON, changes.next())
        .await
        .expect("lockkit's observer sees the proclamation")
        .unwrap()
        .unwrap()
        .expect("Go still leads");
    assert_eq!((seen.value(), seen.term().0), (&b"go-2"[..], term));
    let now = e.leader().await.unwrap().expect("Go leads");
    assert_eq!((now.value(), now.term().0), (&b"go-2"[..], term));

    let contender = e.clone();
    let campaign = tokio::spawn(async move { contender.campaign("lockkit").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!campaign.is_finished(), "lockkit led while Go did");
    go.say("resign");
    go.expect("resigned", SOON);
    let lead = tokio::time::timeout(SOON, campaign)
        .await
        .expect("lockkit leads once Go resigned")
        .unwrap()
        .unwrap();
    assert!(lead.term().0 > term, "the term rises");
    assert!(lead.resign().await.unwrap());
}

/// A revoked lease deletes every key on it in one revision: an observer sees one change, from the
/// leader on that lease to the next live candidate, never the candidate of the same lease that
/// was deleted in that revision too (a leader no revision had).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_lease_is_one_change_to_observers() {
    let Some(url) = url() else { return };
    let name = lockkit_testing::unique_name("elect-revoke");
    let (a, c, o) = (
        connect(&url, "").await,
        connect(&url, "").await,
        connect(&url, "").await,
    );
    let mut r = raw(&url).await;
    let count = |r: &mut lockkit_etcd::etcd_client::Client| {
        let mut r = r.clone();
        let p = format!("{}/", go_prefix(&name));
        async move {
            let opts = lockkit_etcd::etcd_client::GetOptions::new().with_prefix();
            let resp = r.get(p, Some(opts.with_count_only())).await.unwrap();
            resp.count()
        }
    };
    let ea = a.election(&name).unwrap();
    let lead = ea.campaign("a1").await.unwrap();
    // A second candidate of the same handle: its key is on the same session lease.
    let ea2 = ea.clone();
    let _a2 = tokio::spawn(async move { ea2.campaign("a2").await.map(drop) });
    let ec = c.election(&name).unwrap();
    let third = tokio::spawn(async move { ec.campaign("c").await });
    let started = std::time::Instant::now();
    while count(&mut r).await < 3 {
        assert!(started.elapsed() < SOON, "three candidates queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut changes = o.election(&name).unwrap().observe().await.unwrap();
    let first = changes.next().await.unwrap().unwrap().expect("a1 leads");
    assert_eq!((first.value(), first.term()), (&b"a1"[..], lead.term()));

    let lease = r
        .get(
            format!("{}/", go_prefix(&name)),
            Some(
                lockkit_etcd::etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_sort(
                        lockkit_etcd::etcd_client::SortTarget::Create,
                        lockkit_etcd::etcd_client::SortOrder::Ascend,
                    )
                    .with_limit(1),
            ),
        )
        .await
        .unwrap()
        .kvs()[0]
        .lease();
    r.lease_revoke(lease).await.unwrap();
    let lead_c = tokio::time::timeout(SOON, third)
        .await
        .expect("c leads once a's lease is gone")
        .unwrap()
        .unwrap();
    let seen = tokio::time::timeout(SOON, async {
        let mut seen = Vec::new();
        loop {
            let l = changes.next().await.unwrap().unwrap();
            let term = l.as_ref().map(|l| l.term());
            seen.push(l.map(|l| String::from_utf8_lossy(l.value()).into_owned()));
            if term == Some(lead_c.term()) {
                return seen;
            }
        }
    })
    .await
    .expect("the observer sees c lead");
    assert_eq!(
        seen,
        vec![Some("c".to_string())],
        "one change, from a1 to c"
    );
}
