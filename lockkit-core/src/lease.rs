//! The lease lifecycle's shared parts: [`Guards`], the live guards of one lease source that turn
//! Suspect, Held or Lost together; [`SharedLease`], one lease many guards share, kept alive by
//! the core's keep-alive loop over a backend's [`KeepAlive`] round trip; and [`SessionPool`],
//! the sessions (or session leases) of one handle pooled per lease length.
//!
//! A lease source is whatever keeps a backend's ownerships alive: an etcd session lease, a
//! ZooKeeper session. Its backend supplies grant, keep-alive and revoke; what follows from their
//! outcomes for the guards is decided here, once.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::clock::LeaseClock;
use crate::error::{Error, Result};
use crate::reason::LostReason;
use crate::state::StateCell;

/// The live guards of one lease source, each with what its backend keeps about it (`T`).
pub struct Guards<T = ()> {
    inner: Mutex<Registry<T>>,
}

struct Registry<T> {
    next: u64,
    live: HashMap<u64, (StateCell, T)>,
}

impl<T> Default for Guards<T> {
    fn default() -> Self {
        Guards {
            inner: Mutex::new(Registry {
                next: 0,
                live: HashMap::new(),
            }),
        }
    }
}

impl<T> fmt::Debug for Guards<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guards")
            .field("live", &self.lock().live.len())
            .finish()
    }
}

impl<T> Guards<T> {
    fn lock(&self) -> MutexGuard<'_, Registry<T>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tracks a guard's state; returns the id to [`untrack`](Self::untrack) it with.
    pub fn track(&self, state: &StateCell, extra: T) -> u64 {
        let mut r = self.lock();
        r.next += 1;
        let id = r.next;
        r.live.insert(id, (state.clone(), extra));
        id
    }

    /// Forgets the guards that are no longer live (for a source that never untracks).
    pub fn prune(&self) {
        self.lock().live.retain(|_, (s, _)| s.get().is_live());
    }

    /// Stops tracking a guard (it was released); what was kept about it.
    pub fn untrack(&self, id: u64) -> Option<T> {
        self.lock().live.remove(&id).map(|(_, extra)| extra)
    }

    /// The source may be gone (a keep-alive failed, the connection dropped): the guards it
    /// keeps that `of` selects turn Suspect.
    pub fn suspect(&self, of: impl Fn(&T) -> bool) {
        self.each(of, |s| {
            s.mark_suspect();
        });
    }

    /// The source is known alive again: its Suspect guards that `of` selects turn Held.
    pub fn held(&self, of: impl Fn(&T) -> bool) {
        self.each(of, |s| {
            s.mark_held();
        });
    }

    /// The source is gone: the guards that `of` selects turn Lost for `reason`.
    pub fn lost(&self, reason: LostReason, of: impl Fn(&T) -> bool) {
        self.each(of, |s| {
            s.mark_lost(reason);
        });
    }

    /// Every guard still tracked, no longer tracked (the source is closing).
    pub fn take_all(&self) -> Vec<(StateCell, T)> {
        self.lock().live.drain().map(|(_, v)| v).collect()
    }

    fn each(&self, of: impl Fn(&T) -> bool, f: impl Fn(&StateCell)) {
        for (s, extra) in self.lock().live.values() {
            if of(extra) {
                f(s);
            }
        }
    }
}

/// Every guard, whatever the backend keeps about it.
fn every<T>(_: &T) -> bool {
    true
}

/// A backend's keep-alive round trip for one lease, driven by [`SharedLease`].
#[async_trait]
pub trait KeepAlive: Send + 'static {
    /// Renews the lease once: the length the server granted, or `None` when the server says
    /// the lease is gone.
    async fn renew(&mut self) -> Result<Option<Duration>>;

    /// The last round trip failed or did not answer in time: the next one should not use the
    /// same connection or endpoint.
    fn failed(&mut self) {}

    /// Revokes the lease once its deadline passed without a renewal, so that what is attached
    /// to it stops blocking others as soon as the server is back (best effort).
    async fn revoke(&mut self);

    /// The longest one request may take.
    fn request_timeout(&self) -> Duration;
}

/// One lease that many guards share (a session lease), renewed every third of its length.
///
/// Its [`LeaseClock`] is every guard's deadline: the instant before the last successful renewal
/// (or the grant) was sent plus the length the server granted, less the core's margin, so a
/// guard reads Lost in time even if the keep-alive task is late. A failed renewal makes its
/// guards Suspect and the next one comes after a backoff pause; a success makes them Held again;
/// no success before the deadline, or a server that says the lease is gone, makes every guard
/// Lost and the lease dead (its backend then grants a new one for new acquires).
pub struct SharedLease {
    backend: &'static str,
    id: String,
    clock: Arc<LeaseClock>,
    alive: AtomicBool,
    guards: Guards,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for SharedLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedLease")
            .field("backend", &self.backend)
            .field("id", &self.id)
            .field("alive", &self.alive.load(Ordering::Relaxed))
            .finish()
    }
}

impl SharedLease {
    /// A lease of `length` granted by a request sent at `sent`, kept alive from now on by
    /// `keeper`. `backend` and `id` name it in traces and metrics.
    pub fn start(
        backend: &'static str,
        id: String,
        length: Duration,
        sent: Instant,
        keeper: impl KeepAlive,
    ) -> Arc<SharedLease> {
        let clock = LeaseClock::new(LostReason::SessionExpired);
        clock.renewed(sent, length);
        let lease = Arc::new(SharedLease {
            backend,
            id,
            clock,
            alive: AtomicBool::new(true),
            guards: Guards::default(),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(keep_alive(
            Arc::downgrade(&lease),
            keeper,
            length,
            sent + length,
        ));
        *lease.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        lease
    }

    /// The lease's deadline, shared by its guards.
    pub fn clock(&self) -> &Arc<LeaseClock> {
        &self.clock
    }

    /// Whether the lease is still believed alive: never once its guards would read Lost (its
    /// deadline, a margin before the server's, has passed), so a new acquire is never handed a
    /// lease in its last moments.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire) && !self.clock.has_passed(Instant::now())
    }

    /// Tracks a guard on this lease: it turns Lost with the lease (at once if the lease is no
    /// longer alive).
    pub fn track(&self, cell: &StateCell) {
        self.guards.prune();
        self.guards.track(cell, ());
        if !self.is_alive() {
            cell.mark_lost(LostReason::SessionExpired);
        }
    }

    /// Ends the lease here: every guard turns Lost, the keep-alive stops. (Revoking it on the
    /// server is the backend's.)
    pub fn retire(&self, why: &str) {
        self.mark_dead(why);
        self.stop();
    }

    fn stop(&self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            t.abort();
        }
    }

    fn mark_dead(&self, why: &str) {
        if self.alive.swap(false, Ordering::AcqRel) {
            tracing::warn!(
                backend = self.backend,
                lease = %self.id,
                why,
                "lockkit: session lost"
            );
        }
        self.guards.lost(LostReason::SessionExpired, every);
    }
}

impl Drop for SharedLease {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn keep_alive(
    lease: Weak<SharedLease>,
    mut keeper: impl KeepAlive,
    length: Duration,
    mut deadline: Instant,
) {
    let period = (length / 3).max(Duration::from_millis(100));
    // After a failure, try again soon (on the next connection), jittered so that the clients
    // of a failed server do not all come back at once.
    let mut retry = Backoff::SESSION
        .capped((period / 2).max(Duration::from_millis(200)))
        .start();
    let mut next = Instant::now() + period;
    loop {
        tokio::time::sleep_until(next).await;
        let Some(l) = lease.upgrade() else { return };
        // The flag, not `is_alive()`: past the guards' deadline (a margin before the server's)
        // this task still has to mark the lease dead and revoke it below.
        if !l.alive.load(Ordering::Acquire) {
            return;
        }
        let sent = Instant::now();
        if sent >= deadline {
            l.mark_dead("keepalive did not succeed before the lease deadline");
            drop(l);
            // What is attached to it may outlive our deadline on the server (until the
            // server's own expiry): revoke it if the server is back.
            let limit = keeper.request_timeout();
            let _ = tokio::time::timeout(limit, keeper.revoke()).await;
            return;
        }
        // A round trip that hangs is given up in time for the next one before the deadline.
        let budget = (deadline - sent)
            .min(keeper.request_timeout())
            .min(period.max(Duration::from_millis(300)));
        let outcome = tokio::time::timeout(budget, keeper.renew()).await;
        crate::telemetry::renewal(
            l.backend,
            matches!(outcome, Ok(Ok(Some(_)))),
            sent.elapsed(),
        );
        match outcome {
            Ok(Ok(Some(granted))) => {
                deadline = sent + granted;
                l.clock.renewed(sent, granted);
                // Suspect -> Held; every other state stays.
                l.guards.held(every);
                retry.reset();
                next = sent + period;
            }
            Ok(Ok(None)) => {
                l.mark_dead("the server says the lease is gone");
                return;
            }
            failed => {
                if let Ok(Err(e)) = failed {
                    tracing::debug!(backend = l.backend, error = %e, "lockkit: keepalive failed");
                }
                keeper.failed();
                l.guards.suspect(every);
                next = Instant::now() + retry.next_pause();
            }
        }
    }
}

/// A session a [`SessionPool`] keeps.
pub trait Pooled: Send + Sync {
    /// Whether it may still be handed to a new acquire (a session past its deadline is not).
    fn is_alive(&self) -> bool {
        true
    }
}

/// One handle's sessions, one per lease length asked for, so that a lock's lease is always the
/// one asked for (a holder that dies frees the lock after its own lease), and at most `max` of
/// them. A session that is no longer alive is replaced on the next acquire.
pub struct SessionPool<S> {
    what: &'static str,
    max: usize,
    sessions: tokio::sync::Mutex<HashMap<Duration, Arc<S>>>,
}

impl<S> fmt::Debug for SessionPool<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionPool")
            .field("what", &self.what)
            .field("max", &self.max)
            .finish()
    }
}

/// What [`SessionPool::get`] found.
pub struct Got<S> {
    /// The session for the lease length.
    pub session: Arc<S>,
    /// Whether it replaced one of that length that was no longer alive.
    pub replaced: bool,
}

impl<S: Pooled> SessionPool<S> {
    /// An empty pool of at most `max` sessions; `what` names them in errors ("session
    /// leases", "ZooKeeper sessions").
    pub fn new(what: &'static str, max: usize) -> Self {
        SessionPool {
            what,
            max,
            sessions: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The live session of `lease`, opened with `open` when there is none. One acquire at a
    /// time opens sessions, so two never open one of the same length. More than `max` lease
    /// lengths is an `InvalidArgument`.
    pub async fn get<F, Fut>(&self, lease: Duration, open: F) -> Result<Got<S>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Arc<S>>>,
    {
        let mut sessions = self.sessions.lock().await;
        let replaced = match sessions.get(&lease) {
            Some(s) if s.is_alive() => {
                return Ok(Got {
                    session: s.clone(),
                    replaced: false,
                })
            }
            Some(_) => true,
            None => false,
        };
        sessions.retain(|_, s| s.is_alive());
        if sessions.len() >= self.max {
            return Err(Error::invalid(format!(
                "this handle keeps {} {} already (one per lease length asked for); set the \
                 lease on the handle (LockConfig::lease) instead",
                self.max, self.what
            )));
        }
        let session = open().await?;
        sessions.insert(lease, session.clone());
        Ok(Got { session, replaced })
    }

    /// Forgets `dead` (its backend found it gone).
    pub async fn forget(&self, dead: &Arc<S>) {
        self.sessions
            .lock()
            .await
            .retain(|_, s| !Arc::ptr_eq(s, dead));
    }

    /// Every session now.
    pub async fn all(&self) -> Vec<Arc<S>> {
        self.sessions.lock().await.values().cloned().collect()
    }

    /// Every session, no longer pooled (the handle is closing).
    pub async fn drain(&self) -> Vec<Arc<S>> {
        self.sessions.lock().await.drain().map(|(_, s)| s).collect()
    }

    /// [`drain`](Self::drain) without waiting, for `Drop`: `None` when an acquire holds the
    /// pool right now.
    pub fn try_drain(&self) -> Option<Vec<Arc<S>>> {
        let mut sessions = self.sessions.try_lock().ok()?;
        Some(sessions.drain().map(|(_, s)| s).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::clock::LeaseClock;
    use crate::state::LockState;

    fn cell() -> StateCell {
        StateCell::new(LeaseClock::new(LostReason::SessionExpired))
    }

    #[test]
    fn guards_follow_their_source_and_only_the_selected_ones() {
        let guards = Guards::<u8>::default();
        let (a, b) = (cell(), cell());
        guards.track(&a, 1);
        let id_b = guards.track(&b, 2);
        guards.suspect(every);
        assert_eq!(a.get(), LockState::Suspect);
        guards.held(|s| *s == 1);
        assert_eq!(a.get(), LockState::Held);
        assert_eq!(b.get(), LockState::Suspect);
        assert_eq!(guards.untrack(id_b), Some(2));
        guards.lost(LostReason::SessionExpired, every);
        assert!(!a.get().is_live());
        assert!(b.get().is_live(), "an untracked guard is left alone");
        guards.track(&cell(), 3);
        guards.prune();
        assert_eq!(guards.take_all().len(), 1, "the lost guard is forgotten");
    }

    struct S(AtomicBool);
    impl Pooled for S {
        fn is_alive(&self) -> bool {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[tokio::test]
    async fn one_session_per_lease_length_replaced_once_dead_and_capped() {
        let pool = SessionPool::<S>::new("sessions", 2);
        let open = || async { Ok(Arc::new(S(AtomicBool::new(true)))) };
        let one = pool.get(Duration::from_secs(1), open).await.unwrap();
        let again = pool.get(Duration::from_secs(1), open).await.unwrap();
        assert!(Arc::ptr_eq(&one.session, &again.session) && !again.replaced);
        one.session.0.store(false, Ordering::Relaxed);
        let fresh = pool.get(Duration::from_secs(1), open).await.unwrap();
        assert!(fresh.replaced && !Arc::ptr_eq(&one.session, &fresh.session));
        pool.get(Duration::from_secs(2), open).await.unwrap();
        let e = pool.get(Duration::from_secs(3), open).await.err().unwrap();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        pool.forget(&fresh.session).await;
        assert_eq!(pool.all().await.len(), 1);
    }

    /// Renewals answered from a script, each counted.
    struct Scripted {
        answers: std::collections::VecDeque<Result<Option<Duration>>>,
        revoked: Arc<AtomicBool>,
    }

    #[async_trait]
    impl KeepAlive for Scripted {
        async fn renew(&mut self) -> Result<Option<Duration>> {
            self.answers
                .pop_front()
                .unwrap_or_else(|| Err(Error::new(crate::ErrorKind::Connection, "away")))
        }
        async fn revoke(&mut self) {
            self.revoked.store(true, Ordering::Relaxed);
        }
        fn request_timeout(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_shared_lease_turns_its_guards_suspect_held_and_lost_with_its_renewals() {
        let revoked = Arc::new(AtomicBool::new(false));
        let away = || Err(Error::new(crate::ErrorKind::Connection, "away"));
        let keeper = Scripted {
            answers: vec![away(), Ok(Some(Duration::from_secs(3)))].into(),
            revoked: revoked.clone(),
        };
        let lease = SharedLease::start(
            "test",
            "1".into(),
            Duration::from_secs(3),
            Instant::now(),
            keeper,
        );
        let guard = StateCell::new(lease.clock().clone());
        lease.track(&guard);
        // The first renewal (at 1 s) fails: Suspect until the retry, 50-100 ms later.
        tokio::time::sleep(Duration::from_millis(1020)).await;
        assert_eq!(guard.get(), LockState::Suspect);
        // The retry, a backoff pause later, succeeds: Held again, the deadline moved.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(guard.get(), LockState::Held);
        assert!(lease.is_alive());
        // Every renewal fails from now on: Lost by the deadline, and the lease revoked.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(!guard.get().is_live());
        assert!(!lease.is_alive());
        assert!(
            revoked.load(Ordering::Relaxed),
            "the lease is revoked once its deadline passed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_the_server_says_is_gone_loses_its_guards_at_once() {
        let keeper = Scripted {
            answers: vec![Ok(None)].into(),
            revoked: Arc::new(AtomicBool::new(false)),
        };
        let lease = SharedLease::start(
            "test",
            "2".into(),
            Duration::from_secs(30),
            Instant::now(),
            keeper,
        );
        let guard = StateCell::new(lease.clock().clone());
        lease.track(&guard);
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(!guard.get().is_live());
        assert!(!lease.is_alive());
        let late = StateCell::new(lease.clock().clone());
        lease.track(&late);
        assert!(
            !late.get().is_live(),
            "a guard tracked on a dead lease is lost at once"
        );
    }
}
