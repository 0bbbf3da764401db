//! Issue 29, part 3: a multi-lock of native mutexes on one server is taken by one script, all
//! or none; a busy set takes nothing (what a waiting acquire does next, member by member, the
//! conformance suite checks); a member's key of another type fails the set and leaves
//! every other member (and the foreign key) as it was.

mod common;

use std::time::Duration;

use common::*;
use lockkit_core::{AcquireOptions, ErrorKind};
use lockkit_redis::LockKeys;

fn names(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i}")).collect()
}

async fn scripts_run(admin: &mut redis::aio::MultiplexedConnection) -> u64 {
    command_calls(admin, &["evalsha", "eval"]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_set_is_taken_by_one_script_with_rising_tokens() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let mut admin = admin(&server.url()).await;
    let names = names("free", 4);
    let set = locks.multi(&names).unwrap();
    // The first run loads the script.
    let first = set.try_lock().await.unwrap().expect("a free set");
    let first_tokens: Vec<u64> = first.tokens().iter().map(|(_, t)| t.0).collect();
    first.release().await.unwrap();

    let before = scripts_run(&mut admin).await;
    let g = set.try_lock().await.unwrap().expect("a free set");
    assert_eq!(
        scripts_run(&mut admin).await - before,
        1,
        "four free members take one script"
    );
    for ((n, t), old) in g.tokens().iter().zip(&first_tokens) {
        assert!(t.0 > *old, "{n}: token {t} after {old}");
        assert!(locks.mutex(n).unwrap().is_locked().await.unwrap());
    }
    // A member alone is busy while the set holds it, and gets a higher token after.
    let third = locks.mutex(&names[2]).unwrap();
    assert!(third.try_lock().await.unwrap().is_none());
    let set_token = g.token(&names[2]).unwrap();
    g.release().await.unwrap();
    let alone = third.try_lock().await.unwrap().expect("free after the set");
    assert!(alone.token() > set_token);
    alone.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_set_takes_nothing() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let mut admin = admin(&server.url()).await;
    let names = names("busy", 3);
    let set = locks.multi(&names).unwrap();
    set.try_lock()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    let busy = locks.mutex(&names[1]).unwrap().lock().await.unwrap();

    let before = scripts_run(&mut admin).await;
    assert!(set.try_lock().await.unwrap().is_none());
    assert_eq!(
        scripts_run(&mut admin).await - before,
        1,
        "a try of a busy set is one script"
    );
    for n in [&names[0], &names[2]] {
        assert!(
            !locks.mutex(n).unwrap().is_locked().await.unwrap(),
            "{n} held"
        );
    }
    busy.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_of_another_type_fails_the_set_and_takes_nothing() {
    let server = PrivateRedis::start(&[]);
    let url = server.url();
    let locks = connect(&url, &[]).await;
    let mut admin = admin(&url).await;
    let names = names("typed", 3);
    let set = locks.multi(&names).unwrap();
    // A lock key of another type is seen before anything is written; a fencing counter of
    // another type only when its member is taken, after the members before it were: they are
    // given back in the same script.
    let keys = LockKeys::mutex("lockkit", &names[1]);
    for key in [keys.lock, keys.fence] {
        let write = redis::cmd("SET").arg(&key).arg("not a lock").clone();
        foreign_value_survives(&mut admin, &key, &write, async {
            let e = set.try_lock().await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::WrongType, "{e}");
            for n in [&names[0], &names[2]] {
                assert!(
                    !locks.mutex(n).unwrap().is_locked().await.unwrap(),
                    "{n} held"
                );
            }
        })
        .await;
    }
    set.try_lock()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_and_redisson_sets_go_member_by_member() {
    let server = PrivateRedis::start(&[]);
    let mut admin = admin(&server.url()).await;
    let names = names("by-member", 4);
    let native = connect(&server.url(), &[]).await;
    let compat = connect(&server.url(), &[("redisson_compat", "true")]).await;
    let fair = AcquireOptions::new().fair(true).no_wait();
    let plain = AcquireOptions::new().no_wait();
    for (locks, opts, what) in [
        (&native, fair, "a fair set"),
        (&compat, plain, "a set on Redisson's layout"),
    ] {
        let set = locks.multi(&names).unwrap();
        // The first run loads the scripts.
        set.acquire(&opts)
            .await
            .unwrap()
            .unwrap()
            .release()
            .await
            .unwrap();
        let before = scripts_run(&mut admin).await;
        let g = set.acquire(&opts).await.unwrap().expect("a free set");
        assert_eq!(
            scripts_run(&mut admin).await - before,
            4,
            "{what} takes one script per member"
        );
        g.release().await.unwrap();
    }
}

/// A set begun while the server is frozen (SIGSTOP) ends within its budget plus the kernel's
/// 100 ms (and a little for a loaded machine), and once the server wakes and runs the script
/// after all, the members it took are given back: another handle gets the set at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_begun_in_a_freeze_keeps_its_budget_and_leaves_nothing() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let other = connect(&server.url(), &[]).await;
    let names = names("frozen", 3);
    let set = locks.multi(&names).unwrap();
    set.try_lock()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    server.pause();
    let budget = Duration::from_millis(600);
    let started = std::time::Instant::now();
    let r = set.lock_for(budget).await;
    let took = started.elapsed();
    server.resume();
    assert!(
        !matches!(r, Ok(Some(_))),
        "a set granted by a frozen server"
    );
    assert!(
        took < budget + Duration::from_millis(100 + 200),
        "a wait of {budget:?} took {took:?} in a freeze"
    );
    let started = std::time::Instant::now();
    let g = other
        .multi(&names)
        .unwrap()
        .lock_for(Duration::from_secs(20))
        .await
        .unwrap()
        .expect("the set once the server is back");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the frozen take's members were given back only after {:?}",
        started.elapsed()
    );
    g.release().await.unwrap();
}
