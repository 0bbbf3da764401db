//! A multi-lock's mutexes in one transaction: every member's key is created, on the session
//! lease, only if every member's queue (its prefix) is empty, so the set is taken all or none in
//! one round trip, where the core would otherwise take the members one by one.
//!
//! The emptiness is one compare per member over its whole prefix (`create_revision == 0` over a
//! range holds only when no key is in it), so a set with a holder or a waiter on any member is
//! left alone: waiters keep their turn, as Go's Mutex has them. Only mutexes, and only watchdog
//! leases (a fixed lease is a lease of each key's own); every other set, and every set found
//! busy, the core takes member by member. Each member's token is the transaction's revision.

use std::sync::{Arc, Mutex};

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use lockkit_core::spi::{Armed, GuardParts, Request, StateCell, Taken, Undo};
use lockkit_core::{FencingToken, Member, Result};

use crate::client::is_lease_not_found;
use crate::held::{EtcdHeld, HeldShared};
use crate::inner::Inner;
use crate::ops::{reap_keys, InFlight, KeyLease};
use crate::watch::{Kind, NameWatch, Slot};

/// Takes every member of `members` at once, when one transaction can.
pub(crate) async fn take_all(
    inner: &Arc<Inner>,
    members: &[Member<'_>],
    req: &Request,
) -> Result<Taken<Vec<GuardParts>>> {
    let Some(names) = Member::mutex_names(members).filter(|_| req.lease().is_watchdog()) else {
        return Ok(Taken::NotHere);
    };
    let session = inner.session(req.lease().duration()).await?;
    let prefixes: Vec<Vec<u8>> = names.iter().map(|n| inner.prefix(Kind::Mutex, n)).collect();
    let mut watches: Vec<Arc<NameWatch>> = Vec::with_capacity(prefixes.len());
    for p in &prefixes {
        watches.push(inner.name_watch(p, Kind::Mutex).await?);
    }
    let slots: Vec<Slot> = watches.iter().map(NameWatch::take_slot).collect();
    let keys: Vec<Vec<u8>> = slots.iter().map(|s| s.key(session.id())).collect();
    for nw in &watches {
        // A create that gets no answer may land late: its keys are strays then.
        nw.watch_strays(session.id());
    }
    let when: Vec<Compare> = prefixes
        .iter()
        .map(|p| Compare::create_revision(p.clone(), CompareOp::Equal, 0).with_prefix())
        .collect();
    let then: Vec<TxnOp> = keys
        .iter()
        .map(|k| {
            let on_lease = PutOptions::new().with_lease(session.id());
            TxnOp::put(k.clone(), Vec::new(), Some(on_lease))
        })
        .collect();
    let pool = inner.pool.clone();
    // Sent once (a retry after a lost answer would find our own keys and read busy); owned by
    // the undo, so a cancelled take drives it to its end before the keys are deleted.
    let create: InFlight = Box::pin(async move {
        pool.run("take a multi-lock", false, move |mut c| {
            let txn = Txn::new().when(when.clone()).and_then(then.clone());
            async move { c.txn(txn).await }
        })
        .await
    });
    let mut unseen = Armed::new(Unseen {
        inner: inner.clone(),
        keys,
        lease: KeyLease::Session(session.clone()),
        create: Some(create),
        slots,
    });
    let answer = unseen.create.as_mut().expect("just set").await;
    unseen.create = None;
    let answer = match answer {
        Ok(answer) => answer,
        // The session's lease is gone: nothing was created; the ordered acquire that follows
        // takes a new session.
        Err(e) if is_lease_not_found(&e) => {
            drop(unseen.disarm());
            inner.drop_session(&session).await;
            return Ok(Taken::NotHere);
        }
        // The keys may have been created: the undo stays armed.
        Err(e) => return Err(e),
    };
    if !answer.succeeded() {
        // Nothing was created; the slots are free again.
        drop(unseen.disarm());
        return Ok(Taken::Busy);
    }
    let rev = answer.header().map_or(0, |h| h.revision());
    let Unseen { keys, slots, .. } = unseen.disarm();
    let parts = names
        .iter()
        .zip(watches)
        .zip(keys.into_iter().zip(slots))
        .map(|((name, nw), (key, slot))| {
            nw.watch_own(&key, rev);
            let state = StateCell::new(session.clock().clone());
            session.track(&state);
            nw.add_holder(rev, &state);
            let shared = Arc::new(HeldShared {
                inner: inner.clone(),
                name: Arc::from(*name),
                nw,
                key,
                rev,
                lease: Mutex::new(KeyLease::Session(session.clone())),
                slot: Mutex::new(Some(slot)),
                state: state.clone(),
                guard_lease: Mutex::new(req.lease()),
            });
            GuardParts::new(
                FencingToken(rev as u64),
                req.lease(),
                state,
                Box::new(EtcdHeld::new(shared)),
            )
        })
        .collect();
    Ok(Taken::All(parts))
}

/// The keys of a take whose answer was not seen: deleted in the background once the request
/// has ended, as an abandoned acquire's key is.
struct Unseen {
    inner: Arc<Inner>,
    keys: Vec<Vec<u8>>,
    lease: KeyLease,
    create: Option<InFlight>,
    slots: Vec<Slot>,
}

impl Undo for Unseen {
    fn undo(self) {
        // Their create revision is not known.
        let keys = self.keys.into_iter().map(|k| (k, 0)).collect();
        reap_keys(&self.inner, keys, self.lease, self.create, self.slots);
    }
}
