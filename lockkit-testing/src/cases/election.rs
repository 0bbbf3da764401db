use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{assert_kind, fixed, name, queued, within, SHORT, SOON};
use crate::harness::Hold;
use crate::{Harness, OverlapDetector};
use lockkit_core::{
    AcquireOptions, BackendKind, Election, ErrorKind, Leader, LeaderChanges, LockState, Locks,
    Primitive,
};

fn election(locks: &Locks, case: &str) -> Option<(String, Election)> {
    let n = name(case);
    if locks.capabilities().election.is_none() {
        assert_kind(locks.election(&n), ErrorKind::Unsupported, "election");
        return None;
    }
    let e = locks.election(&n).expect("election");
    Some((n, e))
}

/// The next state an observer sees, within [`SOON`].
async fn next(changes: &mut LeaderChanges) -> Option<Leader> {
    within(SOON, "a leader change", changes.next())
        .await
        .expect("the observer stream is open")
        .expect("the observer follows")
}

/// Six candidates, each leading three times: never two leaders at once, and every term is
/// higher than the one before it.
pub async fn election_one_leader_at_a_time_with_rising_terms(locks: &Locks) {
    let Some((n, _)) = election(locks, "elect-one") else {
        return;
    };
    let detector = OverlapDetector::new();
    let terms = Arc::new(StdMutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..6 {
        let e = locks.election(&n).unwrap();
        let (detector, terms) = (detector.clone(), terms.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let lead = e.campaign(format!("candidate-{c}")).await.unwrap();
                {
                    let _inside = detector.enter();
                    terms.lock().unwrap().push(lead.term());
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                assert!(lead.resign().await.unwrap(), "a live leader resigns");
            }
        }));
    }
    within(
        Duration::from_secs(120),
        "candidates",
        futures::future::try_join_all(tasks),
    )
    .await
    .unwrap();
    assert_eq!(detector.max_inside(), 1, "two leaders at once");
    let terms = terms.lock().unwrap();
    assert_eq!(terms.len(), 18);
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms must rise with every leader: {terms:?}"
    );
}

/// Ten candidates queued behind a leader lead in the order they came, where the backend serves
/// candidates first come, first served (every server backend; `file://` leaves the order to the
/// OS lock).
pub async fn election_candidates_lead_in_arrival_order(locks: &Locks) {
    let Some((n, e)) = election(locks, "elect-fifo") else {
        return;
    };
    if !locks.capabilities().election.is_some_and(|s| s.fair) {
        return;
    }
    let first = e.campaign("first").await.unwrap();
    let order = Arc::new(StdMutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let (e, order) = (locks.election(&n).unwrap(), order.clone());
        tasks.push(tokio::spawn(async move {
            let lead = e.campaign(format!("c{i}")).await.unwrap();
            order.lock().unwrap().push(i);
            assert!(lead.resign().await.unwrap());
        }));
        // This candidate reaches the queue before the next one starts.
        queued(locks, &n, Primitive::Election, i + 1).await;
    }
    assert!(first.resign().await.unwrap());
    within(
        Duration::from_secs(30),
        "queued candidates",
        futures::future::try_join_all(tasks),
    )
    .await
    .unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        (0..10).collect::<Vec<_>>(),
        "candidates did not lead in arrival order"
    );
}

/// `leader()` and `observe()` follow a campaign, a proclamation, a hand-over and a resignation,
/// in order, ending on the current state.
pub async fn election_leader_and_observers_follow_every_change(locks: &Locks) {
    let Some((n, a)) = election(locks, "elect-observe") else {
        return;
    };
    let b = locks.election(&n).unwrap();
    let mut changes = a.observe().await.unwrap();
    assert_eq!(next(&mut changes).await, None, "nobody leads yet");
    assert_eq!(a.leader().await.unwrap(), None);

    let lead_a = a.campaign("a").await.unwrap();
    let seen = next(&mut changes).await.expect("a leads");
    assert_eq!((seen.value(), seen.term()), (&b"a"[..], lead_a.term()));
    lead_a.proclaim("a2").await.unwrap();
    let seen = next(&mut changes).await.expect("a still leads");
    assert_eq!((seen.value(), seen.term()), (&b"a2"[..], lead_a.term()));
    assert_eq!(b.leader().await.unwrap().as_ref(), Some(&seen));

    // b waits behind a; a resigns and b leads, with a higher term.
    let waiting = tokio::spawn(async move { b.campaign("b").await.map(|l| (b, l)) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(lead_a.resign().await.unwrap());
    let (b, lead_b) = within(SOON, "b's campaign", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(lead_b.term() > seen.term(), "the term rises");
    // A late observer starts from the current leader.
    let mut late = b.observe().await.unwrap();
    let now = next(&mut late).await.expect("b leads");
    assert_eq!((now.value(), now.term()), (&b"b"[..], lead_b.term()));
    let mut last = next(&mut changes).await;
    if last.is_none() {
        // The instant between a's resignation and b's grant, where the backend shows it.
        last = next(&mut changes).await;
    }
    assert_eq!(last, Some(now));

    drop(lead_b);
    assert_eq!(next(&mut changes).await, None, "nobody leads");
    assert_eq!(next(&mut late).await, None, "nobody leads");
    assert_eq!(b.leader().await.unwrap(), None);

    // A closed handle's streams end.
    let _ = locks.close().await;
    for stream in [&mut changes, &mut late] {
        within(SOON, "the stream ends with its handle", async {
            while stream.next().await.is_some() {}
        })
        .await;
    }
}

/// A leader whose lease ran out is told through `lost()`, cannot proclaim, resigns with
/// `false`, and the next candidate leads.
pub async fn election_lost_leadership_is_signalled_and_refused(locks: &Locks) {
    let Some((n, a)) = election(locks, "elect-lost") else {
        return;
    };
    if locks
        .capabilities()
        .election
        .is_some_and(|s| !s.fixed_lease)
    {
        return;
    }
    let lead = a
        .campaign_with("a", &fixed(SHORT))
        .await
        .unwrap()
        .expect("free");
    within(SHORT + SOON, "the lost signal", lead.lost()).await;
    assert_eq!(lead.state(), LockState::Lost);
    assert_kind(lead.proclaim("late").await, ErrorKind::LockLost, "proclaim");
    let b = locks.election(&n).unwrap();
    let next = within(SOON, "the next campaign", b.campaign("b"))
        .await
        .unwrap();
    assert!(next.term() > lead.term());
    assert!(
        !lead.resign().await.unwrap(),
        "a lost leader resigns with false"
    );
    assert_eq!(
        b.leader().await.unwrap().map(|l| l.term()),
        Some(next.term())
    );
}

/// An admin's `force_resign` deletes the leader's node, key or lock file: the leader is told
/// through `lost()` and can no longer proclaim, the waiting candidate leads in a higher term,
/// observers see it, and the demoted leader's late resignation leaves the new leader alone.
pub async fn election_deleted_leader_is_demoted(locks: &Locks) {
    let Some((n, a)) = election(locks, "elect-deleted") else {
        return;
    };
    assert!(!a.force_resign().await.unwrap(), "nobody led");
    let lead = a.campaign("a").await.unwrap();
    let mut changes = a.observe().await.unwrap();
    let seen = next(&mut changes).await.expect("a leads");
    assert_eq!(seen.term(), lead.term());
    let b = locks.election(&n).unwrap();
    let waiting = tokio::spawn(async move { b.campaign("b").await.map(|l| (b, l)) });
    queued(locks, &n, Primitive::Election, 1).await;

    let admin = locks.election(&n).unwrap();
    assert!(admin.force_resign().await.unwrap(), "a led");
    // Told by the backend, not at the next renewal (10 s away with the default 30 s lease).
    within(SOON, "lost() after force_resign", lead.lost()).await;
    assert_eq!(lead.state(), LockState::Lost);
    assert_kind(lead.proclaim("late").await, ErrorKind::LockLost, "proclaim");
    let (b, lead_b) = within(SOON, "b's campaign", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(lead_b.term() > lead.term(), "the term rises");
    assert!(
        !lead.resign().await.unwrap(),
        "a demoted leader resigns with false"
    );
    assert_eq!(
        b.leader()
            .await
            .unwrap()
            .map(|l| (l.value().to_vec(), l.term())),
        Some((b"b".to_vec(), lead_b.term())),
        "the demoted leader's resignation left the new leader alone"
    );
    within(SOON, "the observer sees b lead", async {
        while next(&mut changes).await.map(|l| l.term()) != Some(lead_b.term()) {}
    })
    .await;
    assert!(lead_b.resign().await.unwrap());
}

/// An observer started right after a campaign returned, or right after a resignation, starts
/// on that state, never an older one, many times over: a backend that serves observers from a
/// local copy must first bring it up to a read made after the call, and one whose campaigns of
/// another lease length run on another session (perhaps on another member) must catch up with
/// it. Every other round campaigns with a 7 s watchdog lease.
pub async fn election_observer_starts_on_the_state_just_made(locks: &Locks) {
    let Some((_, a)) = election(locks, "elect-observe-now") else {
        return;
    };
    let other_lease = AcquireOptions::new().watchdog_lease(Duration::from_secs(7));
    for round in 0..24 {
        let value = format!("a-{round}");
        let lead = if round % 2 == 0 {
            a.campaign(value).await.unwrap()
        } else {
            a.campaign_with(value, &other_lease)
                .await
                .unwrap()
                .expect("nobody else campaigns")
        };
        assert_eq!(
            a.leader().await.unwrap().map(|l| l.term()),
            Some(lead.term()),
            "round {round}: leader() right after the campaign names it"
        );
        let mut changes = a.observe().await.unwrap();
        let first = next(&mut changes)
            .await
            .map(|l| (l.value().to_vec(), l.term()));
        assert_eq!(
            first,
            Some((format!("a-{round}").into_bytes(), lead.term())),
            "round {round}: the observer's first state is the campaign just won"
        );
        assert!(lead.resign().await.unwrap());
        let mut after = a.observe().await.unwrap();
        assert_eq!(
            next(&mut after).await.map(|l| l.term()),
            None,
            "round {round}: the observer's first state after a resignation is no leader"
        );
    }
}

/// Cancelled and timed-out campaigns leave nothing: once the leader resigns, nobody leads,
/// and a new candidate leads at once.
pub async fn election_withdrawn_candidates_leave_nothing(locks: &Locks) {
    let Some((n, a)) = election(locks, "elect-withdraw") else {
        return;
    };
    let lead = a.campaign("a").await.unwrap();
    let b = locks.election(&n).unwrap();
    let dropped = tokio::time::timeout(Duration::from_millis(100), b.campaign("dropped")).await;
    assert!(dropped.is_err(), "b cannot lead while a does");
    let timed_out = b
        .campaign_for("timed-out", Duration::from_millis(100))
        .await;
    assert!(timed_out.unwrap().is_none());
    let busy = b
        .campaign_with("busy", &AcquireOptions::new().no_wait())
        .await
        .unwrap();
    assert!(busy.is_none(), "no wait while a leads");
    assert!(lead.resign().await.unwrap());
    within(SOON, "nobody leads", async {
        while b.leader().await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let c = locks.election(&n).unwrap();
    let lead_c = c
        .campaign_with("c", &AcquireOptions::new().no_wait())
        .await
        .unwrap()
        .expect("a new candidate leads at once");
    assert_eq!(lead_c.name(), n);
}

/// A leader process killed mid-term (SIGKILL: it resigns nothing) is replaced after the lease it
/// campaigned with: a waiting candidate leads then, in a higher term, and observers see it.
pub async fn election_killed_leader_is_replaced_after_its_lease(h: &Harness) {
    let locks = h.locks().await;
    if !locks.capabilities().cross_process {
        return; // an in-process table dies with its process
    }
    let Some((n, e)) = election(&locks, "elect-killed") else {
        return;
    };
    let lease = SHORT * 2;
    let mut child = h.spawn(&n, Hold::Leader, lease).await;
    let mut changes = e.observe().await.unwrap();
    let seen = next(&mut changes).await.expect("the child leads");
    assert_eq!((seen.value(), seen.term()), (&b"child"[..], child.token()));
    assert!(
        e.campaign_for("parent", Duration::from_millis(200))
            .await
            .unwrap()
            .is_none(),
        "two leaders"
    );
    child.kill().await;
    let killed = Instant::now();
    let lead = e
        .campaign_for("parent", Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the parent leads once the killed leader's lease ran out");
    let took = killed.elapsed();
    assert!(
        took < lease + Duration::from_secs(3),
        "leadership passed {took:?} after the leader died, with a {lease:?} lease"
    );
    assert!(lead.term() > child.token(), "the term rises");
    let mut last = next(&mut changes).await;
    if last.is_none() {
        last = next(&mut changes).await;
    }
    assert_eq!(last.map(|l| l.term()), Some(lead.term()));
    assert!(lead.resign().await.unwrap());
}

/// A leader process paused mid-term (SIGSTOP: a GC pause, a VM migration) is replaced after its
/// lease, in a higher term, and learns through `lost()` once it runs again. On `file://` a
/// frozen process keeps its OS lock (nobody else can lead meanwhile), so there is nothing to
/// replace.
pub async fn election_paused_leader_is_replaced_and_told(h: &Harness) {
    let locks = h.locks().await;
    if !locks.capabilities().cross_process || locks.backend() == BackendKind::FILE {
        return;
    }
    let Some((n, e)) = election(&locks, "elect-paused") else {
        return;
    };
    let lease = SHORT * 2;
    let mut child = h.spawn(&n, Hold::Leader, lease).await;
    child.pause();
    let paused = Instant::now();
    let lead = e
        .campaign_for("parent", Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the parent leads once the paused leader's lease ran out");
    let took = paused.elapsed();
    child.resume();
    assert!(
        took < lease + Duration::from_secs(3),
        "leadership passed {took:?} after the leader paused, with a {lease:?} lease"
    );
    assert!(lead.term() > child.token(), "the term rises");
    assert!(
        child.says_lost(Duration::from_secs(10)).await,
        "the resumed leader was told it lost leadership"
    );
    assert_eq!(
        e.leader().await.unwrap().map(|l| l.term()),
        Some(lead.term()),
        "the resumed leader did not take leadership back"
    );
    assert!(lead.resign().await.unwrap());
}
