//! The safety kernel behind one [`Locks`](crate::Locks) handle: what every backend needs done
//! the same way, done once.
//!
//! It resolves and checks options (the default lease, capabilities, lease bounds), takes the
//! wait deadline once and keeps it (an acquire returns within its wait budget plus 100 ms),
//! traces every acquire with one fixed field set, refuses a guard that is
//! already lost, registers live ownerships so that `close()` turns every guard Lost, and keeps
//! the backend alive for as long as a handle or guard of it lives.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::capabilities::{Capabilities, Support};
use crate::error::{Error, ErrorKind, Result};
use crate::inspect::Primitive;
use crate::kind::BackendKind;
use crate::options::{check_asked_lease, AcquireOptions, Lease};
use crate::ownership::{GuardCore, InFlight, Ownership, Registry};
use crate::reason::LostReason;
use crate::spi::{Backend, GuardParts, Request, Taken};
use crate::telemetry::{Identity, Outcome, Waiting};

/// How long past its wait budget an acquire may take to finish what it started.
pub(crate) const BUDGET_GRACE: Duration = Duration::from_millis(100);

/// The state one handle's primitives and guards share.
#[derive(Debug)]
pub(crate) struct Kernel {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) kind: BackendKind,
    pub(crate) caps: Capabilities,
    pub(crate) default_lease: Duration,
    registry: Arc<Registry>,
}

impl Kernel {
    pub(crate) fn new(backend: Arc<dyn Backend>) -> Arc<Kernel> {
        Arc::new(Kernel {
            kind: backend.kind(),
            caps: backend.capabilities(),
            default_lease: backend.default_lease(),
            registry: Arc::new(Registry::new(backend.reaper().tagged(backend.kind()))),
            backend,
        })
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.registry.is_closed() {
            Err(Error::closed())
        } else {
            Ok(())
        }
    }

    /// What `primitive` offers, or `Unsupported`.
    pub(crate) fn support(&self, primitive: Primitive) -> Result<Support> {
        self.caps.of(primitive).ok_or_else(|| {
            Error::unsupported(format!(
                "the {} backend has no {}",
                self.kind,
                primitive.describe()
            ))
        })
    }

    /// `Ok` when the backend keeps a semaphore's size with it, else `Unsupported`.
    pub(crate) fn semaphore_size(&self) -> Result<()> {
        if self.caps.semaphore_size {
            Ok(())
        } else {
            Err(Error::unsupported(format!(
                "the {} backend keeps no semaphore size",
                self.kind
            )))
        }
    }

    /// Resolves and checks `opts` for one acquire of `primitive`.
    fn request(&self, primitive: Primitive, opts: &AcquireOptions) -> Result<Request> {
        let support = self.support(primitive)?;
        if opts.fair && !support.fair {
            return Err(Error::unsupported(format!(
                "the {} backend's {} has no fair (FIFO) mode",
                self.kind,
                primitive.describe()
            )));
        }
        let req = Request::new(opts, self.default_lease);
        if let Lease::Fixed(_) = req.lease() {
            if !support.fixed_lease {
                return Err(Error::unsupported(format!(
                    "the {} backend's {} has no fixed leases",
                    self.kind,
                    primitive.describe()
                )));
            }
        }
        check_asked_lease(req.lease().duration())?;
        Ok(req)
    }

    /// One acquire of `primitive` named `name`, traced, through `attempt` (the backend's
    /// protocol). A guard that is already lost when the backend returns it is released and
    /// refused, as is one acquired while the handle was being closed.
    pub(crate) async fn acquire<F, Fut>(
        &self,
        primitive: Primitive,
        name: &Arc<str>,
        opts: &AcquireOptions,
        permits: u32,
        attempt: F,
    ) -> Result<Option<Arc<Ownership>>>
    where
        F: FnOnce(Request) -> Fut,
        Fut: Future<Output = Result<Option<GuardParts>>>,
    {
        let mut in_flight = self.registry.enter()?;
        let req = self.request(primitive, opts)?;
        let span = tracing::debug_span!(
            "lockkit.acquire",
            backend = self.kind.as_str(),
            primitive = primitive.as_str(),
            lock = %name,
            wait = ?opts.wait,
            lease = ?req.lease(),
            fair = req.fair(),
            token = tracing::field::Empty,
            outcome = tracing::field::Empty,
            waited_ms = tracing::field::Empty,
        );
        let id = Arc::new(Identity::new(self.kind, primitive, name.clone()));
        let waiting = Waiting::start(&id);
        let started = Instant::now();
        let attempt = attempt(req).instrument(span.clone());
        let result = bounded(&req, &mut in_flight, attempt, None).await;
        span.record("waited_ms", started.elapsed().as_millis() as u64);
        let outcome = match result {
            Ok(Some(parts)) => self
                .registry
                .adopt(&self.backend, id.clone(), primitive, parts, permits)
                .map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        let result = match &outcome {
            Ok(Some(own)) => {
                span.record("token", own.token.0);
                Outcome::Acquired
            }
            Ok(None) => Outcome::TimedOut,
            Err(e) => {
                tracing::debug!(
                    parent: &span,
                    backend = id.backend,
                    primitive = id.primitive,
                    lock = &*id.lock,
                    error = %e,
                    "lockkit: acquire failed"
                );
                Outcome::Error
            }
        };
        span.record("outcome", result.as_str());
        waiting.finish(result, started.elapsed());
        drop(in_flight);
        outcome
    }

    /// One atomic take of every member of a multi-lock through `take` (the backend's
    /// [`take_all`](Backend::take_all)), traced: the ownerships, in the order of `members` (each
    /// one's primitive and name). Options are checked for every member's primitive; the step
    /// is kept within the wait budget as an acquire is (past it, the set counts as busy). A
    /// member the registry refuses (lost already, or the handle closing) fails the take, and
    /// the members adopted are released in the background. A busy set that may not wait counts
    /// as a timed-out acquire of each member (one that may wait goes on member by member).
    pub(crate) async fn acquire_all<F, Fut>(
        &self,
        members: &[(Primitive, Arc<str>)],
        opts: &AcquireOptions,
        take: F,
    ) -> Result<Taken<Vec<Arc<Ownership>>>>
    where
        F: FnOnce(Request) -> Fut,
        Fut: Future<Output = Result<Taken<Vec<GuardParts>>>>,
    {
        let mut in_flight = self.registry.enter()?;
        let mut checked = None;
        for (primitive, _) in members {
            checked = Some(self.request(*primitive, opts)?);
        }
        let Some(req) = checked else {
            return Ok(Taken::NotHere);
        };
        let span = tracing::debug_span!(
            "lockkit.acquire_all",
            backend = self.kind.as_str(),
            members = members.len(),
            lease = ?req.lease(),
            outcome = tracing::field::Empty,
        );
        let ids: Vec<Arc<Identity>> = members
            .iter()
            .map(|(p, name)| Arc::new(Identity::new(self.kind, *p, name.clone())))
            .collect();
        let started = Instant::now();
        let attempt = take(req).instrument(span.clone());
        let result = bounded(&req, &mut in_flight, attempt, Taken::Busy).await;
        let took = started.elapsed();
        let parts = match result {
            Ok(Taken::All(parts)) => parts,
            Ok(Taken::Busy) => {
                span.record("outcome", "busy");
                if !req.waits() {
                    for id in &ids {
                        Waiting::start(id).finish(Outcome::TimedOut, took);
                    }
                }
                return Ok(Taken::Busy);
            }
            Ok(Taken::NotHere) => return Ok(Taken::NotHere),
            Err(e) => {
                span.record("outcome", Outcome::Error.as_str());
                return Err(e);
            }
        };
        let counted = parts.len() == members.len();
        let mut owned = Vec::with_capacity(parts.len());
        let mut refused = None;
        // Every part is adopted, so that whatever is not handed on is released.
        for (i, parts) in parts.into_iter().enumerate() {
            let (primitive, id) = (
                members[i.min(members.len() - 1)].0,
                &ids[i.min(ids.len() - 1)],
            );
            let waiting = Waiting::start(id);
            match self
                .registry
                .adopt(&self.backend, id.clone(), primitive, parts, 1)
            {
                Ok(own) => {
                    waiting.finish(Outcome::Acquired, took);
                    owned.push(own);
                }
                Err(e) => {
                    waiting.finish(Outcome::Error, took);
                    refused.get_or_insert(e);
                }
            }
        }
        drop(in_flight);
        if !counted {
            refused = Some(Error::contract(
                "an atomic take answered for another number of members",
            ));
        }
        if let Some(e) = refused {
            span.record("outcome", Outcome::Error.as_str());
            // Their only holds: dropping them releases them in the background.
            drop(owned.into_iter().map(GuardCore::new).collect::<Vec<_>>());
            return Err(e);
        }
        span.record("outcome", Outcome::Acquired.as_str());
        Ok(Taken::All(owned))
    }

    /// Closes the handle: acquires under way stop (`Closed`), later acquires fail with `Closed`,
    /// every live guard turns Lost and is
    /// released on the backend (so the lock is free for others now, handed to the next waiter
    /// where the backend hands over), then the backend gives its sessions and leases back.
    /// The first error is reported, after everything was tried.
    pub(crate) async fn close(&self) -> Result<()> {
        let mut releases = tokio::task::JoinSet::new();
        for own in self.registry.close().await {
            own.state.mark_lost(LostReason::Closed);
            releases.spawn(own.release_on_backend());
        }
        let mut first_error = None;
        while let Some(done) = releases.join_next().await {
            match done {
                Ok(Err(e)) if e.kind() != ErrorKind::LockLost => {
                    first_error.get_or_insert(e);
                }
                _ => {}
            }
        }
        // Cleanup still being retried (a delete the server did not take yet): give it a lease,
        // after which the server ends what it was for anyway.
        let left = self.backend.reaper().drain(self.default_lease).await;
        if left > 0 {
            first_error.get_or_insert(Error::new(
                ErrorKind::Timeout,
                format!("{left} cleanups were still being retried when close() gave up waiting"),
            ));
        }
        let closed = self.backend.close().await;
        match first_error {
            Some(e) => Err(e),
            None => closed,
        }
    }
}

/// Runs `attempt` within `req`'s wait budget (plus the grace): the budget is kept whatever the
/// server does, so an attempt still under way (a round trip, or a cleanup, to a server that does
/// not answer) is dropped and answers `timed_out`, and its cleanup goes on in the backend's
/// reaper (every backend's acquire is cancel safe); the grace lets a healthy server's cleanup
/// finish in line. `close()` ends an attempt under way the same way (its cleanup goes to the
/// reaper, which `close()` drains next).
async fn bounded<T>(
    req: &Request,
    in_flight: &mut InFlight,
    attempt: impl Future<Output = Result<T>>,
    timed_out: T,
) -> Result<T> {
    let kept = async {
        match req.deadline() {
            Some(at) if req.waits() => tokio::time::timeout_at(at + BUDGET_GRACE, attempt)
                .await
                .unwrap_or(Ok(timed_out)),
            _ => attempt.await,
        }
    };
    tokio::select! {
        r = kept => r,
        () = in_flight.closed() => Err(Error::closed()),
    }
}

#[cfg(test)]
mod tests {
    //! The kernel's own checks, on a backend whose acquire answers with a guard that is lost
    //! already (as a backend can when its session lapsed while it waited).
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use crate::spi::{Backend, GuardParts, Held, LeaseClock, RawMutex, Reaper, Request, StateCell};
    use crate::{
        async_trait, BackendKind, Backoff, Capabilities, ErrorKind, FencingToken, Locks,
        LostReason, Result, Support,
    };

    #[derive(Debug, Default)]
    struct LateBackend {
        releases: Arc<AtomicU32>,
    }

    #[derive(Debug)]
    struct LateMutex {
        releases: Arc<AtomicU32>,
    }

    #[derive(Debug)]
    struct Counted(Arc<AtomicU32>);

    #[async_trait]
    impl Held for Counted {
        async fn release(&self) -> Result<()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    #[async_trait]
    impl Backend for LateBackend {
        fn kind(&self) -> BackendKind {
            BackendKind::MEMORY
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::new(Support::basic())
        }
        fn default_lease(&self) -> Duration {
            Duration::from_secs(30)
        }
        fn reaper(&self) -> Reaper {
            Reaper::new(Backoff::new(
                Duration::from_millis(1),
                Duration::from_millis(10),
            ))
        }
        fn mutex(&self, _name: &str) -> Result<Box<dyn RawMutex>> {
            Ok(Box::new(LateMutex {
                releases: self.releases.clone(),
            }))
        }
        async fn close(&self) -> Result<()> {
            Ok(())
        }
    }

    #[async_trait]
    impl RawMutex for LateMutex {
        async fn acquire(&self, req: &Request) -> Result<Option<GuardParts>> {
            let state = StateCell::new(LeaseClock::new(LostReason::SessionExpired));
            state.mark_lost(LostReason::SessionExpired);
            let held = Box::new(Counted(self.releases.clone()));
            Ok(Some(GuardParts::new(
                FencingToken(1),
                req.lease(),
                state,
                held,
            )))
        }
        async fn is_locked(&self) -> Result<bool> {
            Ok(false)
        }
        async fn force_unlock(&self) -> Result<bool> {
            Ok(false)
        }
    }

    #[tokio::test]
    async fn an_acquire_that_returns_a_lost_guard_fails_and_releases_it() {
        let backend = LateBackend::default();
        let releases = backend.releases.clone();
        let locks = Locks::new(backend);
        let err = locks.mutex("late").unwrap().lock().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::LockLost, "{err}");
        for _ in 0..100 {
            if releases.load(Ordering::SeqCst) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the refused ownership was never released on the backend");
    }

    /// A backend whose extends the "server" applies when they are sent, with the 30 s one
    /// answered slowly: without one extend at a time, the slow answer would land last and
    /// leave the guard on 30 s while the server applied 2 s last.
    #[derive(Debug, Default)]
    struct SlowExtends {
        server_deadline: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
    }

    #[derive(Debug)]
    struct SlowExtendHeld(Arc<std::sync::Mutex<Option<tokio::time::Instant>>>);

    #[async_trait]
    impl Held for SlowExtendHeld {
        async fn release(&self) -> Result<()> {
            Ok(())
        }
        async fn extend(&self, lease: Duration) -> Result<()> {
            *self.0.lock().unwrap() = Some(tokio::time::Instant::now() + lease);
            if lease > Duration::from_secs(10) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(())
        }
    }

    #[async_trait]
    impl Backend for SlowExtends {
        fn kind(&self) -> BackendKind {
            BackendKind::MEMORY
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::new(Support::all())
        }
        fn default_lease(&self) -> Duration {
            Duration::from_secs(30)
        }
        fn reaper(&self) -> Reaper {
            Reaper::new(Backoff::new(
                Duration::from_millis(1),
                Duration::from_millis(10),
            ))
        }
        fn mutex(&self, _name: &str) -> Result<Box<dyn RawMutex>> {
            Ok(Box::new(SlowExtendMutex(self.server_deadline.clone())))
        }
        async fn close(&self) -> Result<()> {
            Ok(())
        }
    }

    #[derive(Debug)]
    struct SlowExtendMutex(Arc<std::sync::Mutex<Option<tokio::time::Instant>>>);

    #[async_trait]
    impl RawMutex for SlowExtendMutex {
        async fn acquire(&self, req: &Request) -> Result<Option<GuardParts>> {
            let clock = LeaseClock::starting(tokio::time::Instant::now(), req.lease().duration());
            Ok(Some(GuardParts::new(
                FencingToken(1),
                req.lease(),
                StateCell::new(clock),
                Box::new(SlowExtendHeld(self.0.clone())),
            )))
        }
        async fn is_locked(&self) -> Result<bool> {
            Ok(true)
        }
        async fn force_unlock(&self) -> Result<bool> {
            Ok(false)
        }
    }

    #[tokio::test]
    async fn concurrent_extends_leave_the_deadline_the_server_applied_last() {
        let backend = SlowExtends::default();
        let server = backend.server_deadline.clone();
        let locks = Locks::new(backend);
        let g = locks
            .mutex("extends")
            .unwrap()
            .acquire(&crate::AcquireOptions::new().fixed_lease(Duration::from_secs(10)))
            .await
            .unwrap()
            .unwrap();
        let (slow, fast) = tokio::join!(
            g.extend(Duration::from_secs(30)),
            g.extend(Duration::from_secs(2))
        );
        slow.unwrap();
        fast.unwrap();
        let server_left = server
            .lock()
            .unwrap()
            .unwrap()
            .saturating_duration_since(tokio::time::Instant::now());
        let guard_left = g.remaining().unwrap();
        assert!(
            guard_left <= server_left,
            "the guard has {guard_left:?} left, the server {server_left:?}"
        );
    }

    /// An acquire future that was polled and then kept, unpolled, does not make `close()`
    /// wait for it; polled again, it is refused.
    #[tokio::test]
    async fn close_does_not_wait_for_an_acquire_nobody_polls() {
        let locks = crate::mem::connect(&crate::LockConfig::new("mem://close-unpolled"))
            .await
            .unwrap();
        let m = locks.mutex("busy").unwrap();
        let held = m.lock().await.unwrap();
        let waiting = m.lock();
        tokio::pin!(waiting);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut waiting)
                .await
                .is_err(),
            "a busy lock was taken"
        );
        tokio::time::timeout(Duration::from_secs(5), locks.close())
            .await
            .expect("close() waited for an acquire nobody polls")
            .unwrap();
        assert_eq!(waiting.await.unwrap_err().kind(), ErrorKind::Closed);
        drop(held);
    }
}
