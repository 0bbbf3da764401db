//! A multi-lock's members in one step: the native mutexes of a set taken by one script, all or
//! none (`scripts/take_all.lua`), where the core would otherwise take them one round trip each.
//!
//! Only where one script can reach every key: a single server (or Sentinel's primary), or a
//! cluster when every member's keys share a slot (names with one `{tag}`). Only native mutexes,
//! and only acquires that may go ahead of waiters (not `fair`): the script never queues. Every
//! other set, and every set the script finds busy, the core takes member by member.

use std::time::Duration;

use lockkit_core::spi::{Armed, GuardParts, Request, Taken, Undo};
use lockkit_core::{ErrorKind, Member, Result};
use redis::cluster_routing::Slot;
use tokio::time::Instant;

use crate::client::Inner;
use crate::mutex::RedisMutex;

/// Takes every member of `members` at once for one new owner, when one script can.
pub(crate) async fn take_all(
    inner: &std::sync::Arc<Inner>,
    members: &[Member<'_>],
    req: &Request,
) -> Result<Taken<Vec<GuardParts>>> {
    if inner.settings.redisson_compat || req.fair() || members.len() < 2 {
        return Ok(Taken::NotHere);
    }
    let mut mutexes = Vec::with_capacity(members.len());
    for m in members {
        let Member::Mutex(name) = m else {
            return Ok(Taken::NotHere);
        };
        mutexes.push(RedisMutex::new(inner.clone(), name)?);
    }
    if inner.settings.topology.is_cluster() {
        let slot = Slot::for_key(&mutexes[0].keys.lock);
        if mutexes.iter().any(|m| Slot::for_key(&m.keys.lock) != slot) {
            return Ok(Taken::NotHere);
        }
    }
    let owner = inner.new_owner();
    let lease = req.lease().duration();
    let mut inv = inner.scripts.take_all.prepare_invoke();
    for m in &mutexes {
        inv.key(&m.keys.lock).key(&m.keys.fence);
    }
    inv.arg(&owner)
        .arg(lease.as_millis() as u64)
        .arg(inner.settings.fence_ttl.as_millis() as u64);
    // Until the answer is seen, any member may be ours: a drop gives them all back.
    let unseen = Armed::new(Unseen {
        mutexes,
        owner,
        wait: inner.settings.waiter_timeout(),
    });
    let sent_at = Instant::now();
    let epoch = inner.replicas.ticket(&unseen.mutexes[0].keys.lock);
    let answer = match inner.invoke::<Vec<i64>>(&inv, "take_all").await {
        Ok(answer) => answer,
        Err(e) => {
            // A key of another type was never touched: nothing to undo.
            if e.kind() == ErrorKind::WrongType {
                unseen.disarm();
            }
            return Err(e);
        }
    };
    if answer.first() != Some(&1) {
        unseen.disarm();
        return Ok(Taken::Busy);
    }
    let tokens = &answer[1..];
    if tokens.len() != unseen.mutexes.len() {
        return Err(lockkit_core::Error::contract(
            "take_all answered for another number of locks",
        ));
    }
    if let Err(e) = inner.replicas.acquired(epoch).await {
        // Still armed: the drop releases every member.
        let name = unseen.mutexes[0].name.clone();
        return Err(crate::error::rolled_back(&name, e));
    }
    let Unseen { mutexes, owner, .. } = unseen.disarm();
    Ok(Taken::All(
        mutexes
            .iter()
            .zip(tokens)
            .map(|(m, token)| {
                let lease = req.lease();
                m.guard(
                    owner.clone(),
                    *token as u64,
                    lease,
                    sent_at,
                    lease.duration(),
                    false,
                )
            })
            .collect(),
    ))
}

/// The members of a take whose answer was not seen (or whose replicas failed it): each is
/// given back in the background, by its owner field, as a waiter that left would be.
struct Unseen {
    mutexes: Vec<RedisMutex>,
    owner: String,
    wait: Duration,
}

impl Undo for Unseen {
    fn undo(self) {
        for m in &self.mutexes {
            m.leave_later(&self.owner, self.wait);
        }
    }
}
