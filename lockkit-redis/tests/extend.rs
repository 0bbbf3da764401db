//! The core's rules for extends, acquires and multi-locks under real faults on a private Redis
//! (frozen with SIGSTOP): a guard never reads Held past the lease the server counts, and a
//! frozen server costs a multi-lock one command timeout, not one per member.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lockkit_core::{AcquireOptions, ErrorKind};
use lockkit_testing::unique_name;

/// An extend future dropped after it was sent may still be applied by the server: the guard
/// keeps the earlier deadline (issue 25, item 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_extend_leaves_the_guard_no_later_than_the_server() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let plain = connect(&server.url(), &[]).await;
    let name = unique_name("extend-dropped");
    let g = locks
        .mutex(&name)
        .unwrap()
        .acquire(&AcquireOptions::new().fixed_lease(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    // Scripts load on first use: a first extend loads this one, so the frozen server runs the
    // next one when it wakes (a first EVALSHA would only answer NOSCRIPT).
    g.extend(Duration::from_secs(60)).await.unwrap();
    server.pause();
    let sent = Instant::now();
    let dropped =
        tokio::time::timeout(Duration::from_millis(50), g.extend(Duration::from_secs(2))).await;
    assert!(dropped.is_err(), "the extend finished on a frozen server");
    tokio::time::sleep(Duration::from_millis(250)).await;
    server.resume();
    // The server applies the extend once it runs again: it then counts 2 s from about now.
    let probe = plain.mutex(&name).unwrap();
    let server_left = loop {
        let left = probe.remaining_lease().await.unwrap().expect("held");
        if left <= Duration::from_secs(2) {
            break left;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "the extend never landed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let guard_left = g.remaining().expect("a fixed lease has a deadline");
    assert!(
        guard_left <= server_left + Duration::from_millis(50),
        "after a dropped extend(2s) the server applied, the guard has {guard_left:?} left and \
         the server {server_left:?}"
    );
}

/// An acquire whose answer comes back after its fixed lease ended returns no guard: the server
/// may have expired the lock already (the kernel refuses a guard that is already Lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_answered_after_its_lease_ended_fails_as_lost() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let plain = connect(&server.url(), &[]).await;
    let name = unique_name("late-acquire");
    let m = locks.mutex(&name).unwrap();
    m.is_locked().await.unwrap(); // connected and warm
    let opts = AcquireOptions::new()
        .fixed_lease(Duration::from_millis(150))
        .no_wait();
    server.pause();
    let (answer, ()) = tokio::join!(m.acquire(&opts), async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        server.resume();
    });
    let e = answer.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LockLost, "{e}");
    let probe = plain.mutex(&name).unwrap();
    let since = Instant::now();
    while probe.is_locked().await.unwrap() {
        assert!(
            since.elapsed() < Duration::from_secs(3),
            "the refused lock stayed held"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A multi-lock over a frozen server gives its members back and releases them all at once: the
/// caller waits about one command timeout, not one per member (issue 25, item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_costs_a_multi_release_one_timeout_not_one_per_member() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[("command_timeout", "500ms")]).await;
    let names: Vec<String> = (0..6).map(|i| unique_name(&format!("multi-{i}"))).collect();
    let set = locks.multi(&names).unwrap();
    let g = set.lock().await.unwrap();
    server.pause();
    let started = Instant::now();
    let released = g.release().await;
    let took = started.elapsed();
    server.resume();
    assert!(released.is_err(), "a release on a frozen server succeeded");
    assert!(
        took < Duration::from_millis(6 * 500),
        "releasing 6 members on a frozen server took {took:?}: one timeout after another"
    );
}

/// A multi-acquire that runs out of budget while the server is frozen gives its members back
/// within the budget plus the core's grace, all at once: the caller is not held up one command
/// timeout per member (issue 25, item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_keeps_a_multi_give_back_within_the_budget() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[("command_timeout", "500ms")]).await;
    let other = connect(&server.url(), &[]).await;
    let base = unique_name("give-back");
    let mut names: Vec<String> = (0..5).map(|i| format!("{base}-{i}")).collect();
    // Taken last (the set is ordered by name), and busy.
    let last = format!("{base}-~busy");
    let busy = other.mutex(&last).unwrap().lock().await.unwrap();
    names.push(last);
    let set = locks.multi(&names).unwrap();
    let budget = Duration::from_secs(1);
    let started = Instant::now();
    let (got, ()) = tokio::join!(set.lock_for(budget), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        server.pause();
    });
    let took = started.elapsed();
    server.resume();
    assert!(
        !matches!(got, Ok(Some(_))),
        "the set was taken while a member was busy"
    );
    assert!(
        took < budget + Duration::from_millis(400),
        "the multi-acquire took {took:?} with a {budget:?} budget on a frozen server"
    );
    drop(busy);
}
