//! The ZooKeeper protocol points of issue 5, against a real server: protected-mode lookup and
//! the ephemeralOwner check, czxid tokens across a re-created parent, no herd, digest auth and
//! ACLs, and cancelled acquires leaving no node.

mod common;

use std::time::Duration;

use common::*;
use futures::FutureExt;
use lockkit_core::{AcquireOptions, ErrorKind, LockConfig, Primitive};
use lockkit_testing::proxy::Proxy;
use zookeeper_client as zk;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_lookup_finds_only_our_session_node() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let a = backend(&url).await;
    let b = backend(&url).await;
    let dir = a.mutex_path("protected");
    // Make the directory, then create a node the way an interrupted acquire would have.
    drop(a.mutex("protected").unwrap().lock().await.unwrap());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let uuid = "0b6b8d2e-7d0b-4a73-9a69-2a1b1c1d1e1f";
    let prefix = format!("_c_{uuid}-lock-");
    let client_a = a.zk_client().unwrap();
    let opts = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    client_a
        .create(&format!("{dir}/{prefix}"), b"", &opts)
        .await
        .unwrap();
    // The owner finds it again by its protected prefix...
    let found = lockkit_zk::find_own_node(&client_a, &dir, &prefix)
        .await
        .unwrap();
    assert!(found.as_deref().is_some_and(|n| n.starts_with(&prefix)));
    // ...but another session with the same prefix must not claim it (ephemeralOwner check).
    let client_b = b.zk_client().unwrap();
    assert_eq!(
        lockkit_zk::find_own_node(&client_b, &dir, &prefix)
            .await
            .unwrap(),
        None
    );
    // And a plain prefix match (what Curator does) would have claimed it.
    let children = client_b.list_children(&dir).await.unwrap();
    assert!(lockkit_zk::find_by_prefix(&children, &prefix).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_after_parent_is_recreated() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let b = backend(&url).await;
    let lock = b.mutex("recreated").unwrap();
    let dir = b.mutex_path("recreated");
    let client = b.zk_client().unwrap();
    let mut last = None;
    for round in 0..3 {
        let g = lock.lock().await.unwrap();
        let names = children(&b, &dir).await;
        assert_eq!(names.len(), 1);
        // The sequence restarted with the new parent; the czxid token did not.
        assert!(names[0].ends_with("lock-0000000000"), "{names:?}");
        if let Some(prev) = last {
            assert!(
                g.token() > prev,
                "round {round}: token {} after {prev}",
                g.token()
            );
        }
        last = Some(g.token());
        g.release().await.unwrap();
        client.delete(&dir, None).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_waiters_each_release_wakes_exactly_one() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let backends: Vec<_> = futures::future::join_all((0..5).map(|_| backend(&url))).await;
    let holder_backend = backend(&url).await;
    let holder = holder_backend.mutex("herd").unwrap().lock().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut releases = Vec::new();
    for i in 0..50 {
        let lock = backends[i % 5].mutex("herd").unwrap();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        releases.push(Some(go_tx));
        let tx = tx.clone();
        tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            tx.send(i).unwrap();
            let _ = go_rx.await;
            g.release().await.unwrap();
        });
        // Queue in a known order.
        while holder_backend
            .inspect("herd", Primitive::Mutex)
            .await
            .unwrap()
            .waiters
            .len()
            < i + 1
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let wakes = || backends.iter().map(|b| b.wake_count()).sum::<u64>();
    assert_eq!(wakes(), 0, "waiters woke before any release");
    let before = wakes();
    holder.release().await.unwrap();
    let mut expected = before;
    for (i, release) in releases.iter_mut().enumerate() {
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, i, "FIFO hand-off");
        expected += 1;
        // Give any other (wrongly) watching waiter time to receive its event.
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(
            wakes(),
            expected,
            "release {i} woke {} waiters",
            wakes() - (expected - 1)
        );
        release.take().unwrap().send(()).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_auth_and_acl_keep_other_identities_out() {
    let Some(url) = url() else { return };
    let pre = prefix();
    let host = server_addr(&url);
    let alice = backend(&format!("zk://alice:secret-a@{host}?prefix={pre}")).await;
    let bob = backend(&format!("zk://bob:secret-b@{host}?prefix={pre}")).await;
    let anon = backend(&format!("zk://{host}?prefix={pre}")).await;
    let g = alice.mutex("acl").unwrap().lock().await.unwrap();
    let info = anon.inspect("acl", Primitive::Mutex).await.unwrap();
    assert_eq!(
        info.holders[0].token,
        Some(g.token()),
        "inspect shows the czxid token"
    );

    // Our node carries the creator's identity: digest:alice:... with every permission.
    let dir = alice.mutex_path("acl");
    let names = children(&alice, &dir).await;
    let (acls, _) = alice
        .zk_client()
        .unwrap()
        .get_acl(&format!("{dir}/{}", names[0]))
        .await
        .unwrap();
    assert!(
        acls.iter()
            .any(|a| a.scheme() == "digest" && a.id().starts_with("alice:")),
        "{acls:?}"
    );

    for (who, other) in [("bob", &bob), ("anonymous", &anon)] {
        let lock = other.mutex("acl").unwrap();
        assert!(lock.is_locked().await.unwrap(), "{who} can read");
        let e = lock.force_unlock().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Auth, "{who}: {e}");
        let e = lock.try_lock().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Auth, "{who}: {e}");
    }
    assert_eq!(g.state(), lockkit_core::LockState::Held);
    assert_eq!(children(&alice, &dir).await.len(), 1);
    g.release().await.unwrap();

    // Wrong credentials for an identity are still a different identity, not alice.
    let e = lockkit_zk::connect(&LockConfig::new(format!("zk://{host}?acl=creator")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leave_no_node() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let b = backend(&url).await;
    let dir = b.mutex_path("cancel");
    let holder = b.mutex("cancel").unwrap().lock().await.unwrap();
    let lock = b.mutex("cancel").unwrap();
    // Cancel at every stage: before the create is answered, while listing, while watching.
    for delay_us in [0u64, 100, 300, 600, 1000, 2000, 5000, 20000, 100000] {
        let l = lock.clone();
        let task = tokio::spawn(async move { l.lock().await.map(drop) });
        tokio::time::sleep(Duration::from_micros(delay_us)).await;
        task.abort();
        let _ = task.await;
        let timed = lock
            .acquire(&AcquireOptions::new().wait(Duration::from_micros(delay_us + 1)))
            .await
            .unwrap();
        assert!(timed.is_none());
    }
    let start = std::time::Instant::now();
    loop {
        let names = children(&b, &dir).await;
        if names.len() == 1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "nodes left behind: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    holder.release().await.unwrap();
    assert!(children(&b, &dir).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_keeps_a_waiting_writer_behind_us() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let b = backend(&url).await;
    let w = b.rwlock("down").unwrap().write_lock().await.unwrap();
    let token = w.token();
    let waiting_writer = b.rwlock("down").unwrap();
    let writer = tokio::spawn(async move {
        let g = waiting_writer.write_lock().await.unwrap();
        let t = g.token();
        g.release().await.unwrap();
        t
    });
    while b
        .inspect("down", Primitive::RwLock)
        .await
        .unwrap()
        .waiters
        .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The read node takes the write node's place: the writer queued behind us stays behind.
    let r = w.downgrade().await.unwrap();
    assert_eq!(r.token(), token);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !writer.is_finished(),
        "a waiting writer got in during the downgrade"
    );
    let names = children(&b, &b.rwlock_path("down")).await;
    assert!(names.iter().any(|n| n.contains("__READ__")), "{names:?}");
    // A reader arriving now queues behind the waiting writer (writers are not starved).
    assert!(b
        .rwlock("down")
        .unwrap()
        .try_read()
        .await
        .unwrap()
        .is_none());
    r.release().await.unwrap();
    let wt = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .unwrap()
        .unwrap();
    assert!(wt > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_waiters_do_not_herd() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let holder_backend = backend(&url).await;
    let waiters_backend = backend(&url).await;
    let first = holder_backend
        .semaphore("herd", 1)
        .unwrap()
        .acquire_one()
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..10 {
        let s = waiters_backend.semaphore("herd", 1).unwrap();
        let tx = tx.clone();
        tokio::spawn(async move {
            let p = s.acquire_one().await.unwrap();
            tx.send((i, p)).unwrap();
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut before = waiters_backend.wake_count();
    drop(first);
    for _ in 0..10 {
        let (_, permit) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        let woke = waiters_backend.wake_count() - before;
        // The lease-set watcher wakes, takes the permit, and lets the next acquirer into the
        // entry lock: two wake-ups per release, never one per waiter.
        assert!(woke <= 2, "one release woke {woke} waiters");
        before = waiters_backend.wake_count();
        permit.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_of_a_dead_session_come_back() {
    use lockkit_core::AcquireOptions as Opts;
    let Some(url) = url() else { return };
    let pre = prefix();
    let proxy = Proxy::start(server_addr(&url)).await.unwrap();
    let dying = backend(&format!(
        "zk://{}?session_timeout=1s&prefix={pre}",
        proxy.addr()
    ))
    .await;
    let other = backend(&with_params(&url, &format!("prefix={pre}"))).await;
    let permit = dying
        .semaphore("dead", 2)
        .unwrap()
        .acquire(2, &Opts::new())
        .await
        .unwrap()
        .unwrap();
    let sem = other.semaphore("dead", 2).unwrap();
    assert_eq!(sem.available().await.unwrap(), 0);
    proxy.cut(); // the holder's session expires on the server
    let p = sem
        .acquire(2, &Opts::new().wait(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("permits back after the holder's session expired");
    tokio::time::timeout(Duration::from_secs(5), permit.lost())
        .await
        .unwrap();
    assert!(p.token() > permit.token());
    p.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    let _ = sem.try_acquire(1).await.unwrap().expect("free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_gives_locks_back_and_marks_guards_lost() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let a = backend(&url).await.into_locks();
    let b = backend(&url).await.into_locks();
    let g = a.mutex("close").unwrap().lock().await.unwrap();
    a.close().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), g.lost())
        .await
        .unwrap();
    assert!(b
        .mutex("close")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_some());
    assert_eq!(a.mutex("close").unwrap_err().kind(), ErrorKind::Closed);
}

#[tokio::test]
async fn unreachable_server_fails_fast() {
    let started = std::time::Instant::now();
    let e = lockkit_zk::connect(&LockConfig::new("zk://127.0.0.1:1?connect_timeout=3s"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    assert!(e.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let e = lockkit_zk::connect(&LockConfig::new("zk://127.0.0.1:1?session_timeout=never"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
}

/// A create of a lost connection that the server applies late is a second node with our
/// protected prefix, on our session, behind our own node. The waiter deletes it when it next
/// reads the queue, so after our release it never keeps the waiters behind it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_duplicate_of_our_node_is_deleted_not_waited_behind() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let (a, b, c) = (
        backend(&url).await,
        backend(&url).await,
        backend(&url).await,
    );
    let dir = a.mutex_path("late-dup");
    let held = a.mutex("late-dup").unwrap().lock().await.unwrap();
    let waiter = |locks: &lockkit_zk::ZkLocks| {
        let m = locks.mutex("late-dup").unwrap();
        tokio::spawn(async move { m.lock_for(Duration::from_secs(10)).await })
    };
    let waiting_b = waiter(&b);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut names = children(&b, &dir).await;
    names.sort_by_key(|n| n[n.len() - 10..].to_string());
    assert_eq!(names.len(), 2, "{names:?}");
    let prefix = &names[1][..names[1].len() - 10];
    let opts = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    b.zk_client()
        .unwrap()
        .create(&format!("{dir}/{prefix}"), b"lockkit", &opts)
        .await
        .unwrap();
    let waiting_c = waiter(&c);
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    let gb = tokio::time::timeout(Duration::from_secs(5), waiting_b)
        .await
        .expect("b's turn")
        .unwrap()
        .unwrap()
        .expect("b gets the lock");
    let dups = children(&b, &dir)
        .await
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .count();
    assert_eq!(dups, 1, "the late duplicate of b's node is still there");
    gb.release().await.unwrap();
    let gc = tokio::time::timeout(Duration::from_secs(3), waiting_c)
        .await
        .expect("c is not kept out by b's duplicate")
        .unwrap()
        .unwrap()
        .expect("c gets the lock");
    gc.release().await.unwrap();
}

/// A release the server refuses with an error no retry of the release itself would cure
/// (`NoAuth`: the delete permission was taken off the lock's directory) is not given up: the
/// reaper retries it, and once the permission is back it deletes the node while the holder's
/// session lives on (else the node would stay for the whole session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_by_an_acl_is_finished_by_the_reaper() {
    let Some(url) = url() else { return };
    let url = format!(
        "zk://carol:secret-c@{}?prefix={}",
        server_addr(&url),
        prefix()
    );
    // The same identity on another session changes the ACL, as an operator would.
    let (holder, admin, other) = (
        backend(&url).await,
        backend(&url).await,
        backend(&url).await,
    );
    let dir = holder.mutex_path("refused");
    let session = holder.zk_client().unwrap().session_id();
    let g = holder.mutex("refused").unwrap().lock().await.unwrap();
    let raw = admin.zk_client().unwrap();
    let (acls, _) = raw.get_acl(&dir).await.unwrap();
    let no_delete = zk::Permission::READ
        | zk::Permission::WRITE
        | zk::Permission::CREATE
        | zk::Permission::ADMIN;
    let refusing = [zk::Acl::new(no_delete, zk::AuthId::authed())];
    raw.set_acl(&dir, &refusing, None).await.unwrap();

    let e = g.release().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    assert!(!e.is_retryable(), "{e}");
    assert_eq!(children(&admin, &dir).await.len(), 1, "the refused node");

    raw.set_acl(&dir, &acls, None).await.unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = children(&admin, &dir).await;
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the refused release was never finished: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        holder.zk_client().unwrap().session_id(),
        session,
        "the node went with the session, not by a delete"
    );
    let g = other
        .mutex("refused")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("free once the node is gone");
    g.release().await.unwrap();
}

/// A holder (4 s sessions) whose release the server refused (`NoAuth` after an ACL change that
/// stays), the admin handle, and the lock's directory.
async fn refused_release() -> (lockkit_zk::ZkLocks, lockkit_zk::ZkLocks, String) {
    let url = url().unwrap();
    let url = format!(
        "zk://dave:secret-d@{}?prefix={}&lease=4s",
        server_addr(&url),
        prefix()
    );
    let (holder, admin) = (backend(&url).await, backend(&url).await);
    let dir = holder.mutex_path("refused-for-good");
    let g = holder
        .mutex("refused-for-good")
        .unwrap()
        .lock()
        .await
        .unwrap();
    let raw = admin.zk_client().unwrap();
    let no_delete = zk::Permission::READ
        | zk::Permission::WRITE
        | zk::Permission::CREATE
        | zk::Permission::ADMIN;
    let refusing = [zk::Acl::new(no_delete, zk::AuthId::authed())];
    raw.set_acl(&dir, &refusing, None).await.unwrap();
    let e = g.release().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    assert_eq!(children(&admin, &dir).await.len(), 1, "the refused node");
    (holder, admin, dir)
}

/// Waits until the refused node is gone with its session (a lease and a bit).
async fn refused_node_goes_with_the_session(admin: &lockkit_zk::ZkLocks, dir: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left = children(admin, dir).await;
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "the session of a handle that is gone still holds {left:?}: the reaper kept it alive"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_for_good_ends_with_the_dropped_handle() {
    if url().is_none() {
        return;
    }
    let (holder, admin, dir) = refused_release().await;
    drop(holder);
    refused_node_goes_with_the_session(&admin, &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_for_good_ends_with_the_closed_handle() {
    if url().is_none() {
        return;
    }
    let (holder, admin, dir) = refused_release().await;
    let e = holder.close().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "the refused cleanup: {e}");
    refused_node_goes_with_the_session(&admin, &dir).await;
}

/// A semaphore's size is `<dir>/size`, a 4-byte big-endian count (Curator's `SharedCount`).
/// The first acquire stores it; a node there holding anything else is a typed `WrongType`
/// error for every call that reads it, nothing is taken, and the node is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_size_is_a_shared_count_and_a_foreign_one_is_refused() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let locks = backend(&url).await;
    let client = locks.zk_client().unwrap();
    let s = locks.semaphore("sized", 3).unwrap();
    s.try_acquire(1)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    let path = format!("{}/size", locks.semaphore_path("sized"));
    let (data, _) = client.get_data(&path).await.unwrap();
    assert_eq!(data, [0, 0, 0, 3]);

    let dir = locks.semaphore_path("foreign");
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    client.mkdir(&dir, &opts).await.unwrap();
    client
        .create(&format!("{dir}/size"), b"three", &opts)
        .await
        .unwrap();
    lockkit_testing::cases::foreign_size_is_refused(&locks, "foreign").await;
    let (data, _) = client.get_data(&format!("{dir}/size")).await.unwrap();
    assert_eq!(data, b"three");
    let leases = client.list_children(&format!("{dir}/leases")).await;
    assert!(leases.map_or(true, |l| l.is_empty()), "a permit taken");
    client.delete(&format!("{dir}/size"), None).await.unwrap();
}

/// A waiter whose node is deleted behind its back (an admin, or a force-unlock that took it
/// for the holder's) queues again with a new node and gets the lock once it is free, as on
/// every other backend. It used to fail with `LockLost` although it never held the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_node_is_deleted_queues_again() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let a = backend(&url).await;
    let b = backend(&url).await;
    let dir = a.mutex_path("deleted-waiter");
    let held = a.mutex("deleted-waiter").unwrap().lock().await.unwrap();
    let first = held.token();
    let m = b.mutex("deleted-waiter").unwrap();
    let waiting = tokio::spawn(async move { m.lock_for(Duration::from_secs(20)).await });
    let client = a.zk_client().unwrap();
    let names = until_queued(&client, &dir, 2).await;
    client
        .delete(&format!("{dir}/{}", names[1]), None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter gets the lock")
        .unwrap()
        .expect("queued again, not LockLost")
        .expect("within its wait");
    assert!(g.token() > first, "a token after the holder's");
    g.release().await.unwrap();
}

/// A waiter whose session ends while it waits (cut off for longer than the session timeout:
/// its node went with the session) queues again on the session the handle opens in its place,
/// and gets the lock once the holder gives it back, as a waiter whose lease ended does on etcd.
/// It used to fail with a `Connection` error "session ended while waiting".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_session_ends_queues_again_on_a_new_one() {
    session_ends_while_waiting(false).await;
}

/// The same for a semaphore acquirer waiting for a permit with its lease nodes made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_whose_session_ends_starts_over_on_a_new_one() {
    session_ends_while_waiting(true).await;
}

/// A holder on a direct session, and a waiter (a mutex, or a semaphore of one permit) through a
/// proxy whose connection is cut for longer than its 1 s session; then the holder gives back.
async fn session_ends_while_waiting(semaphore: bool) {
    let Some(url) = url() else { return };
    let pre = prefix();
    let proxy = Proxy::start(server_addr(&url)).await.unwrap();
    let a = backend(&with_params(&url, &format!("prefix={pre}"))).await;
    let params = format!("prefix={pre}&session_timeout=1s&command_timeout=10s");
    let b = backend(&with_params(&format!("zk://{}", proxy.addr()), &params)).await;
    let wait = Duration::from_secs(30);
    let (first, release, dir, waiting) = if semaphore {
        let held = a.semaphore("session-ends", 1).unwrap().acquire_one().await;
        let sem = b.semaphore("session-ends", 1).unwrap();
        let opts = AcquireOptions::new().wait(wait);
        let waiting = tokio::spawn(async move {
            let Some(p) = sem.acquire(1, &opts).await? else {
                return Ok(None);
            };
            let token = p.token();
            p.release().await.map(|()| Some(token))
        });
        let leases = format!("{}/leases", a.semaphore_path("session-ends"));
        let held = held.unwrap();
        let (first, release) = (held.token(), held.release().boxed());
        (first, release, leases, waiting)
    } else {
        let held = a.mutex("session-ends").unwrap().lock().await.unwrap();
        let m = b.mutex("session-ends").unwrap();
        let waiting = tokio::spawn(async move {
            let Some(g) = m.lock_for(wait).await? else {
                return Ok(None);
            };
            let token = g.token();
            g.release().await.map(|()| Some(token))
        });
        let (first, release) = (held.token(), held.release().boxed());
        (first, release, a.mutex_path("session-ends"), waiting)
    };
    let client = a.zk_client().unwrap();
    let before = until_queued(&client, &dir, 2).await;
    proxy.cut(); // the waiter's session expires on the server, and its node goes with it
    until_queued(&client, &dir, 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.heal(); // the client learns its session expired; the handle opens a new one
    if !semaphore {
        // The session task may be in a pause of up to a few seconds between refused connects.
        let after = until_queued_within(&client, &dir, 2, Duration::from_secs(20)).await;
        assert_ne!(after[1], before[1], "queued again with a new node");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "{:?}", waiting.await);
    release.await.unwrap();
    let token = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter gets the lock")
        .unwrap()
        .expect("queued again on a new session, not a Connection error")
        .expect("within its wait");
    assert!(token > first, "a token after the holder's");
    assert!(children(&a, &dir).await.is_empty(), "a node left behind");
}

/// `command_timeout` bounds every request, also while the client waits for its connection to
/// come back: with the server cut off, `try_lock`, `is_locked` and `release` fail with `Timeout`
/// after about that long. The client kept them queued until it gave the session up itself,
/// 1.4 times the session timeout later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_timeout_bounds_each_request_while_the_server_is_cut_off() {
    let Some(url) = url() else { return };
    let proxy = Proxy::start(server_addr(&url)).await.unwrap();
    let params = format!("prefix={}&session_timeout=10s&command_timeout=1s", prefix());
    let b = backend(&with_params(&format!("zk://{}", proxy.addr()), &params)).await;
    let m = b.mutex("cut-off").unwrap();
    let g = m.lock().await.unwrap();
    proxy.partition();
    let bounded = |what: &'static str, started: std::time::Instant, e: lockkit_core::Error| {
        let took = started.elapsed();
        // The request, then (for `try_lock`) the look for a node it may have made: two
        // command timeouts at most.
        assert!(took < Duration::from_secs(4), "{what} took {took:?}: {e}");
        assert!(e.is_retryable(), "{what}: {e}");
    };
    let started = std::time::Instant::now();
    let e = m.try_lock().await.map(|g| g.is_some()).unwrap_err();
    bounded("try_lock", started, e);
    let started = std::time::Instant::now();
    let e = m.is_locked().await.unwrap_err();
    bounded("is_locked", started, e);
    let started = std::time::Instant::now();
    let e = g.release().await.unwrap_err();
    bounded("release", started, e);
    proxy.heal();
}

/// A semaphore acquirer whose lease node is deleted behind its back while it waits for a permit
/// is not let in on a count one lease short (two holders of one permit): it starts over with a
/// new lease and gets the permit when the holder gives it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_whose_lease_is_deleted_starts_over() {
    let Some(url) = url() else { return };
    let url = with_params(&url, &format!("prefix={}", prefix()));
    let a = backend(&url).await;
    let b = backend(&url).await;
    let leases = format!("{}/leases", a.semaphore_path("lease-gone"));
    let held = a
        .semaphore("lease-gone", 1)
        .unwrap()
        .acquire_one()
        .await
        .unwrap();
    let sem = b.semaphore("lease-gone", 1).unwrap();
    let waiting = tokio::spawn(async move { sem.acquire_one().await });
    let client = a.zk_client().unwrap();
    let names = until_queued(&client, &leases, 2).await;
    client
        .delete(&format!("{leases}/{}", names[1]), None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "let in while the only permit is held: {:?}",
        waiting.await
    );
    held.release().await.unwrap();
    let p = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter gets the permit")
        .unwrap()
        .unwrap();
    p.release().await.unwrap();
}

/// The `n` nodes of `dir` in sequence order, once there are that many (within 5 s).
async fn until_queued(client: &zk::Client, dir: &str, n: usize) -> Vec<String> {
    until_queued_within(client, dir, n, Duration::from_secs(5)).await
}

/// [`until_queued`] within `limit`.
async fn until_queued_within(
    client: &zk::Client,
    dir: &str,
    n: usize,
    limit: Duration,
) -> Vec<String> {
    let mut names = Vec::new();
    for _ in 0..limit.as_millis() / 20 {
        names = client.list_children(dir).await.unwrap_or_default();
        if names.len() == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(names.len(), n, "{names:?}");
    names.sort_by_key(|n| n.rsplit('-').next().unwrap_or_default().to_string());
    names
}

/// Runs `call` while the server's replies to the proxied handle are held, then resets the
/// connection (the reply is lost, the session lives on) and heals it: the client sends the
/// request again on its new connection.
async fn with_reply_lost<T: Send + 'static>(
    proxy: &Proxy,
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    proxy.update(|t| t.hold_down = true);
    let running = tokio::spawn(call);
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.reset();
    proxy.heal();
    tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("answered once the connection is back")
        .unwrap()
}

/// A release whose reply was lost is sent again, and the second try found the node gone: it
/// answered `LockLost` (and `exec` exited 70 after its command succeeded). A delete after one
/// that went unanswered now counts a node found gone as its own doing. (A force-unlock and a
/// size set resent the same way take the same path; their first request is a read, which is
/// the one this proxy can hold.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_again_after_a_lost_reply_is_not_lost() {
    let Some(url) = url() else { return };
    let pre = prefix();
    let proxy = Proxy::start(server_addr(&url)).await.unwrap();
    let direct = backend(&with_params(&url, &format!("prefix={pre}"))).await;
    let params = format!("prefix={pre}&session_timeout=20s");
    let b = backend(&with_params(&format!("zk://{}", proxy.addr()), &params)).await;

    let g = b.mutex("lost-reply").unwrap().lock().await.unwrap();
    let released = with_reply_lost(&proxy, async move { g.release().await }).await;
    assert!(released.is_ok(), "{released:?}");
    assert!(!direct
        .mutex("lost-reply")
        .unwrap()
        .is_locked()
        .await
        .unwrap());

    for l in [b, direct] {
        l.close().await.unwrap();
    }
}
