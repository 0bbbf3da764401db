//! `lockkit exec`, `elect`, `leader` and `inspect` against the real servers named by `LOCKKIT_TEST_REDIS_URL`,
//! `LOCKKIT_TEST_ZK_URL` and `LOCKKIT_TEST_ETCD_URL` (see `scripts/services.sh`). A backend whose
//! `connect` still answers `Unsupported` (not built yet) is skipped with a message; anything
//! else must work.

mod common;

use common::suite;

/// The URL to test, or `None` (skip) when unset or when the backend is not built yet.
async fn usable(backend: &str) -> Option<(String, lockkit::Capabilities)> {
    let url = lockkit_testing::server_url(backend)?;
    match lockkit::connect(&url).await {
        Ok(locks) => {
            let caps = locks.capabilities();
            let _ = locks.close().await;
            Some((url, caps))
        }
        Err(e) if e.kind() == lockkit::ErrorKind::Unsupported => {
            eprintln!("skipping {backend}: its backend is not built yet ({e})");
            None
        }
        Err(e) if matches!(e.kind(), lockkit::ErrorKind::BackendDisabled { .. }) => {
            eprintln!("skipping {backend}: this build leaves its feature out ({e})");
            None
        }
        Err(e) => panic!("cannot connect to {backend} at {url}: {e}"),
    }
}

async fn exec_on(backend: &str) {
    let Some((url, caps)) = usable(backend).await else {
        return;
    };
    tokio::task::spawn_blocking(move || {
        suite::exit_status_and_env(&url);
        suite::crash_releases_and_busy_code(&url);
        suite::sigint_is_forwarded(&url);
        suite::a_signalled_waiter_leaves_the_queue(&url);
        suite::lost_lock_terminates_command(&url, "3s");
        suite::killed_lockkit_takes_its_command_along(&url, std::time::Duration::from_secs(2));
        suite::leftovers_die_with_the_command(&url);
        suite::sigterm_reaches_the_group(&url);
        if caps.mutex.fixed_lease {
            suite::fixed_lease_runs_out(&url);
            suite::lost_lock_kills_the_group(&url);
            suite::fixed_lease_command_is_dead_before_the_next_holder(&url);
            suite::fixed_lease_sigterm_leaves_kill_after_before_the_next_holder(&url);
        }
    })
    .await
    .unwrap();
}

async fn inspect_on(backend: &str) {
    let Some((url, caps)) = usable(backend).await else {
        return;
    };
    tokio::task::spawn_blocking(move || {
        suite::inspect_held(&url);
        suite::semaphore_size_from_the_shell(&url, caps.semaphore_size);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn redis_exec() {
    exec_on("redis").await;
}

#[tokio::test]
async fn zk_exec() {
    exec_on("zk").await;
}

#[tokio::test]
async fn etcd_exec() {
    exec_on("etcd").await;
}

async fn elect_on(backend: &str) {
    let Some((url, caps)) = usable(backend).await else {
        return;
    };
    assert!(caps.election.is_some(), "{backend} has leader election");
    tokio::task::spawn_blocking(move || {
        suite::elect_and_leader(&url);
        suite::lost_leadership_terminates_command(&url);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn redis_elect() {
    elect_on("redis").await;
}

#[tokio::test]
async fn zk_elect() {
    elect_on("zk").await;
}

#[tokio::test]
async fn etcd_elect() {
    elect_on("etcd").await;
}

#[tokio::test]
async fn redis_inspect() {
    inspect_on("redis").await;
}

#[tokio::test]
async fn zk_inspect() {
    inspect_on("zk").await;
}

#[tokio::test]
async fn etcd_inspect() {
    inspect_on("etcd").await;
}
