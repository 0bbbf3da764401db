//! Leader election on Redis (issue 27): the key layout and what it leaves, a leader whose
//! leader hash is deleted, observers that see a lapse nobody announced and a change made while
//! their connection was away, a key of another type, and elections under `redisson_compat`.
//! The behaviour every backend shares is in the conformance suite.

mod common;

use std::time::Duration;

use common::*;
use lockkit_core::{AcquireOptions, ErrorKind, LeaderChanges, LockState};
use lockkit_redis::LockKeys;

const SOON: Duration = Duration::from_secs(5);

async fn keys_now(admin: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(admin)
        .await
        .unwrap();
    keys.sort();
    keys
}

/// The next state an observer reports, within [`SOON`].
async fn next_state(changes: &mut LeaderChanges) -> Option<(String, u64)> {
    let item = tokio::time::timeout(SOON, changes.next())
        .await
        .expect("a change within 5 s")
        .expect("the stream goes on")
        .expect("no error");
    item.map(|l| (l.value_str().into_owned(), l.term().0))
}

#[tokio::test]
async fn keys_follow_the_layout_and_nothing_is_left() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let mut admin = admin(&server.url()).await;
    let k = LockKeys::election("lockkit", "sched");
    let leader_key = k.leader.clone().unwrap();

    let e = locks.election("sched").unwrap();
    let lead = e.campaign("node-a").await.unwrap();
    let (owner, term, value): (String, u64, String) = redis::cmd("HMGET")
        .arg(&leader_key)
        .arg("owner")
        .arg("term")
        .arg("value")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(term, lead.term().0);
    assert_eq!(value, "node-a");
    let owns: bool = redis::cmd("HEXISTS")
        .arg(&k.lock)
        .arg(&owner)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(owns, "the leader hash names the lock's owner");
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&leader_key)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(pttl > 0, "the leader hash expires with the lock ({pttl})");

    // A candidate that gives up (timed out, then dropped mid-wait) leaves nothing behind.
    let other = locks.election("sched").unwrap();
    assert!(other
        .campaign_for("node-b", Duration::from_millis(100))
        .await
        .unwrap()
        .is_none());
    let _ = tokio::time::timeout(Duration::from_millis(100), other.campaign("node-c")).await;

    assert!(lead.resign().await.unwrap());
    // Left: the fencing counter, and the resignation's unlock latch (it answers a retried
    // release, and expires).
    let latch = k.unlock_latch(&owner);
    let started = std::time::Instant::now();
    loop {
        let left = keys_now(&mut admin).await;
        if left == vec![k.fence.clone(), latch.clone()] {
            break;
        }
        assert!(started.elapsed() < SOON, "left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let latch_ttl: i64 = redis::cmd("PTTL")
        .arg(&latch)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(latch_ttl > 0, "the latch expires ({latch_ttl})");
    assert!(e.leader().await.unwrap().is_none());
}

/// An admin's `force_resign` demotes the leader as soon as it hears the announcement, not at its
/// next renewal (10 s away with the default 30 s lease).
#[tokio::test]
async fn a_forced_resignation_demotes_the_leader_before_its_next_renewal() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let mut admin = admin(&server.url()).await;
    let channel = LockKeys::election("lockkit", "forced").channel;
    let e = locks.election("forced").unwrap();
    let lead = e.campaign("a").await.unwrap();
    // Once the leader listens on the election's channel (1 s at most), the demotion reaches it
    // as an announcement rather than through the read that follows its subscription.
    let started = std::time::Instant::now();
    let mut listened = false;
    while !listened && started.elapsed() < Duration::from_secs(1) {
        listened = listeners(&mut admin, &channel).await == 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Its own announcement (a new value) leaves it leading.
    lead.proclaim("a2").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(lead.state(), LockState::Held, "its own proclaim");
    let admin_e = locks.election("forced").unwrap();
    assert!(admin_e.force_resign().await.unwrap());
    let why = tokio::time::timeout(Duration::from_secs(2), lead.lost())
        .await
        .expect("told Lost before the next renewal");
    assert_eq!(why, lockkit_core::LostReason::Deleted);
    assert_eq!(lead.state(), LockState::Lost);
    assert!(
        listened,
        "the leader listened on {channel} before the demotion"
    );
    assert!(!lead.resign().await.unwrap());
    // A leader's own resignation, announced too, is a release, never a loss.
    let again = e.campaign("b").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lost = again.lost();
    assert!(again.resign().await.unwrap());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), lost)
            .await
            .is_err(),
        "a resignation read as a demotion"
    );
    // Neither leader's listener outlives its leadership.
    let started = std::time::Instant::now();
    while listeners(&mut admin, &channel).await != 0 {
        assert!(started.elapsed() < SOON, "a listener is left on {channel}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many connections listen on `channel`.
async fn listeners(admin: &mut redis::aio::MultiplexedConnection, channel: &str) -> u64 {
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(admin)
        .await
        .unwrap();
    n
}

#[tokio::test]
async fn a_leader_whose_leader_hash_is_deleted_is_lost() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let mut admin = admin(&server.url()).await;
    let leader_key = LockKeys::election("lockkit", "deleted").leader.unwrap();
    let e = locks.election("deleted").unwrap();
    // Renewed every 200 ms: the renewal after the deletion finds it.
    let lead = e
        .campaign_with(
            "a",
            &AcquireOptions::new().watchdog_lease(Duration::from_millis(600)),
        )
        .await
        .unwrap()
        .expect("free");
    let _: () = redis::cmd("DEL")
        .arg(&leader_key)
        .query_async(&mut admin)
        .await
        .unwrap();
    tokio::time::timeout(SOON, lead.lost())
        .await
        .expect("told Lost");
    assert_eq!(lead.state(), LockState::Lost);
    assert!(e.leader().await.unwrap().is_none());
    let err = lead.proclaim("late").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LockLost);
    // The next candidate leads once the lost leader lets go, in a higher term.
    let term = lead.term();
    assert!(!lead.resign().await.unwrap());
    let next = locks
        .election("deleted")
        .unwrap()
        .campaign_for("b", SOON)
        .await
        .unwrap()
        .expect("leads");
    assert!(next.term() > term);
}

#[tokio::test]
async fn observers_see_a_lapse_nobody_announced() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let e = locks.election("lapse").unwrap();
    let mut changes = e.observe().await.unwrap();
    assert_eq!(next_state(&mut changes).await, None);
    // A fixed lease that is never renewed: it ends on the server with no script announcing it.
    let lead = e
        .campaign_with(
            "a",
            &AcquireOptions::new().fixed_lease(Duration::from_millis(400)),
        )
        .await
        .unwrap()
        .expect("free");
    assert_eq!(
        next_state(&mut changes).await,
        Some(("a".to_string(), lead.term().0))
    );
    assert_eq!(next_state(&mut changes).await, None);
    assert!(e.leader().await.unwrap().is_none());
}

#[tokio::test]
async fn observers_read_again_after_their_connection_comes_back() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let mut admin = admin(&server.url()).await;
    let e = locks.election("reconnect").unwrap();
    let lead = e.campaign("before").await.unwrap();
    let mut changes = e.observe().await.unwrap();
    assert_eq!(
        next_state(&mut changes).await,
        Some(("before".to_string(), lead.term().0))
    );
    // Cut the observer's subscription, and change the value in the same breath without
    // announcing it: only the read after the reconnect can see it.
    let leader_key = LockKeys::election("lockkit", "reconnect").leader.unwrap();
    let _: () = redis::pipe()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .ignore()
        .cmd("HSET")
        .arg(&leader_key)
        .arg("value")
        .arg("unannounced")
        .ignore()
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        next_state(&mut changes).await,
        Some(("unannounced".to_string(), lead.term().0))
    );
    // And announcements reach it again.
    lead.proclaim("after").await.unwrap();
    assert_eq!(
        next_state(&mut changes).await,
        Some(("after".to_string(), lead.term().0))
    );
}

#[tokio::test]
async fn a_leader_key_of_another_type_is_refused_and_untouched() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let mut admin = admin(&server.url()).await;
    let k = LockKeys::election("lockkit", "typed");
    let leader_key = k.leader.clone().unwrap();
    let e = locks.election("typed").unwrap();
    let set = redis::cmd("SET").arg(&leader_key).arg("mine").clone();
    let mut look = admin.clone();
    foreign_value_survives(&mut admin, &leader_key, &set, async {
        let err = e.campaign_for("a", SOON).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
        let held: bool = redis::cmd("EXISTS")
            .arg(&k.lock)
            .query_async(&mut look)
            .await
            .unwrap();
        assert!(!held, "nothing was taken");
        // An admin's force_resign refuses it too, before it deletes anything.
        let err = e.force_resign().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    })
    .await;
    assert!(e.campaign_for("a", SOON).await.unwrap().is_some());
}

#[tokio::test]
async fn elections_keep_their_layout_under_redisson_compat() {
    let server = PrivateRedis::start(&[]);
    let compat = connect(&server.url(), &[("redisson_compat", "true")]).await;
    let native = connect(&server.url(), &[]).await;
    let lead = compat
        .election("both")
        .unwrap()
        .campaign("compat")
        .await
        .unwrap();
    let seen = native.election("both").unwrap().leader().await.unwrap();
    assert_eq!(seen.map(|l| l.term()), Some(lead.term()));
    let waiting = native.election("both").unwrap();
    let next = tokio::spawn(async move { waiting.campaign("native").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(lead.resign().await.unwrap());
    let next = tokio::time::timeout(SOON, next)
        .await
        .expect("hand-over within 5 s")
        .unwrap()
        .unwrap();
    assert_eq!(
        compat
            .election("both")
            .unwrap()
            .leader()
            .await
            .unwrap()
            .map(|l| l.value_str().into_owned()),
        Some("native".to_string())
    );
    next.resign().await.unwrap();
}

/// A fixed-lease leadership extended keeps its lock and its leader hash alive together (the
/// renewal names both keys), so it still leads past its first lease.
#[tokio::test]
async fn an_extended_leadership_keeps_leading() {
    let server = PrivateRedis::start(&[]);
    let locks = connect(&server.url(), &[]).await;
    let mut admin = admin(&server.url()).await;
    let e = locks.election("extended").unwrap();
    let lead = e
        .campaign_with(
            "a",
            &AcquireOptions::new().fixed_lease(Duration::from_millis(400)),
        )
        .await
        .unwrap()
        .expect("free");
    lead.extend(Duration::from_secs(3)).await.unwrap();
    let leader_key = LockKeys::election("lockkit", "extended").leader.unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&leader_key)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(pttl > 1000, "the leader hash was extended too ({pttl})");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(lead.state(), LockState::Held);
    assert_eq!(
        e.leader().await.unwrap().map(|l| l.term()),
        Some(lead.term())
    );
    assert!(lead.resign().await.unwrap());
}
