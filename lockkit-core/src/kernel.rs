//! The safety kernel behind one [`Locks`](crate::Locks) handle: what every backend needs done
//! the same way, done once.
//!
//! It resolves and checks options (the default lease, capabilities, lease bounds), takes the
//! wait deadline once, traces every acquire with one fixed field set, refuses a guard that is
//! already lost, registers live ownerships so that `close()` turns every guard Lost, and keeps
//! the backend alive for as long as a handle or guard of it lives.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::capabilities::{Capabilities, Support};
use crate::error::{Error, Result};
use crate::inspect::Primitive;
use crate::kind::BackendKind;
use crate::options::{AcquireOptions, Lease};
use crate::ownership::Ownership;
use crate::settings::MIN_LEASE;
use crate::spi::{Backend, GuardParts, Request};
use crate::state::LostReason;

/// Refuses a lease below [`MIN_LEASE`] with `InvalidArgument`.
pub(crate) fn check_lease(lease: Duration) -> Result<()> {
    if lease < MIN_LEASE {
        return Err(Error::invalid(format!(
            "a lease of {lease:?} is too short (minimum {MIN_LEASE:?})"
        )));
    }
    Ok(())
}

/// The state one handle's primitives and guards share.
#[derive(Debug)]
pub(crate) struct Kernel {
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) kind: BackendKind,
    pub(crate) caps: Capabilities,
    pub(crate) default_lease: Duration,
    closed: AtomicBool,
    next_id: AtomicU64,
    /// Every ownership not yet dropped, for `close()`.
    live: Mutex<HashMap<u64, Weak<Ownership>>>,
}

impl Kernel {
    pub(crate) fn new(backend: Box<dyn Backend>) -> Arc<Kernel> {
        Arc::new(Kernel {
            kind: backend.kind(),
            caps: backend.capabilities(),
            default_lease: backend.default_lease(),
            backend,
            closed: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            live: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
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
        check_lease(req.lease().duration())?;
        Ok(req)
    }

    /// One acquire of `primitive` named `name`, traced, through `attempt` (the backend's
    /// protocol). A guard that is already lost when the backend returns it is released and
    /// refused, as is one acquired while the handle was being closed.
    pub(crate) async fn acquire<F, Fut>(
        self: &Arc<Self>,
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
        self.check_open()?;
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
        let started = Instant::now();
        let result = attempt(req).instrument(span.clone()).await;
        span.record("waited_ms", started.elapsed().as_millis() as u64);
        let outcome = match result {
            Ok(Some(parts)) => self.adopt(name, primitive, parts, permits).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        match &outcome {
            Ok(Some(own)) => {
                span.record("token", own.token.0);
                span.record("outcome", "acquired");
            }
            Ok(None) => {
                span.record("outcome", "timed_out");
            }
            Err(e) => {
                span.record("outcome", "error");
                tracing::debug!(parent: &span, error = %e, "lockkit: acquire failed");
            }
        }
        outcome
    }

    /// Turns a backend's fresh ownership into the core's, refusing one that is already lost or
    /// that arrived after `close()`.
    pub(crate) fn adopt(
        self: &Arc<Self>,
        name: &Arc<str>,
        primitive: Primitive,
        parts: GuardParts,
        permits: u32,
    ) -> Result<Arc<Ownership>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let own = Arc::new(Ownership::new(
            id,
            self.clone(),
            name.clone(),
            primitive,
            parts,
            permits,
        ));
        let refusal = if self.closed.load(Ordering::Acquire) {
            own.state.mark_lost(LostReason::Closed);
            Some(Error::closed())
        } else if !own.state.get().is_live() {
            Some(crate::ownership::lost_error(name, own.state.reason()))
        } else {
            None
        };
        if let Some(e) = refusal {
            // Give the backend its key or node back; the caller gets no guard.
            release_unwanted(own);
            return Err(e);
        }
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Arc::downgrade(&own));
        Ok(own)
    }

    pub(crate) fn forget(&self, id: u64) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// Closes the handle: later acquires fail with `Closed`, every live guard turns Lost and is
    /// released on the backend (so the lock is free for others now, handed to the next waiter
    /// where the backend hands over), then the backend gives its sessions and leases back.
    /// The first error is reported, after everything was tried.
    pub(crate) async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        let live: Vec<Arc<Ownership>> = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        let mut releases = tokio::task::JoinSet::new();
        for own in live {
            own.state.mark_lost(LostReason::Closed);
            releases.spawn(own.release_on_backend());
        }
        let mut first_error = None;
        while let Some(done) = releases.join_next().await {
            match done {
                Ok(Err(e)) if e.kind() != crate::ErrorKind::LockLost => {
                    first_error.get_or_insert(e);
                }
                _ => {}
            }
        }
        let closed = self.backend.close().await;
        match first_error {
            Some(e) => Err(e),
            None => closed,
        }
    }
}

/// Releases an ownership nobody will get a guard for, in the background: dropping its only
/// hold does.
fn release_unwanted(own: Arc<Ownership>) {
    drop(crate::ownership::GuardCore::new(own));
}
