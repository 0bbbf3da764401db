//! One held ownership as the core keeps it: the backend's [`Held`], the hold count, the state,
//! and the release on the backend (awaited, or finished in the background).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::inspect::Primitive;
use crate::kind::BackendKind;
use crate::options::{check_asked_lease, Lease};
use crate::reaper::Reaper;
use crate::reason::LostReason;
use crate::spi::{Backend, GuardParts, Held};
use crate::state::{LockState, StateCell};
use crate::telemetry::{self, Identity};

/// The ownerships of one handle that are not dropped yet, whether the handle was closed, and
/// the reaper that runs its background releases.
#[derive(Debug)]
pub(crate) struct Registry {
    closed: AtomicBool,
    /// Turns true with `closed`: acquires under way stop at once.
    closing: tokio::sync::watch::Sender<bool>,
    /// Acquires under way (see [`Registry::enter`]), which `close()` waits out.
    in_flight: AtomicUsize,
    settled: tokio::sync::Notify,
    next_id: AtomicU64,
    live: Mutex<HashMap<u64, Weak<Ownership>>>,
    reaper: Reaper,
}

/// How long `close()` waits for the acquires under way to stop.
const CLOSE_SETTLE: Duration = Duration::from_secs(1);

/// One acquire under way on a handle: `close()` ends it and waits for it to be gone, so that
/// whatever it took is either released by `close()` or handed to the reaper before `close()`
/// drains it.
#[derive(Debug)]
pub(crate) struct InFlight {
    registry: Arc<Registry>,
    closing: tokio::sync::watch::Receiver<bool>,
}

impl InFlight {
    /// Resolves once the handle is being closed.
    pub(crate) async fn closed(&mut self) {
        let _ = self.closing.wait_for(|closed| *closed).await;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.registry.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.registry.settled.notify_waiters();
        }
    }
}

impl Registry {
    pub(crate) fn new(reaper: Reaper) -> Registry {
        Registry {
            closed: AtomicBool::new(false),
            closing: tokio::sync::watch::Sender::new(false),
            in_flight: AtomicUsize::new(0),
            settled: tokio::sync::Notify::new(),
            next_id: AtomicU64::new(0),
            live: Mutex::new(HashMap::new()),
            reaper,
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Registers one acquire under way, or `Closed` if the handle is closed.
    pub(crate) fn enter(self: &Arc<Self>) -> Result<InFlight> {
        let _live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_closed() {
            return Err(Error::closed());
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Ok(InFlight {
            registry: self.clone(),
            closing: self.closing.subscribe(),
        })
    }

    /// Turns a backend's fresh ownership into the core's, refusing one that is already lost or
    /// that arrived after `close()` (the backend gets it back, the caller an error).
    pub(crate) fn adopt(
        self: &Arc<Self>,
        backend: &Arc<dyn Backend>,
        identity: Arc<Identity>,
        primitive: Primitive,
        parts: GuardParts,
        permits: u32,
    ) -> Result<Arc<Ownership>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let name = identity.lock.clone();
        parts.state.identify(identity.clone(), parts.token.0);
        telemetry::held(&identity);
        let own = Arc::new(Ownership {
            id,
            registry: self.clone(),
            backend: backend.clone(),
            kind: backend.kind(),
            name: name.clone(),
            identity,
            acquired_at: Instant::now(),
            primitive,
            token: parts.token,
            lease: Mutex::new(parts.lease),
            extending: tokio::sync::Mutex::new(()),
            state: parts.state,
            held: parts.held,
            permits,
            holds: AtomicU32::new(1),
            released: AtomicBool::new(false),
            expiry: Mutex::new(None),
        });
        // The closed check and the insert happen under the lock `close()` takes to flip the
        // flag and collect the live set, so an ownership is either refused here or released
        // by `close()`: never neither.
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let refusal = if self.is_closed() {
            own.state.mark_lost(LostReason::Closed);
            Some(Error::closed())
        } else if !own.state.get().is_live() {
            Some(lost_error(&name, own.state.reason()))
        } else {
            None
        };
        if let Some(e) = refusal {
            drop(live);
            // Dropping its only hold releases it on the backend, in the background.
            drop(GuardCore::new(own));
            return Err(e);
        }
        live.insert(id, Arc::downgrade(&own));
        drop(live);
        own.arm_expiry();
        Ok(own)
    }

    /// Marks the handle closed and returns every ownership still alive.
    ///
    /// Acquires under way are stopped first and waited out: each one either was adopted (and
    /// is returned here) or was refused or cancelled, its cleanup handed to the reaper.
    pub(crate) async fn close(&self) -> Vec<Arc<Ownership>> {
        {
            let _live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            self.closed.store(true, Ordering::Release);
        }
        self.closing.send_replace(true);
        // An acquire being polled stops at once. One whose future is kept but no longer polled
        // cannot be waited out: it is refused when it is next polled (the flag is set), and its
        // cleanup then goes to the reaper, which outlives this handle.
        let settled = async {
            loop {
                let settled = self.settled.notified();
                tokio::pin!(settled);
                // Registered before the count is read, so a last exit in between still wakes it.
                settled.as_mut().enable();
                if self.in_flight.load(Ordering::Acquire) == 0 {
                    break;
                }
                settled.await;
            }
        };
        let _ = tokio::time::timeout(CLOSE_SETTLE, settled).await;
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    fn forget(&self, id: u64) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

/// The shared body of every guard of one ownership (reentered guards share it).
#[derive(Debug)]
pub(crate) struct Ownership {
    id: u64,
    registry: Arc<Registry>,
    /// Kept alive for as long as a guard lives: only `close()` ends a backend early.
    backend: Arc<dyn Backend>,
    kind: BackendKind,
    pub(crate) name: Arc<str>,
    /// The lock, for events and metrics.
    identity: Arc<Identity>,
    /// When the core took the ownership over (for the hold duration).
    acquired_at: Instant,
    pub(crate) primitive: Primitive,
    pub(crate) token: FencingToken,
    lease: Mutex<Lease>,
    /// Held across one `extend`, so extends reach the server one after another.
    extending: tokio::sync::Mutex<()>,
    pub(crate) state: StateCell,
    held: Box<dyn Held>,
    pub(crate) permits: u32,
    pub(crate) holds: AtomicU32,
    /// Whether the backend release was started (by the last hold, a drop, `close()` or the end
    /// of a fixed lease): it runs once.
    released: AtomicBool,
    /// A fixed lease's end: the task that releases the ownership on the backend then.
    expiry: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Ownership {
    fn drop(&mut self) {
        self.registry.forget(self.id);
    }
}

impl Ownership {
    pub(crate) fn lease(&self) -> Lease {
        *self.lease.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_live(&self) -> Result<()> {
        if self.state.get().is_live() {
            Ok(())
        } else {
            Err(lost_error(&self.name, self.state.reason()))
        }
    }

    /// A fixed lease ends at the guard's deadline (which `extend` moves): the ownership is
    /// released on the backend then, the same release a guard's own would send (so a backend
    /// that hands locks over hands this one to its next waiter). The guard reads Lost already.
    fn arm_expiry(self: &Arc<Self>) {
        if self.lease().is_watchdog() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (me, clock) = (Arc::downgrade(self), self.state.clock().clone());
        // Spawned and stored under the lock, so the task (which takes its handle out first,
        // under the same lock) never finds the slot empty and is never aborted by its own
        // release.
        let mut slot = self.expiry.lock().unwrap_or_else(|e| e.into_inner());
        let task = rt.spawn(async move {
            clock.passed().await;
            let Some(own) = me.upgrade() else { return };
            // This task is the expiry: the release below must not abort it.
            own.expiry.lock().unwrap_or_else(|e| e.into_inner()).take();
            own.state.mark_lost(LostReason::LeaseExpired);
            let _ = own.release_on_backend().await;
        });
        *slot = Some(task.abort_handle());
    }

    /// The backend ownership ended without a release (it became another one): nothing may
    /// release it any more.
    fn retire(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            telemetry::ended(&self.identity, self.acquired_at.elapsed());
        }
        if let Some(expiry) = self.expiry.lock().unwrap_or_else(|e| e.into_inner()).take() {
            expiry.abort();
        }
    }

    /// Releases on the backend (the last hold is gone), traced; Lost if the backend found the
    /// lock gone, Released either way.
    pub(crate) async fn release_on_backend(self: Arc<Self>) -> Result<()> {
        if self.released.swap(true, Ordering::AcqRel) {
            // `close()` or the lease's end released it already.
            return Err(lost_error(&self.name, self.state.reason()));
        }
        telemetry::ended(&self.identity, self.acquired_at.elapsed());
        if let Some(expiry) = self.expiry.lock().unwrap_or_else(|e| e.into_inner()).take() {
            expiry.abort();
        }
        let span = tracing::debug_span!(
            "lockkit.release",
            backend = self.kind.as_str(),
            primitive = self.primitive.as_str(),
            lock = %self.name,
            token = self.token.0,
            outcome = tracing::field::Empty,
        );
        let result = self.held.release().instrument(span.clone()).await;
        span.record(
            "outcome",
            match &result {
                Ok(()) => "released",
                Err(e) if e.kind() == ErrorKind::LockLost => "lost",
                Err(_) => "error",
            },
        );
        if matches!(&result, Err(e) if e.kind() == ErrorKind::LockLost) {
            // The release is how this holder learns that the lock was gone (say, after a pause
            // the backend had not reported yet): tell `lost()` too.
            self.state.mark_lost(LostReason::Deleted);
        }
        self.state.mark_released();
        if matches!(&result, Err(e) if e.kind() != ErrorKind::LockLost) {
            telemetry::release_failed(&self.identity);
        }
        result
    }
}

/// The error of an operation on a guard whose lock is gone.
pub(crate) fn lost_error(name: &str, reason: Option<LostReason>) -> Error {
    match reason {
        Some(r) => Error::new(
            ErrorKind::LockLost,
            format!("lock {name:?} is no longer held by this guard: {r}"),
        ),
        None => Error::lost(name),
    }
}

/// One hold of an ownership: what every guard type wraps.
#[derive(Debug)]
pub(crate) struct GuardCore {
    pub(crate) own: Arc<Ownership>,
    armed: bool,
}

impl GuardCore {
    pub(crate) fn new(own: Arc<Ownership>) -> Self {
        GuardCore { own, armed: true }
    }

    pub(crate) async fn release(mut self) -> Result<()> {
        self.armed = false;
        let own = self.own.clone();
        let was = own.state.get();
        if own.holds.fetch_sub(1, Ordering::AcqRel) > 1 {
            return if was.is_live() {
                Ok(())
            } else {
                Err(lost_error(&own.name, own.state.reason()))
            };
        }
        // If this future is dropped half-way, the rest of the release runs in the background.
        let result = Finish::new(&own.registry.reaper, own.clone().release_on_backend()).await;
        match result {
            Ok(()) if was == LockState::Lost => Err(lost_error(&own.name, own.state.reason())),
            other => other,
        }
    }

    pub(crate) async fn reenter(&self) -> Result<GuardCore> {
        self.own.check_live()?;
        self.own
            .held
            .reenter()
            .await
            .inspect_err(|e| self.note_lost(e))?;
        self.own.holds.fetch_add(1, Ordering::AcqRel);
        Ok(GuardCore::new(self.own.clone()))
    }

    pub(crate) async fn extend(&self, lease: Duration) -> Result<()> {
        let own = &self.own;
        if own.lease().is_watchdog() {
            return Err(Error::invalid(
                "this guard's lease is renewed by the watchdog; extend() is for fixed leases",
            ));
        }
        check_asked_lease(lease)?;
        // One extend at a time per ownership: the server applies them in the order they are
        // sent, so the deadline the guard keeps is the one the server applied last.
        let _turn = own.extending.lock().await;
        own.check_live()?;
        let clock = own.state.clock();
        let before = clock.deadline();
        let sent_at = Instant::now();
        // From the moment it is sent the server may apply it, whatever becomes of this call (an
        // error after the primary applied it, a lost answer, a dropped future): until it
        // settles, the guard keeps whichever deadline comes first.
        clock.maybe_renewed(sent_at, lease);
        let shortened = clock.deadline();
        if let Err(e) = own.held.extend(lease).await {
            self.note_lost(&e);
            // Refused before anything reached the server: the old deadline stands, unless
            // something else moved the deadline meanwhile.
            if matches!(
                e.kind(),
                ErrorKind::InvalidArgument | ErrorKind::Unsupported
            ) && clock.deadline() == shortened
            {
                clock.set_deadline(before);
            }
            return Err(e);
        }
        // The deadline follows the new lease, shorter or longer: the server counts it from no
        // earlier than this request.
        clock.renewed(sent_at, lease);
        *own.lease.lock().unwrap_or_else(|e| e.into_inner()) = Lease::Fixed(lease);
        // The old deadline may have passed while the extend was in flight: the expiry released
        // the lock then, and the extend cannot bring it back.
        own.check_live()
    }

    /// An elected leader's new value, only while it still leads.
    pub(crate) async fn proclaim(&self, value: &[u8]) -> Result<()> {
        self.own.check_live()?;
        if let Err(e) = self.own.held.proclaim(value).await {
            self.note_lost(&e);
            // Lost meanwhile (a session that ended while the request was retried): say so.
            self.own.check_live()?;
            return Err(e);
        }
        // Lost while the proclaim was under way: the value may not stand.
        self.own.check_live()
    }

    pub(crate) async fn downgrade(mut self) -> Result<GuardCore> {
        let own = self.own.clone();
        // A downgrade makes a new ownership: `close()` waits for it like for an acquire.
        let _in_flight = own.registry.enter()?;
        own.check_live()?;
        if own.holds.load(Ordering::Acquire) != 1 {
            return Err(Error::invalid(
                "downgrade needs the only hold of the write lock; release the reentered holds first",
            ));
        }
        let parts = own
            .held
            .downgrade()
            .await
            .inspect_err(|e| self.note_lost(e))?;
        // The write ownership became the read ownership: nothing left to release.
        self.armed = false;
        own.holds.store(0, Ordering::Release);
        own.retire();
        own.state.mark_released();
        let read =
            own.registry
                .adopt(&own.backend, own.identity.clone(), own.primitive, parts, 1)?;
        Ok(GuardCore::new(read))
    }

    fn note_lost(&self, e: &Error) {
        if e.kind() == ErrorKind::LockLost {
            self.own.state.mark_lost(LostReason::Deleted);
        }
    }
}

impl Drop for GuardCore {
    fn drop(&mut self) {
        if self.armed && self.own.holds.fetch_sub(1, Ordering::AcqRel) == 1 {
            let own = self.own.clone();
            own.state.mark_released();
            let reaper = own.registry.reaper.clone();
            let id = own.identity.clone();
            reaper.finish(async move {
                if let Err(e) = own.release_on_backend().await {
                    tracing::debug!(
                        backend = id.backend,
                        primitive = id.primitive,
                        lock = &*id.lock,
                        error = %e,
                        "lockkit: background release failed; the lease ends the lock"
                    );
                }
            });
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A future whose remaining work, if it is dropped before it finishes, goes to the reaper.
struct Finish<T: Send + 'static> {
    fut: Option<BoxFuture<T>>,
    reaper: Reaper,
}

impl<T: Send + 'static> Finish<T> {
    fn new(reaper: &Reaper, fut: impl Future<Output = T> + Send + 'static) -> Self {
        Finish {
            fut: Some(Box::pin(fut)),
            reaper: reaper.clone(),
        }
    }
}

impl<T: Send + 'static> Future for Finish<T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(fut) = self.fut.as_mut() else {
            return Poll::Pending;
        };
        let out = std::task::ready!(fut.as_mut().poll(cx));
        self.fut = None;
        Poll::Ready(out)
    }
}

impl<T: Send + 'static> Drop for Finish<T> {
    fn drop(&mut self) {
        if let Some(fut) = self.fut.take() {
            self.reaper.finish(async move {
                let _ = fut.await;
            });
        }
    }
}

/// The ownerships acquired through one lock handle, for `hold_count()` on the handle.
#[derive(Debug, Default)]
pub(crate) struct HoldRegistry {
    owned: Mutex<Vec<Weak<Ownership>>>,
}

impl HoldRegistry {
    pub(crate) fn track(&self, own: &Arc<Ownership>) {
        let mut owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        owned.retain(|w| w.strong_count() > 0);
        owned.push(Arc::downgrade(own));
    }

    pub(crate) fn hold_count(&self) -> u32 {
        let owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        owned
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|o| o.state.get().is_live())
            .map(|o| o.holds.load(Ordering::Acquire))
            .sum()
    }
}
