//! A multi-lock's members in one step: the native mutexes of a set taken by one script, all or
//! none (`scripts/take_all.lua`), where the core would otherwise take them one round trip each.
//!
//! Only where one script can reach every key: a single server, or Sentinel's primary (on a
//! cluster, every lock's keys carry its whole name as their hash tag, so two names' keys are in
//! one slot only by chance). Only native mutexes, and only acquires that may go ahead of
//! waiters (not `fair`): the script never queues. Every other set, and every set the script
//! finds busy, the core takes member by member.

use std::time::Duration;

use lockkit_core::spi::{moot_after, Armed, GuardParts, Request, Taken, Undo};
use lockkit_core::{ErrorKind, Member, Result};
use tokio::time::Instant;

use crate::client::Inner;
use crate::mutex::RedisMutex;

/// Takes every member of `members` at once for one new owner, when one script can.
pub(crate) async fn take_all(
    inner: &std::sync::Arc<Inner>,
    members: &[Member<'_>],
    req: &Request,
) -> Result<Taken<Vec<GuardParts>>> {
    let cluster = inner.settings.topology.is_cluster();
    let Some(names) = Member::mutex_names(members) else {
        return Ok(Taken::NotHere);
    };
    if inner.settings.redisson_compat || req.fair() || cluster {
        return Ok(Taken::NotHere);
    }
    let mutexes = names
        .iter()
        .map(|n| RedisMutex::new(inner.clone(), n))
        .collect::<Result<Vec<_>>>()?;
    let owner = inner.new_owner();
    let lease = req.lease().duration();
    let wait = inner.settings.waiter_timeout();
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
        wait,
        // A member ours lasts the lease, a place in a member's queue twice the wait (see
        // `leave_later`): giving them back is worth trying that long.
        moot_after: moot_after(&[lease, wait * 2]),
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
        // Given back before the error, as a single acquire's is; a release that fails leaves
        // the undo armed, and the drop hands it to the reaper.
        let releases = unseen
            .mutexes
            .iter()
            .map(|m| inner.release_mutex(&m.keys, &unseen.owner, false));
        let released = futures::future::join_all(releases)
            .await
            .iter()
            .all(Result::is_ok);
        let names: Vec<&str> = unseen.mutexes.iter().map(|m| &*m.name).collect();
        // Rolled back, or (a release failed) being rolled back in the background.
        let e = crate::error::rolled_back(&names.join(", "), e);
        if released {
            unseen.disarm();
        }
        return Err(e);
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
                .0
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
    moot_after: Duration,
}

impl Undo for Unseen {
    fn undo(self) {
        for m in &self.mutexes {
            m.leave_within(&self.owner, self.wait, self.moot_after);
        }
    }
}
