//! Waiting on a mutex in Redisson's layout (`redisson_compat`): Redisson's own protocol, so
//! Java clients wake lockkit waiters and the other way round. `RLock`: a release publishes `0`
//! on the lock's channel; each client wakes one local waiter per message, and the waiter tries
//! again. Fair mode is `RFairLock`: one queue for both libraries' waiters (see
//! `scripts/rs_fair_queue.lua`), each woken on a channel of its own.

use std::time::Duration;

use lockkit_core::spi::{GuardParts, OnDrop, Request};
use lockkit_core::{ErrorKind, Result};
use tokio::time::Instant;

use super::handle::RedisMutex;
use crate::client::lease_ends_in;

/// How long a woken waiter that found the lock re-taken waits before it listens again.
const BARGED_BACKOFF: Duration = Duration::from_millis(1);

enum Attempt {
    Acquired { token: u64, sent_at: Instant },
    Busy { pttl: i64 },
}

/// Hands the reaper the release of an acquisition whose reply `owner` never saw (the future was
/// dropped, or the reply was lost), so a cancelled acquire leaves no lock behind. `fair`: a fair
/// attempt's wait in Redisson's queue; `lease`: the lease the attempt asked for, the longest
/// what it took can live.
fn undo_later(m: &RedisMutex, owner: &str, fair: Option<Duration>, lease: Duration) {
    let (keys, owner) = (m.keys.clone(), owner.to_string());
    let moot = lease.max(fair.unwrap_or_default()) + Duration::from_secs(1);
    m.inner
        .reap("undo an unanswered acquire", moot, move |inner| {
            let (keys, owner) = (keys.clone(), owner.clone());
            async move {
                inner.release_mutex(&keys, &owner, fair.is_some()).await?;
                if let Some(wait) = fair {
                    inner.leave_queue(&keys, &owner, wait).await?;
                }
                Ok(())
            }
        });
}

/// A fair attempt: the wait it queues with, and whether it queues at all (not a try).
#[derive(Clone, Copy)]
struct Fair {
    wait: Duration,
    queue: bool,
}

/// One attempt; `fair`: in Redisson's fair queue.
async fn attempt(
    m: &RedisMutex,
    owner: &str,
    lease: Duration,
    fair: Option<Fair>,
) -> Result<Attempt> {
    let scripts = &m.inner.scripts;
    let script = if fair.is_some() {
        &scripts.rs_fair_acquire
    } else {
        &scripts.try_acquire
    };
    let mut inv = m.acquire_invocation(script, owner, lease);
    if let Some(f) = fair {
        inv.key(&m.keys.queue)
            .key(&m.keys.waiters)
            .arg(f.wait.as_millis().max(1) as u64)
            .arg(crate::client::wall_ms())
            .arg(&m.keys.channel)
            .arg(if f.queue { "1" } else { "0" });
    }
    let mut pending = OnDrop::armed(|| undo_later(m, owner, fair.map(|f| f.wait), lease));
    let sent_at = Instant::now();
    let epoch = m.inner.replicas.ticket(&m.keys.lock);
    let (acquired, value): (i64, i64) = match m.inner.invoke(&inv, "acquire").await {
        Ok(r) => r,
        Err(e) => {
            pending.set_armed(e.kind() != ErrorKind::WrongType);
            return Err(e);
        }
    };
    if acquired != 1 {
        pending.disarm();
        return Ok(Attempt::Busy { pttl: value });
    }
    // Still armed: if the replicas fail us, or the future is dropped, we let go.
    m.confirm_replicas(owner, fair.is_some(), epoch).await?;
    pending.disarm();
    Ok(Attempt::Acquired {
        token: value as u64,
        sent_at,
    })
}

/// Redisson's RLock: a woken waiter tries again; the lock is not fair.
pub(super) async fn acquire(m: &RedisMutex, req: &Request) -> Result<Option<GuardParts>> {
    let lease = req.lease();
    let give_up_at = req.deadline();
    let owner = m.inner.new_owner();
    let mut sub: Option<crate::pubsub::Subscription> = None;
    let mut woken = false;
    loop {
        let pttl = match attempt(m, &owner, lease.duration(), None).await? {
            Attempt::Acquired { token, sent_at } => {
                let expiry = lease.duration();
                return Ok(Some(m.guard(owner, token, lease, sent_at, expiry, false)));
            }
            Attempt::Busy { pttl } => pttl,
        };
        if woken {
            // Another client took the lock between the release and our attempt (it was
            // probably the releaser, looping back): pause a moment before listening again, so
            // a busy lock does not make its waiters retry on every release.
            let pause = BARGED_BACKOFF.min(give_up_at.map_or(BARGED_BACKOFF, |at| {
                at.saturating_duration_since(Instant::now())
            }));
            tokio::time::sleep(pause).await;
        }
        let left = give_up_at.map(|at| at.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Ok(None);
        }
        let Some(s) = sub.as_ref() else {
            sub = Some(m.inner.subs.subscribe(&m.keys.channel).await?);
            // A release between the attempt and the subscription sent no message we saw.
            continue;
        };
        // A missed message costs at most the holder's remaining lease (a second when it has
        // no expiry).
        let mut wait = lease_ends_in(pttl).unwrap_or(Duration::from_secs(1));
        if let Some(left) = left {
            wait = wait.min(left);
        }
        woken = tokio::time::timeout(wait, s.notified()).await.is_ok();
    }
}

/// Redisson's RFairLock: waiters, Redisson's and lockkit's, are served in arrival order from one
/// queue, each keeping its place for its wait after the one before it (an acquire's deadline,
/// else `fair_lock_wait_timeout`); each release wakes only the first one, by `0` on
/// `<lock channel>:<owner>`. A waiter that gives up leaves the queue; one whose process died is
/// skipped once its place lapses, as Redisson's are.
pub(super) async fn acquire_fair(m: &RedisMutex, req: &Request) -> Result<Option<GuardParts>> {
    let lease = req.lease();
    let settings = &m.inner.settings;
    let give_up_at = req.deadline();
    let wait = req.remaining().unwrap_or(settings.fair_lock_wait);
    let fair = Fair {
        wait,
        queue: req.waits(),
    };
    let owner = m.inner.new_owner();
    let mut queued = OnDrop::disarmed(|| m.leave_later(&owner, wait));
    let mut sub: Option<crate::pubsub::Subscription> = None;
    loop {
        let pttl = match attempt(m, &owner, lease.duration(), Some(fair)).await {
            Ok(Attempt::Acquired { token, sent_at }) => {
                queued.disarm();
                drop(queued);
                let expiry = lease.duration();
                return Ok(Some(m.guard(owner, token, lease, sent_at, expiry, true)));
            }
            // A try never queued.
            Ok(Attempt::Busy { .. }) if !fair.queue => return Ok(None),
            Ok(Attempt::Busy { pttl }) => pttl,
            Err(e) => {
                queued.arm();
                return Err(e);
            }
        };
        queued.arm();
        let left = give_up_at.map(|at| at.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            // Still armed while it runs: a drop half-way hands the leave to the reaper.
            let left_queue = m.inner.leave_queue(&m.keys, &owner, wait).await;
            queued.set_armed(left_queue.is_err());
            return Ok(None);
        }
        let Some(s) = sub.as_ref() else {
            let channel = format!("{}:{owner}", m.keys.channel);
            sub = Some(m.inner.subs.subscribe(&channel).await?);
            // A release between the attempt and the subscription sent no message we saw.
            continue;
        };
        // A missed message costs at most a heartbeat (or the holder's remaining lease).
        let mut wait = settings.waiter_heartbeat;
        if let Some(end) = lease_ends_in(pttl) {
            wait = wait.min(end);
        }
        if let Some(left) = left {
            wait = wait.min(left);
        }
        let _ = tokio::time::timeout(wait, s.notified()).await;
    }
}
