//! The lease lifecycle's shared parts: [`Guards`], the live guards of one lease source that turn
//! Suspect, Held or Lost together, and [`SessionPool`], the sessions (or session leases) of one
//! handle pooled per lease length.
//!
//! A lease source is whatever keeps a backend's ownerships alive: an etcd session lease, a
//! ZooKeeper session. Its backend supplies grant, keep-alive and revoke; what follows from their
//! outcomes for the guards is decided here, once.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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
pub fn every<T>(_: &T) -> bool {
    true
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
}
