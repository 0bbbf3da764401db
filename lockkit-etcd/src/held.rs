//! A held key: release (owner-checked, etcd issue 22082), extend,
//! write-to-read downgrade.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::spi::{Attempt, GuardParts, Held, StateCell};
use lockkit_core::{Error, LostReason, Result};

use crate::inner::Inner;
use crate::ops::{
    delete_if_ours, key_lease, move_to_lease, reap_lease, reap_step, set_value_if_ours, KeyLease,
};
use crate::session::grant_exact;
use crate::watch::{NameWatch, Slot};

/// What a held guard shares with its background tasks.
#[derive(Debug)]
pub(crate) struct HeldShared {
    pub(crate) inner: Arc<Inner>,
    pub(crate) name: Arc<str>,
    pub(crate) nw: Arc<NameWatch>,
    pub(crate) key: Vec<u8>,
    pub(crate) rev: i64,
    pub(crate) lease: Mutex<KeyLease>,
    pub(crate) slot: Mutex<Option<Slot>>,
    pub(crate) state: StateCell,
    /// The lease the guard was acquired with, or the last `extend` set (reported by the guard,
    /// and by the read guard a downgrade makes).
    pub(crate) guard_lease: Mutex<lockkit_core::Lease>,
}

impl HeldShared {
    fn fixed_lease(&self) -> Option<i64> {
        match &*self.lease.lock().unwrap_or_else(|e| e.into_inner()) {
            KeyLease::Fixed(id) => Some(*id),
            KeyLease::Session(_) => None,
        }
    }

    fn lease_id(&self) -> i64 {
        self.lease.lock().unwrap_or_else(|e| e.into_inner()).id()
    }

    /// Deletes our key if it is still ours. A delete the server does not take now goes to the
    /// handle's reaper, which retries it until it succeeds or the key's lease is gone, so a
    /// failed unlock never leaves the lock held.
    async fn release(self: &Arc<Self>) -> Result<()> {
        self.nw.remove_holder(self.rev);
        match delete_if_ours(&self.inner, &self.key, self.rev).await {
            Ok(deleted) => {
                self.finish();
                if deleted {
                    Ok(())
                } else {
                    Err(Error::lost(&self.name))
                }
            }
            Err(e) => {
                self.reap();
                Err(e)
            }
        }
    }

    /// Retries the owner-checked delete in the reaper.
    fn reap(self: &Arc<Self>) {
        let me = self.clone();
        self.inner.reaper.retry("release a lock key", move || {
            let me = me.clone();
            async move {
                let work = delete_if_ours(&me.inner, &me.key, me.rev).await.map(drop);
                let step = reap_step(&me.inner, me.lease_id(), work).await;
                if !matches!(step, Attempt::Retry(_)) {
                    me.finish();
                }
                step
            }
        });
    }

    /// After the key is gone: hand a fixed lease's revoke to the reaper (nothing is on it any
    /// more), free the slot.
    fn finish(&self) {
        if let Some(id) = self.fixed_lease() {
            reap_lease(&self.inner, id);
        }
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// A held key, from the backend's side. A fixed lease's end is released by the core (this
/// same release, at the guard's deadline).
#[derive(Debug)]
pub(crate) struct EtcdHeld {
    shared: Arc<HeldShared>,
}

impl EtcdHeld {
    pub(crate) fn new(shared: Arc<HeldShared>) -> EtcdHeld {
        EtcdHeld { shared }
    }
}

#[async_trait]
impl Held for EtcdHeld {
    async fn release(&self) -> Result<()> {
        self.shared.release().await
    }

    /// A leader's new value: put on our key only while it is ours (Go's `Proclaim`), on the
    /// lease it is on.
    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        let s = &self.shared;
        if !set_value_if_ours(&s.inner, "proclaim", &s.key, s.rev, value.to_vec(), &[]).await? {
            s.state.mark_lost(LostReason::Deleted);
            return Err(Error::lost(&s.name));
        }
        Ok(())
    }

    async fn downgrade(&self) -> Result<GuardParts> {
        let s = &self.shared;
        let rev = s.rev;
        // Same key, same create revision (so same rank and token), same lease, value `r`:
        // readers queued behind us may come in, writers still wait.
        if !set_value_if_ours(&s.inner, "downgrade", &s.key, rev, b"r".to_vec(), &[]).await? {
            s.state.mark_lost(LostReason::Deleted);
            return Err(Error::lost(&s.name));
        }
        // The read ownership keeps the write ownership's deadline.
        let state = StateCell::new(s.state.clock().clone());
        let lease = s.lease.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let guard_lease = *s.guard_lease.lock().unwrap_or_else(|e| e.into_inner());
        if let KeyLease::Session(sess) = &lease {
            sess.track(&state);
        }
        s.nw.remove_holder(rev);
        s.nw.add_holder(rev, &state);
        let shared = Arc::new(HeldShared {
            inner: s.inner.clone(),
            name: s.name.clone(),
            nw: s.nw.clone(),
            key: s.key.clone(),
            rev,
            lease: Mutex::new(lease),
            slot: Mutex::new(s.slot.lock().unwrap_or_else(|e| e.into_inner()).take()),
            state: state.clone(),
            guard_lease: Mutex::new(guard_lease),
        });
        let held = EtcdHeld::new(shared);
        Ok(GuardParts::new(
            lockkit_core::FencingToken(rev as u64),
            guard_lease,
            state,
            Box::new(held),
        ))
    }

    async fn extend(&self, lease: Duration) -> Result<()> {
        let s = &self.shared;
        let Some(old) = s.fixed_lease() else {
            return Err(Error::invalid("extend() is for fixed leases"));
        };
        // A new lease of the requested length; move our key onto it only while it is ours and
        // on the lease we know, keeping its value (a semaphore's weight, a reader's `r`): the
        // move of an earlier extend whose answer was lost, delivered late (by a slow member),
        // then cannot undo this one.
        let (new, _) = grant_exact(&s.inner.pool, lease).await?;
        let mut from = old;
        let mut tries = 0;
        let moved = loop {
            tries += 1;
            match move_to_lease(&s.inner, &s.key, s.rev, Some(from), new).await {
                Ok(moved) if moved || tries == 3 => break moved,
                // Not on the lease we know: gone, or moved by such a late move.
                Ok(_) => match key_lease(&s.inner, &s.key, s.rev).await {
                    // Another lease of ours (it runs out by itself): move the key from there.
                    Ok(Some(on)) => from = on,
                    Ok(None) => break false,
                    // No move of this call landed on the new lease, nor can one later.
                    Err(e) => {
                        reap_lease(&s.inner, new);
                        return Err(e);
                    }
                },
                // The answer was lost, not the question: read where the key is now.
                Err(e) => match key_lease(&s.inner, &s.key, s.rev).await {
                    Ok(Some(on)) if on == new => break true,
                    // Not moved yet, but the move may still be on its way to a slow member: the
                    // new lease is left to run out rather than revoked under a key that may
                    // land on it.
                    Ok(Some(_)) => return Err(e),
                    Ok(None) => break false,
                    // Still unknown: neither lease is revoked (one may hold our key; each runs
                    // out by itself), and the core keeps the earlier of the two deadlines.
                    Err(_) => return Err(e),
                },
            }
        };
        if moved {
            *s.lease.lock().unwrap_or_else(|e| e.into_inner()) = KeyLease::Fixed(new);
            *s.guard_lease.lock().unwrap_or_else(|e| e.into_inner()) =
                lockkit_core::Lease::Fixed(lease);
            // Nothing is on the old lease any more.
            reap_lease(&s.inner, old);
            Ok(())
        } else {
            // Lost before the round trip that tidies up, never after it.
            s.state.mark_lost(LostReason::Deleted);
            reap_lease(&s.inner, new);
            Err(Error::lost(&s.name))
        }
    }
}
