//! Election interop with Go's `concurrency.Election`, through `etcdctl elect` (which is built on
//! it): a Go candidate and a lockkit candidate on one election never lead at once, each names
//! the other as leader, and leadership passes both ways; `etcdctl elect -l` (Go's `Observe`)
//! follows lockkit's leaders and proclamations.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use lockkit_core::ErrorKind;

const SOON: Duration = Duration::from_secs(10);

/// `etcdctl` on the test server, its stdout read line by line.
struct Etcdctl {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Etcdctl {
    fn start(url: &str, args: &[&str]) -> Etcdctl {
        let u = lockkit_core::ServerUrl::parse_for(url, &lockkit_etcd::INFO).unwrap();
        let eps: Vec<String> = u.hosts.iter().map(|h| h.to_string()).collect();
        let mut child = Command::new("etcdctl")
            .arg(format!("--endpoints={}", eps.join(",")))
            .args(args)
            .env_remove("ETCDCTL_ENDPOINTS")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("etcdctl runs (scripts/services.sh installs it)");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Etcdctl { child, lines }
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
        panic!("etcdctl did not print {want:?} within {limit:?}; printed {seen:?}");
    }

    /// Asks it to stop as a user would (Ctrl-C): `etcdctl elect` resigns then.
    fn interrupt(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    let mut go = Etcdctl::start(&url, &["elect", &go_prefix(&name), "go-candidate"]);
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

    let listen = Etcdctl::start(&url, &["elect", "-l", &go_prefix(&name)]);
    listen.expect("lockkit-1", SOON);
    lead.proclaim("lockkit-2").await.unwrap();
    listen.expect("lockkit-2", SOON);

    let mut go = Etcdctl::start(&url, &["elect", &go_prefix(&name), "go-candidate"]);
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
