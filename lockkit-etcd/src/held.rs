//! A held key: release (owner-checked, etcd issue 22082), fixed-lease expiry and extend,
//! write-to-read downgrade.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use lockkit_core::{Error, ErrorKind, GuardParts, Held, Result, StateCell};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::acquire::{delete_if_ours, grant_fixed, revoke, KeyLease};
use crate::backend::Inner;
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
    /// The lease the guard was acquired with (reported by the guard).
    pub(crate) guard_lease: lockkit_core::Lease,
}

impl HeldShared {
    fn fixed_lease(&self) -> Option<i64> {
        match &*self.lease.lock().unwrap_or_else(|e| e.into_inner()) {
            KeyLease::Fixed(id) => Some(*id),
            KeyLease::Session(_) => None,
        }
    }

    /// Deletes our key if it is still ours. Connection trouble is retried in the background
    /// (until the lease backstop), so a failed unlock never leaves the lock held for long.
    async fn release(self: &Arc<Self>) -> Result<()> {
        self.nw.remove_holder(self.rev);
        let r = delete_if_ours(&self.inner, &self.key, self.rev).await;
        match r {
            Ok(deleted) => {
                self.finish().await;
                if deleted {
                    Ok(())
                } else {
                    Err(Error::not_held(&self.name))
                }
            }
            Err(e) => {
                if e.is_retryable() {
                    let me = self.clone();
                    tokio::spawn(async move { me.retry_release().await });
                }
                Err(e)
            }
        }
    }

    async fn retry_release(self: Arc<Self>) {
        let mut wait = Duration::from_millis(200);
        for _ in 0..20 {
            tokio::time::sleep(wait).await;
            if delete_if_ours(&self.inner, &self.key, self.rev)
                .await
                .is_ok()
            {
                break;
            }
            wait = (wait * 2).min(Duration::from_secs(2));
        }
        self.finish().await;
    }

    /// After the key is gone: revoke a fixed lease, free the slot.
    async fn finish(&self) {
        if let Some(id) = self.fixed_lease() {
            revoke(&self.inner, id).await;
        }
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// A held mutex, from the backend's side.
#[derive(Debug)]
pub(crate) struct EtcdHeld {
    shared: Arc<HeldShared>,
    timer: Mutex<Option<(tokio::sync::watch::Sender<Instant>, JoinHandle<()>)>>,
}

impl EtcdHeld {
    pub(crate) fn new(shared: Arc<HeldShared>, fixed_deadline: Option<Instant>) -> EtcdHeld {
        let timer = fixed_deadline.map(|d| {
            let (tx, rx) = tokio::sync::watch::channel(d);
            let task = tokio::spawn(expire_at_deadline(Arc::downgrade(&shared), rx));
            (tx, task)
        });
        EtcdHeld {
            shared,
            timer: Mutex::new(timer),
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.timer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(tx, _)| *tx.borrow())
    }

    fn stop_timer(&self) {
        if let Some((_, t)) = self.timer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            t.abort();
        }
    }
}

impl Drop for EtcdHeld {
    fn drop(&mut self) {
        self.stop_timer();
    }
}

/// A fixed lease's local deadline: when it passes without an extend, the lock is ours no longer.
/// Delete the key ourselves (if still ours) so that "Lost" and "free" agree, then mark Lost.
async fn expire_at_deadline(
    shared: std::sync::Weak<HeldShared>,
    mut deadline: tokio::sync::watch::Receiver<Instant>,
) {
    loop {
        let d = *deadline.borrow_and_update();
        tokio::select! {
            _ = tokio::time::sleep_until(d) => break,
            changed = deadline.changed() => if changed.is_err() { return },
        }
    }
    let Some(s) = shared.upgrade() else { return };
    s.nw.remove_holder(s.rev);
    let _ = delete_if_ours(&s.inner, &s.key, s.rev).await;
    s.state.mark_lost();
}

#[async_trait]
impl Held for EtcdHeld {
    async fn release(&self) -> Result<()> {
        self.stop_timer();
        self.shared.release().await
    }

    fn release_in_background(&self) {
        self.stop_timer();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let s = self.shared.clone();
            rt.spawn(async move {
                let _ = s.release().await;
            });
        }
    }

    async fn downgrade(&self) -> Result<GuardParts> {
        let s = &self.shared;
        let (k, rev, lease_id) = (
            s.key.clone(),
            s.rev,
            s.lease.lock().unwrap_or_else(|e| e.into_inner()).id(),
        );
        // Same key, same create revision (so same rank and token), value `r`: readers queued
        // behind us may come in, writers still wait.
        let resp = s
            .inner
            .pool
            .run("downgrade", true, move |mut c| {
                let txn = Txn::new()
                    .when([Compare::create_revision(k.clone(), CompareOp::Equal, rev)])
                    .and_then([TxnOp::put(
                        k.clone(),
                        "r",
                        Some(PutOptions::new().with_lease(lease_id)),
                    )]);
                async move { c.txn(txn).await }
            })
            .await?;
        if !resp.succeeded() {
            s.state.mark_lost();
            return Err(Error::lost(&s.name));
        }
        let deadline = self.deadline();
        self.stop_timer();
        let state = StateCell::new();
        let lease = s.lease.lock().unwrap_or_else(|e| e.into_inner()).clone();
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
            guard_lease: s.guard_lease,
        });
        let held = EtcdHeld::new(shared, deadline);
        // The read ownership: same token, same lease.
        Ok(GuardParts::new(
            s.name.clone(),
            lockkit_core::FencingToken(rev as u64),
            s.guard_lease,
            state,
            Box::new(held),
        ))
    }

    async fn extend(&self, lease: Duration) -> Result<()> {
        let s = &self.shared;
        let Some(old) = s.fixed_lease() else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "extend() is for fixed leases",
            ));
        };
        // A new lease of the requested length; move our key onto it only while it is ours.
        let (new, deadline) = grant_fixed(&s.inner, lease).await?;
        let (k, rev) = (s.key.clone(), s.rev);
        let resp = s
            .inner
            .pool
            .run("extend", true, move |mut c| {
                let txn = Txn::new()
                    .when([Compare::create_revision(k.clone(), CompareOp::Equal, rev)])
                    .and_then([TxnOp::put(
                        k.clone(),
                        "",
                        Some(PutOptions::new().with_lease(new)),
                    )]);
                async move { c.txn(txn).await }
            })
            .await;
        match resp {
            Ok(r) if r.succeeded() => {
                *s.lease.lock().unwrap_or_else(|e| e.into_inner()) = KeyLease::Fixed(new);
                if let Some((tx, _)) = &*self.timer.lock().unwrap_or_else(|e| e.into_inner()) {
                    let _ = tx.send(deadline);
                }
                revoke(&s.inner, old).await;
                Ok(())
            }
            Ok(_) => {
                revoke(&s.inner, new).await;
                s.state.mark_lost();
                Err(Error::lost(&s.name))
            }
            Err(e) => {
                revoke(&s.inner, new).await;
                Err(e)
            }
        }
    }
}
