//! The acquire driver: the one loop that runs every queued acquire, whatever the backend.
//!
//! A backend describes its queue with the verbs of [`Queue`]: make a claim, enqueue it, wait
//! for a change, read where it stands, turn it into a hold, leave. [`drive`] owns everything
//! between the verbs, once for every backend:
//!
//! - the order: enqueue, then wait and look until the claim holds, is gone or the wait budget
//!   runs out;
//! - the deadline, and one last look when it passes (a hand-off may land at the deadline, and a
//!   lagging watch may not have said so yet);
//! - starting over with a new claim when the old one vanished (an admin deleted it, its lease
//!   or session ended while it waited);
//! - bearing transient failures while queued, for as long as the backend says its place
//!   survives them (a failover), paced by [`Backoff::WAITER`];
//! - leaving the queue on every way out but a hold, awaited, so that the caller finds nothing
//!   of its claim once the acquire returned;
//! - one cancel guard: a claim still unfinished when the acquire future is dropped goes to
//!   [`Queue::abandon`], which hands it to the backend's reaper.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::armed::{Armed, Undo};
use crate::backoff::Backoff;
use crate::error::{Error, ErrorKind, Result};
use crate::spi::Request;

/// Where a claim stands in its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// It holds: the driver turns it into a hold with [`Queue::hold`].
    Owner,
    /// Others stand before it.
    Waiting,
    /// It is no longer queued (deleted, its lease or session ended): the driver leaves and
    /// starts over with a new claim.
    Gone,
}

/// What ended a [`Queue::wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// Something may have changed, or the wait reached its instant: the driver reads the
    /// standing with [`Queue::standing`].
    Look,
    /// The queue itself handed the claim the lock (a hand-off the backend can trust without a
    /// read): the driver holds at once.
    Owner,
}

/// Why the driver leaves a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The wait budget ran out (or the acquire could not wait).
    TimedOut,
    /// A step failed; its error is the acquire's answer.
    Failed,
    /// The claim vanished, or could not be held: a new claim follows.
    Restart,
}

/// One backend's queue protocol, as the acquire driver sees it.
///
/// Every method gets the claim by `&mut`: the driver keeps it, so that a claim whose step is
/// cut off (the acquire future dropped) still reaches [`abandon`](Queue::abandon).
#[async_trait]
pub trait Queue: Send + Sync {
    /// What the backend remembers about one claim: its key, node or owner id, what it learned.
    type Claim: Send;
    /// What a claim that holds becomes ([`GuardParts`](crate::spi::GuardParts) for most).
    type Output: Send;

    /// Makes a new claim: its identity, before anything of it is sent, so that a claim whose
    /// enqueue never answered can still be found and left.
    async fn claim(&self, req: &Request) -> Result<Self::Claim>;

    /// Sends the claim: takes the lock if the queue lets it, else queues it when `req` may
    /// wait. Returns where it stands.
    async fn enqueue(&self, claim: &mut Self::Claim, req: &Request) -> Result<Standing>;

    /// Waits until its standing may have changed, or until `req`'s deadline (none: no bound
    /// but the backend's own). May return early; the driver then looks.
    async fn wait(&self, claim: &mut Self::Claim, req: &Request) -> Result<Woken>;

    /// Where the claim stands now, as the server says (a linearizable read where a watch may
    /// lag).
    async fn standing(&self, claim: &mut Self::Claim, req: &Request) -> Result<Standing>;

    /// Where the claim stands, asked instead of [`standing`](Queue::standing) after a step
    /// failed (a wait or a look that was refused, or whose answer was lost): what the claim
    /// learned before may no longer hold, so a backend that answers `standing` from what its
    /// watch showed reads the server here. By default, `standing`.
    async fn recheck(&self, claim: &mut Self::Claim, req: &Request) -> Result<Standing> {
        self.standing(claim, req).await
    }

    /// Turns a claim that holds into the hold; `None` when it turned out to be gone (the
    /// driver leaves and starts over). On `Some`, whatever the claim owned belongs to the
    /// output, and the claim is dropped without a leave.
    async fn hold(&self, claim: &mut Self::Claim, req: &Request) -> Result<Option<Self::Output>>;

    /// Leaves the queue now, awaited: deletes what the claim created, passing on a lock handed
    /// to it meanwhile. What the server does not take now, the backend hands to its reaper
    /// (and answers `Ok`); an `Err` sends the claim to [`abandon`](Queue::abandon).
    async fn leave(&self, claim: &mut Self::Claim, exit: Exit) -> Result<()>;

    /// Leaves in the background: the acquire future was dropped with the claim unfinished, or
    /// a leave failed. Must not block: hand the work to the reaper.
    fn abandon(&self, claim: Self::Claim);

    /// How long a queued claim keeps its place through transient failures (a failover, a
    /// restart), counted from the first failure of the run ([`Failures::since`]): errors that
    /// are [retryable](crate::Error::is_retryable) are borne that long, then the error is the
    /// answer. Asked after each failure with the run so far, so the answer may change as the
    /// claim learns (what failed, whether the server answered, whether its session still
    /// lives); `Duration::MAX` bears for as long as the answer stays so. Zero (the default) for
    /// a backend whose client retries on its own.
    fn tolerance(&self, claim: &Self::Claim, failures: &Failures<'_>) -> Duration {
        let _ = (claim, failures);
        Duration::ZERO
    }

    /// The lock's name, for the driver's trace events.
    fn lock_name(&self) -> &str {
        ""
    }
}

/// A queued claim's run of failed steps since its last step that succeeded, as the driver
/// counts it: what [`Queue::tolerance`] weighs.
#[derive(Clone, Copy, Debug)]
pub struct Failures<'e> {
    last: &'e Error,
    streak: Streak,
}

impl Failures<'_> {
    /// The error of the step that just failed.
    pub fn last(&self) -> &Error {
        self.last
    }

    /// When the run began: a failed look counts from when it was sent, a failed wait from
    /// when it returned.
    pub fn since(&self) -> Instant {
        self.streak.since
    }

    /// When the server first refused (answered with an error other than a
    /// [`Connection`](ErrorKind::Connection) or [`Timeout`](ErrorKind::Timeout) one) since the
    /// last step that went unanswered; `None` while the last failure went unanswered.
    pub fn refused_since(&self) -> Option<Instant> {
        self.streak.refused_since
    }
}

/// The run of failures the driver tracks: [`Failures`] without the last error.
#[derive(Clone, Copy, Debug)]
struct Streak {
    since: Instant,
    refused_since: Option<Instant>,
}

impl Streak {
    /// The run after a step sent at `at` failed with `e` (`streak`: the run before it).
    fn after(streak: Option<Streak>, e: &Error, at: Instant) -> Streak {
        let since = streak.map_or(at, |s| s.since);
        let unanswered = matches!(e.kind(), ErrorKind::Connection | ErrorKind::Timeout);
        let refused_since = match streak.and_then(|s| s.refused_since) {
            _ if unanswered => None,
            Some(first) => Some(first),
            None => Some(at),
        };
        Streak {
            since,
            refused_since,
        }
    }
}

/// The claim of one attempt that no output owns yet: dropped unfinished, it goes to
/// [`Queue::abandon`].
struct Unfinished<'q, Q: Queue> {
    queue: &'q Q,
    claim: Q::Claim,
}

impl<Q: Queue> Undo for Unfinished<'_, Q> {
    fn undo(self) {
        self.queue.abandon(self.claim);
    }
}

type Pending<'q, Q> = Armed<Unfinished<'q, Q>>;

/// Leaves the queue (awaited); a failed leave goes to the background.
async fn leave<Q: Queue>(mut pending: Pending<'_, Q>, exit: Exit) {
    let p = &mut *pending;
    if p.queue.leave(&mut p.claim, exit).await.is_ok() {
        pending.disarm();
    }
}

/// Runs one acquire on `queue` as `req` says: the output once a claim holds, `Ok(None)` when
/// the wait budget ran out first. Whatever way it ends, nothing of a claim that does not hold
/// is left behind; dropping the future hands an unfinished claim to [`Queue::abandon`].
pub async fn drive<Q: Queue>(queue: &Q, req: &Request) -> Result<Option<Q::Output>> {
    // Claims that vanished one after another are replaced at a pace (the first one at once).
    let mut restarts = Backoff::WAITER.start();
    'claims: loop {
        let mut pending = Pending::new(Unfinished {
            queue,
            claim: queue.claim(req).await?,
        });
        let mut standing = match queue.enqueue(&mut pending.claim, req).await {
            Ok(s) => s,
            Err(e) => {
                leave(pending, Exit::Failed).await;
                return Err(e);
            }
        };
        // The run of failed steps of this queued claim, and the pacing of its retries.
        let mut failing: Option<Streak> = None;
        let mut retry = Backoff::WAITER.start();
        loop {
            let restart = match standing {
                Standing::Owner => match queue.hold(&mut pending.claim, req).await {
                    Ok(Some(out)) => {
                        pending.disarm();
                        return Ok(Some(out));
                    }
                    Ok(None) => true,
                    Err(e) => {
                        leave(pending, Exit::Failed).await;
                        return Err(e);
                    }
                },
                Standing::Gone => true,
                Standing::Waiting => false,
            };
            if restart {
                leave(pending, Exit::Restart).await;
                if req.expired() {
                    return Ok(None);
                }
                let first = restarts.attempts() == 0;
                let pause = restarts.next_pause();
                if !first {
                    tokio::time::sleep_until(req.bound(Instant::now() + pause)).await;
                    if req.expired() {
                        return Ok(None);
                    }
                }
                continue 'claims;
            }
            // Waiting, and this look was the last one the budget allowed.
            if req.expired() {
                leave(pending, Exit::TimedOut).await;
                return Ok(None);
            }
            // After a failure, the next look comes after a pause, without a wait: the wait
            // may be what failed, and a look also keeps the claim's place. The pauses grow
            // until a wait succeeds again.
            let waits = failing.is_none();
            let woken = match failing {
                Some(_) => {
                    tokio::time::sleep_until(req.bound(Instant::now() + retry.next_pause())).await;
                    Ok(Woken::Look)
                }
                None => queue.wait(&mut pending.claim, req).await,
            };
            let sent = Instant::now();
            let step = match woken {
                Ok(Woken::Owner) => Ok(Standing::Owner),
                Ok(Woken::Look) if waits => queue.standing(&mut pending.claim, req).await,
                Ok(Woken::Look) => queue.recheck(&mut pending.claim, req).await,
                Err(e) => Err(e),
            };
            standing = match step {
                Ok(s) => {
                    failing = None;
                    if waits {
                        retry.reset();
                    }
                    s
                }
                Err(e) if e.is_retryable() => {
                    let streak = Streak::after(failing, &e, sent);
                    failing = Some(streak);
                    let failures = Failures { last: &e, streak };
                    if streak.since.elapsed() >= queue.tolerance(&pending.claim, &failures) {
                        leave(pending, Exit::Failed).await;
                        return Err(e);
                    }
                    tracing::debug!(
                        lock = queue.lock_name(),
                        error = %e,
                        "lockkit: waiting through a failed request"
                    );
                    Standing::Waiting
                }
                Err(e) => {
                    leave(pending, Exit::Failed).await;
                    return Err(e);
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;
    use crate::options::AcquireOptions;

    /// A queue that answers from a script and records every verb.
    #[derive(Default)]
    struct Scripted {
        enqueued: Mutex<VecDeque<Result<Standing>>>,
        looks: Mutex<VecDeque<Result<Standing>>>,
        /// How long a wait lasts at most.
        nap: Duration,
        tolerance: Duration,
        /// What every wait answers instead of sleeping.
        wait_answer: Option<fn() -> Result<Woken>>,
        leave_fails: bool,
        /// What each call of `tolerance` was shown: the last error's kind, the run's start and
        /// its first refusal.
        seen: Mutex<Vec<(ErrorKind, Instant, Option<Instant>)>>,
        log: Mutex<Vec<String>>,
    }

    impl Scripted {
        fn new(enqueued: Vec<Result<Standing>>, looks: Vec<Result<Standing>>) -> Self {
            Scripted {
                enqueued: Mutex::new(enqueued.into()),
                looks: Mutex::new(looks.into()),
                nap: Duration::from_millis(100),
                ..Default::default()
            }
        }
        fn note(&self, s: String) {
            self.log.lock().unwrap().push(s);
        }
        fn log(&self) -> Vec<String> {
            self.log.lock().unwrap().clone()
        }
        fn next_look(&self) -> Result<Standing> {
            self.looks
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Ok(Standing::Waiting))
        }
    }

    fn busy() -> Error {
        Error::new(ErrorKind::Connection, "away")
    }

    #[async_trait]
    impl Queue for Scripted {
        type Claim = u32;
        type Output = u32;

        async fn claim(&self, _req: &Request) -> Result<u32> {
            let n = self.log().iter().filter(|l| *l == "claim").count() as u32 + 1;
            self.note("claim".into());
            Ok(n)
        }
        async fn enqueue(&self, _c: &mut u32, _req: &Request) -> Result<Standing> {
            self.note("enqueue".into());
            self.enqueued
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Ok(Standing::Waiting))
        }
        async fn wait(&self, _c: &mut u32, r: &Request) -> Result<Woken> {
            self.note("wait".into());
            if let Some(answer) = self.wait_answer {
                return answer();
            }
            tokio::time::sleep_until(r.bound(Instant::now() + self.nap)).await;
            Ok(Woken::Look)
        }
        async fn standing(&self, _c: &mut u32, _req: &Request) -> Result<Standing> {
            self.note("look".into());
            self.next_look()
        }
        async fn recheck(&self, _c: &mut u32, _req: &Request) -> Result<Standing> {
            self.note("recheck".into());
            self.next_look()
        }
        async fn hold(&self, c: &mut u32, _req: &Request) -> Result<Option<u32>> {
            self.note(format!("hold {c}"));
            Ok(Some(*c))
        }
        async fn leave(&self, c: &mut u32, exit: Exit) -> Result<()> {
            self.note(format!("leave {c} {exit:?}"));
            if self.leave_fails {
                return Err(busy());
            }
            Ok(())
        }
        fn abandon(&self, c: u32) {
            self.note(format!("abandon {c}"));
        }
        fn tolerance(&self, _c: &u32, f: &Failures<'_>) -> Duration {
            self.seen
                .lock()
                .unwrap()
                .push((f.last().kind(), f.since(), f.refused_since()));
            self.tolerance
        }
    }

    fn req(wait: Duration) -> Request {
        Request::new(&AcquireOptions::new().wait(wait), Duration::from_secs(30))
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_that_vanished_is_left_and_a_new_one_follows() {
        let q = Scripted::new(
            vec![Ok(Standing::Waiting), Ok(Standing::Owner)],
            vec![Ok(Standing::Gone)],
        );
        let got = drive(&q, &req(Duration::from_secs(5))).await.unwrap();
        assert_eq!(got, Some(2), "{:?}", q.log());
        assert!(q.log().contains(&"leave 1 Restart".to_string()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_that_runs_out_looks_once_more_then_leaves() {
        let q = Scripted::new(vec![], vec![]);
        let got = drive(&q, &req(Duration::from_millis(250))).await.unwrap();
        assert_eq!(got, None);
        let log = q.log();
        // Waits of 100, 100 and the last 50 ms, each followed by a look.
        assert_eq!(log.iter().filter(|l| *l == "wait").count(), 3, "{log:?}");
        assert_eq!(log.iter().filter(|l| *l == "look").count(), 3, "{log:?}");
        assert_eq!(log.last().unwrap(), "leave 1 TimedOut");
        // A hand-off seen at that last look is taken.
        let q = Scripted::new(
            vec![],
            vec![
                Ok(Standing::Waiting),
                Ok(Standing::Waiting),
                Ok(Standing::Owner),
            ],
        );
        assert_eq!(
            drive(&q, &req(Duration::from_millis(250))).await.unwrap(),
            Some(1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_acquire_that_may_not_wait_leaves_after_its_one_try() {
        let q = Scripted::new(vec![Ok(Standing::Waiting)], vec![]);
        let r = Request::new(&AcquireOptions::new().no_wait(), Duration::from_secs(30));
        assert_eq!(drive(&q, &r).await.unwrap(), None);
        assert_eq!(q.log(), ["claim", "enqueue", "leave 1 TimedOut"]);
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_borne_for_the_tolerance_only() {
        let mut q = Scripted::new(vec![], vec![Err(busy()), Err(busy()), Ok(Standing::Owner)]);
        q.tolerance = Duration::from_secs(2);
        assert_eq!(
            drive(&q, &req(Duration::from_secs(10))).await.unwrap(),
            Some(1)
        );

        let q = Scripted::new(vec![], vec![Err(busy())]);
        let e = drive(&q, &req(Duration::from_secs(10))).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Connection);
        assert_eq!(q.log().last().unwrap(), "leave 1 Failed");

        let q = Scripted::new(vec![], vec![Err(Error::new(ErrorKind::Auth, "no"))]);
        let mut q = q;
        q.tolerance = Duration::from_secs(2);
        let e = drive(&q, &req(Duration::from_secs(10))).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Auth, "only retryable errors are borne");
    }

    #[tokio::test(start_paused = true)]
    async fn the_tolerance_sees_the_run_of_failures_and_its_first_refusal() {
        let refused = || Err(Error::new(ErrorKind::Backend, "full").with_retryable(true));
        let mut q = Scripted::new(
            vec![],
            vec![
                refused(),
                Err(busy()),
                refused(),
                refused(),
                Ok(Standing::Waiting),
                Err(busy()),
                Ok(Standing::Owner),
            ],
        );
        q.tolerance = Duration::MAX;
        assert_eq!(
            drive(&q, &req(Duration::from_secs(30))).await.unwrap(),
            Some(1)
        );
        let seen = q.seen.lock().unwrap().clone();
        let kinds: Vec<_> = seen.iter().map(|s| s.0).collect();
        use ErrorKind::{Backend, Connection};
        assert_eq!(kinds, [Backend, Connection, Backend, Backend, Connection]);
        // One run for the first four, counted from the first; a refusal counted from the
        // first one after the last unanswered step; a look that succeeded starts a new run.
        let first = seen[0].1;
        assert!(seen[..4].iter().all(|s| s.1 == first), "{seen:?}");
        assert_eq!(seen[0].2, Some(first));
        assert_eq!(seen[1].2, None);
        assert!(seen[2].2.is_some_and(|r| r > first));
        assert_eq!(seen[3].2, seen[2].2);
        assert!(seen[4].1 > seen[3].2.unwrap());
        assert_eq!(seen[4].2, None);
        // Each look after a failure is a recheck; after a success, the driver waits again.
        let steps: Vec<_> = q
            .log()
            .into_iter()
            .filter(|l| ["wait", "look", "recheck"].contains(&l.as_str()))
            .collect();
        assert_eq!(
            steps,
            [
                "wait", "look", "recheck", "recheck", "recheck", "recheck", "wait", "look",
                "recheck"
            ],
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_acquire_abandons_its_claim() {
        let q = Scripted::new(vec![], vec![]);
        let r = req(Duration::from_secs(10));
        let cut = tokio::time::timeout(Duration::from_millis(150), drive(&q, &r)).await;
        assert!(cut.is_err());
        assert_eq!(q.log().last().unwrap(), "abandon 1");
        assert!(!q.log().iter().any(|l| l.starts_with("leave")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_that_fails_at_once_is_retried_at_a_pace_with_a_look_between() {
        let mut q = Scripted::new(vec![], vec![]);
        q.tolerance = Duration::from_secs(60);
        q.wait_answer = Some(|| Err(busy()));
        let r = req(Duration::from_secs(2));
        assert_eq!(drive(&q, &r).await.unwrap(), None);
        let log = q.log();
        let waits = log.iter().filter(|l| *l == "wait").count();
        // Each failed wait is followed by a pause of the waiter backoff (25-50 ms growing to
        // 200-400 ms) and a look: about 10 in 2 s (80 at the first pause, without growth).
        assert!((4..=15).contains(&waits), "{waits} waits in 2 s: {log:?}");
        let rechecks = log.iter().filter(|l| *l == "recheck").count();
        assert!(
            rechecks >= waits,
            "a recheck follows every failed wait: {log:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failures_that_outlast_the_tolerance_end_the_acquire() {
        let mut q = Scripted::new(vec![], (0..100).map(|_| Err(busy())).collect());
        q.tolerance = Duration::from_secs(1);
        let started = Instant::now();
        let e = drive(&q, &req(Duration::from_secs(30))).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Connection);
        let took = started.elapsed();
        // Counted from the first failed look, after the first 100 ms wait.
        assert!(
            took >= Duration::from_millis(1100) && took < Duration::from_secs(3),
            "{took:?}"
        );
        assert_eq!(q.log().last().unwrap(), "leave 1 Failed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_that_vanishes_past_the_deadline_is_not_replaced() {
        let q = Scripted::new(vec![], vec![Ok(Standing::Gone)]);
        let r = req(Duration::from_millis(50));
        assert_eq!(drive(&q, &r).await.unwrap(), None);
        assert_eq!(
            q.log().iter().filter(|l| *l == "claim").count(),
            1,
            "{:?}",
            q.log()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_claim_is_made_after_a_restart_pause_that_reached_the_deadline() {
        let q = Scripted::new(
            vec![Ok(Standing::Gone), Ok(Standing::Gone), Ok(Standing::Gone)],
            vec![],
        );
        // The first restart is at once, the second after a pause of 50-100 ms.
        assert_eq!(
            drive(&q, &req(Duration::from_millis(30))).await.unwrap(),
            None
        );
        let claims = q.log().iter().filter(|l| *l == "claim").count();
        assert_eq!(claims, 2, "{:?}", q.log());
    }

    #[tokio::test(start_paused = true)]
    async fn claims_that_keep_vanishing_are_replaced_at_a_pace() {
        let q = Scripted::new((0..1000).map(|_| Ok(Standing::Gone)).collect(), vec![]);
        assert_eq!(drive(&q, &req(Duration::from_secs(2))).await.unwrap(), None);
        let claims = q.log().iter().filter(|l| *l == "claim").count();
        assert!((3..=80).contains(&claims), "{claims} claims in 2 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hand_off_the_wait_reports_is_held_without_a_look() {
        let mut q = Scripted::new(vec![], vec![]);
        q.wait_answer = Some(|| Ok(Woken::Owner));
        assert_eq!(
            drive(&q, &req(Duration::from_secs(1))).await.unwrap(),
            Some(1)
        );
        assert_eq!(q.log(), ["claim", "enqueue", "wait", "hold 1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_leave_that_fails_hands_the_claim_to_the_background() {
        let mut q = Scripted::new(vec![], vec![]);
        q.leave_fails = true;
        assert_eq!(
            drive(&q, &req(Duration::from_millis(150))).await.unwrap(),
            None
        );
        let log = q.log();
        assert_eq!(&log[log.len() - 2..], ["leave 1 TimedOut", "abandon 1"]);
    }
}
