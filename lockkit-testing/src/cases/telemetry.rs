//! Tracing: one acquire span and one release span per operation, with the same fields on
//! every backend.

use std::time::Duration;

use lockkit_core::{AcquireOptions, ErrorKind, Locks};

use super::*;
use crate::spans;

/// The fields of `lockkit.acquire`, then of `lockkit.release`, as every backend records them.
const ACQUIRE_FIELDS: [&str; 9] = [
    "backend",
    "fair",
    "lease",
    "lock",
    "outcome",
    "primitive",
    "token",
    "wait",
    "waited_ms",
];
const RELEASE_FIELDS: [&str; 5] = ["backend", "lock", "outcome", "primitive", "token"];

/// An acquire and a release each leave one span, with the fixed field set, the backend's name
/// and the outcome.
pub async fn spans_read_the_same_on_every_backend(locks: &Locks) {
    assert!(
        spans::capture(),
        "another tracing subscriber was installed first"
    );
    let n = name("spans");
    let g = mutex(locks, &n).lock().await.unwrap();
    let token = g.token().0.to_string();
    g.release().await.unwrap();
    let seen = spans::of_lock(&n);
    let names: Vec<&str> = seen.iter().map(|s| s.name).collect();
    assert_eq!(names, ["lockkit.acquire", "lockkit.release"], "{seen:?}");
    let (acquire, release) = (&seen[0].fields, &seen[1].fields);
    assert_eq!(
        acquire.keys().map(String::as_str).collect::<Vec<_>>(),
        ACQUIRE_FIELDS
    );
    assert_eq!(
        release.keys().map(String::as_str).collect::<Vec<_>>(),
        RELEASE_FIELDS
    );
    for fields in [acquire, release] {
        assert_eq!(fields["backend"], locks.backend().as_str());
        assert_eq!(fields["primitive"], "mutex");
        assert_eq!(fields["token"], token);
    }
    assert_eq!(acquire["outcome"], "acquired");
    assert_eq!(release["outcome"], "released");

    // A campaign and a resignation are an acquire and a release of primitive `election`.
    if locks.capabilities().election.is_none() {
        return;
    }
    let en = name("spans-elect");
    let lead = locks.election(&en).unwrap().campaign("a").await.unwrap();
    let term = lead.term().0.to_string();
    assert!(lead.resign().await.unwrap());
    let seen = spans::of_lock(&en);
    let names: Vec<&str> = seen.iter().map(|s| s.name).collect();
    assert_eq!(names, ["lockkit.acquire", "lockkit.release"], "{seen:?}");
    for s in &seen {
        assert_eq!(s.fields["primitive"], "election", "{seen:?}");
        assert_eq!(s.fields["token"], term, "{seen:?}");
    }
    assert_eq!(seen[0].fields["outcome"], "acquired");
    assert_eq!(seen[1].fields["outcome"], "released");
}

/// Polls `read` until `ok` holds of what it returns (the core reports some changes just after
/// it wakes the guard's waiters), failing with `what` after [`SOON`].
async fn eventually<T: std::fmt::Debug>(
    what: &str,
    mut read: impl FnMut() -> T,
    ok: impl Fn(&T) -> bool,
) -> T {
    let end = std::time::Instant::now() + SOON;
    loop {
        let v = read();
        if ok(&v) {
            return v;
        }
        assert!(std::time::Instant::now() < end, "{what}: {v:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The labels of the per-lock metrics of `lock`, a `primitive`, on `locks`' backend.
fn of<'a>(locks: &Locks, primitive: &'a str, lock: &'a str) -> [(&'a str, &'a str); 3] {
    [
        ("backend", locks.backend().as_str()),
        ("primitive", primitive),
        ("lock", lock),
    ]
}

/// `labels` and one more.
fn with<'a>(labels: [(&'a str, &'a str); 3], k: &'a str, v: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut all = labels.to_vec();
    all.push((k, v));
    all
}

/// A scripted sequence (acquire, a waiter that times out, force_unlock, release; a read, a write, a
/// permit and a leadership an observer follows) leaves the same metrics on every backend, labelled
/// with the backend and the primitive.
pub async fn metrics_count_a_scripted_sequence(locks: &Locks) {
    use crate::metrics::read;
    use lockkit_core::telemetry::names::*;
    assert!(
        crate::metrics::install(),
        "another metrics recorder was installed first"
    );
    let n = name("metrics");
    let m = of(locks, "mutex", &n);

    let g = mutex(locks, &n).lock().await.unwrap();
    let seen = read();
    assert_eq!(seen.gauge(HELD, &m), 1.0, "{:?}", seen.series(HELD));
    assert_eq!(
        seen.samples(ACQUIRE_DURATION, &with(m, "outcome", "acquired")),
        1.0
    );

    // A waiter counts in lockkit_waiting until its budget runs out.
    let contender = mutex(locks, &n);
    let waiter = tokio::spawn(async move {
        contender
            .acquire(&AcquireOptions::new().wait(Duration::from_millis(500)))
            .await
    });
    eventually(
        "the waiter is counted",
        || read().gauge(WAITING, &m),
        |w| *w == 1.0,
    )
    .await;
    let got = within(SOON, "the waiter's timeout", waiter).await.unwrap();
    assert!(got.unwrap().is_none(), "the waiter got a held lock");
    let seen = read();
    assert_eq!(seen.gauge(WAITING, &m), 0.0);
    assert_eq!(
        seen.samples(ACQUIRE_DURATION, &with(m, "outcome", "timed_out")),
        1.0
    );

    // Force-unlocked: counted, and the holder is lost, the lock deleted under it.
    assert!(mutex(locks, &n).force_unlock().await.unwrap());
    within(
        Duration::from_secs(10),
        "lost() after force_unlock",
        g.lost(),
    )
    .await;
    let seen = eventually("the loss is counted", read, |s| s.counter(LOST, &m) == 1.0).await;
    assert_eq!(
        seen.counter(LOST, &with(m, "reason", "deleted")),
        1.0,
        "{:?}",
        seen.series(LOST)
    );
    assert_eq!(seen.counter(FORCE_UNLOCKS, &m), 1.0);
    assert_kind(
        g.release().await,
        ErrorKind::LockLost,
        "release after force_unlock",
    );
    let seen = read();
    assert_eq!(seen.gauge(HELD, &m), 0.0);
    assert_eq!(seen.samples(HOLD_DURATION, &m), 1.0);
    assert_eq!(seen.samples(ACQUIRE_DURATION, &m), 2.0);

    // A read and a write hold; a permit.
    let rn = name("metrics-rw");
    let rw = of(locks, "rwlock", &rn);
    if locks.capabilities().rwlock.is_some() {
        let lock = locks.rwlock(&rn).unwrap();
        let r = lock.read_lock().await.unwrap();
        assert_eq!(read().gauge(HELD, &rw), 1.0);
        r.release().await.unwrap();
        lock.write_lock().await.unwrap().release().await.unwrap();
        let seen = read();
        assert_eq!(
            seen.samples(ACQUIRE_DURATION, &with(rw, "outcome", "acquired")),
            2.0
        );
        assert_eq!(seen.samples(HOLD_DURATION, &rw), 2.0);
        assert_eq!(seen.gauge(HELD, &rw), 0.0);
    }
    let sn = name("metrics-sem");
    let sem = of(locks, "semaphore", &sn);
    if locks.capabilities().semaphore.is_some() {
        let s = locks.semaphore(&sn, 2).unwrap();
        let p = s.acquire_one().await.unwrap();
        assert_eq!(read().gauge(HELD, &sem), 1.0);
        p.release().await.unwrap();
        let seen = read();
        assert_eq!(
            seen.samples(ACQUIRE_DURATION, &with(sem, "outcome", "acquired")),
            1.0
        );
        assert_eq!(seen.samples(HOLD_DURATION, &sem), 1.0);
        assert_eq!(seen.gauge(HELD, &sem), 0.0);
    }

    // A campaign won (its term), and an observer's changes: the leader, then nobody.
    let en = name("metrics-elect");
    let el = of(locks, "election", &en);
    if locks.capabilities().election.is_some() {
        let e = locks.election(&en).unwrap();
        let mut changes = e.observe().await.unwrap();
        let first = within(SOON, "the first state", changes.next()).await;
        assert_eq!(
            first.expect("open").expect("follows"),
            None,
            "nobody leads yet"
        );
        let lead = e.campaign("a").await.unwrap();
        let seen = read();
        assert_eq!(seen.counter(LEADERSHIPS, &el), 1.0);
        assert_eq!(seen.gauge(LEADER_TERM, &el), lead.term().0 as f64);
        assert_eq!(seen.gauge(HELD, &el), 1.0);
        assert_eq!(
            seen.samples(ACQUIRE_DURATION, &with(el, "outcome", "acquired")),
            1.0
        );
        let led = within(SOON, "the leader", changes.next()).await;
        assert!(led.expect("open").expect("follows").is_some(), "a leads");
        assert!(lead.resign().await.unwrap());
        let gone = within(SOON, "nobody leads", changes.next()).await;
        assert_eq!(gone.expect("open").expect("follows"), None, "nobody leads");
        let seen = read();
        assert_eq!(seen.counter(LEADER_CHANGES, &el), 2.0);
        assert_eq!(seen.gauge(HELD, &el), 0.0);
        assert_eq!(seen.samples(HOLD_DURATION, &el), 1.0);

        // A leader demoted by force_resign: counted with the force-unlocks, lost as deleted.
        let demoted = e.campaign("b").await.unwrap();
        assert!(e.force_resign().await.unwrap());
        within(
            Duration::from_secs(10),
            "lost() after force_resign",
            demoted.lost(),
        )
        .await;
        let seen = eventually("the loss is counted", read, |s| s.counter(LOST, &el) == 1.0).await;
        assert_eq!(seen.counter(LOST, &with(el, "reason", "deleted")), 1.0);
        assert_eq!(seen.counter(FORCE_UNLOCKS, &el), 1.0);
        assert!(!demoted.resign().await.unwrap());
        assert_eq!(read().gauge(HELD, &el), 0.0);
    }

    // Every gauge is back to 0, nothing failed, and every series names this backend.
    let seen = read();
    for lock in [&n, &rn, &sn, &en] {
        let mine = [("lock", lock.as_str())];
        assert_eq!(seen.gauge(HELD, &mine), 0.0, "{:?}", seen.series(HELD));
        assert_eq!(
            seen.gauge(WAITING, &mine),
            0.0,
            "{:?}",
            seen.series(WAITING)
        );
        assert_eq!(seen.counter(RELEASE_ERRORS, &mine), 0.0);
        let all = seen.samples(ACQUIRE_DURATION, &mine);
        let here = seen.samples(
            ACQUIRE_DURATION,
            &[
                ("lock", lock.as_str()),
                ("backend", locks.backend().as_str()),
            ],
        );
        assert_eq!(all, here, "{:?}", seen.series(ACQUIRE_DURATION));
    }
}

/// The fields of a state-change event and of the force_unlock audit event, as every backend
/// emits them.
const LOST_FIELDS: [&str; 7] = [
    "backend",
    "lock",
    "message",
    "primitive",
    "reason",
    "state",
    "token",
];
const FORCE_UNLOCK_FIELDS: [&str; 5] = ["backend", "lock", "message", "primitive", "unlocked"];

/// A force_unlock leaves one `warn` audit event, and its holder's Held -> Lost one state-change
/// event with the reason `deleted`, with the same fields on every backend.
pub async fn state_changes_and_force_unlock_are_events(locks: &Locks) {
    assert!(
        spans::capture(),
        "another tracing subscriber was installed first"
    );
    let n = name("events");
    let g = mutex(locks, &n).lock().await.unwrap();
    let token = g.token().0.to_string();
    assert!(mutex(locks, &n).force_unlock().await.unwrap());
    within(
        Duration::from_secs(10),
        "lost() after force_unlock",
        g.lost(),
    )
    .await;
    let state = |e: &spans::EventRecord| e.fields.contains_key("state");
    let seen = eventually(
        "the loss is an event",
        || spans::events_of_lock(&n),
        |seen| seen.iter().any(state),
    )
    .await;
    let _ = g.release().await;
    // Whatever else the backend says about the lock, it names the backend.
    let seen: Vec<_> = spans::events_of_lock(&n).into_iter().chain(seen).collect();
    for e in &seen {
        assert_eq!(
            e.fields.get("backend").map(String::as_str),
            Some(locks.backend().as_str()),
            "{e:?}"
        );
    }

    let audit: Vec<_> = seen
        .iter()
        .filter(|e| {
            e.fields
                .get("message")
                .is_some_and(|m| m == "lockkit: force_unlock")
        })
        .collect();
    assert!(!audit.is_empty(), "no force_unlock audit event: {seen:?}");
    let audit = audit[0];
    assert_eq!(audit.level, tracing::Level::WARN);
    assert_eq!(
        audit.fields.keys().map(String::as_str).collect::<Vec<_>>(),
        FORCE_UNLOCK_FIELDS
    );
    assert_eq!(audit.fields["primitive"], "mutex");
    assert_eq!(audit.fields["unlocked"], "true");

    let changes: Vec<_> = spans::events_of_lock(&n)
        .into_iter()
        .filter(state)
        .collect();
    assert_eq!(changes.len(), 1, "{changes:?}");
    let lost = &changes[0];
    assert_eq!(
        lost.fields.keys().map(String::as_str).collect::<Vec<_>>(),
        LOST_FIELDS
    );
    assert_eq!(lost.level, tracing::Level::WARN);
    assert_eq!(lost.fields["state"], "lost");
    assert_eq!(lost.fields["reason"], "deleted");
    assert_eq!(lost.fields["token"], token);
    assert_eq!(lost.fields["primitive"], "mutex");
}
