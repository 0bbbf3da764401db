//! Waiting on a native mutex: waiters queue in arrival order, and a release hands the lock
//! straight to the first live one (the release script makes it the owner and tells it the
//! token), so under contention the next holder starts half a round trip after the release,
//! with no retry and no other waiter woken.
//!
//! Each waiter refreshes its place (a heartbeat) every `waiter_heartbeat`, and listens on its
//! client's channel of the lock (`<lock key>:<client-uuid>`, one subscription per lock per
//! client, shared by its local waiters). A waiter that died is skipped once its heartbeat is 3
//! beats old; a lock handed to a waiter that died just before expires after 3 beats. A message
//! that is lost costs at most one heartbeat: every attempt also takes up a lock handed to us.

use std::time::Duration;

use lockkit_core::spi::{GuardParts, OnDrop, Request};
use lockkit_core::{Backoff, Error, ErrorKind, Result};
use tokio::time::Instant;

use super::handle::RedisMutex;
use crate::client::lease_ends_in;

/// Acquires `m` as `opts` asks: at once when free, else (when `opts` allows a wait) queued.
pub(super) async fn acquire(m: &RedisMutex, req: &Request) -> Result<Option<GuardParts>> {
    let inner = &m.inner;
    let settings = &inner.settings;
    let lease = req.lease();
    let waits = req.waits();
    let give_up_at = req.deadline();
    let owner = inner.new_owner();
    let heartbeat = settings.waiter_heartbeat;
    // A hand-off sets this expiry; the watchdog extends it to the lease. A fixed lease is taken
    // up by an attempt instead, which starts the whole lease then (the hand-off's expiry runs
    // from a moment the waiter cannot know), as is a hand-off that must reach replicas first.
    let grant_expiry = lease.duration().min(settings.waiter_timeout());
    let take_grants = !inner.replicas.waits() && lease.is_watchdog();

    // The first attempt queues us if the lock is busy; later ones refresh our place and take up
    // a hand-off whose message we missed.
    let invocation = |attempt: &'static str| {
        let mut inv = m.acquire_invocation(&inner.scripts.acquire, &owner, lease.duration());
        inv.key(&m.keys.queue)
            .key(&m.keys.waiters)
            .arg(match (attempt, req.fair()) {
                (_, false) => attempt,
                ("0", true) => "0f",
                ("1", true) => "1f",
                _ => "2f",
            })
            .arg(settings.waiter_timeout().as_millis() as u64);
        inv
    };
    let mut inv = if waits || req.fair() {
        invocation(if waits { "1" } else { "0" })
    } else {
        // Neither waits nor defers to waiters: the lock is taken if free, and the queue is
        // never looked at.
        m.acquire_invocation(&inner.scripts.try_acquire, &owner, lease.duration())
    };
    let mut queued = false;

    // Only a waiting acquire listens (on its client's channel of the lock). It joins before
    // queueing when the server already has the subscription, so the hand-off message cannot be
    // missed; otherwise it queues first, subscribes, and looks once more.
    let (channel, mut sub) = if waits {
        let channel = inner.grant_channel(&m.keys);
        let sub = inner.subs.join_active(&channel, &owner);
        (channel, sub)
    } else {
        (String::new(), None)
    };
    let mut leave = OnDrop::disarmed(|| m.leave_later(&owner, settings.waiter_timeout()));
    // When the last attempt that found the lock busy was sent: a hand-off came after it.
    let mut busy_sent = Instant::now();
    // The holder's remaining lease at that attempt (ms; -1: none), and when it ends, as far as
    // the last answer tells (none after a failed attempt: the backoff paces those).
    let mut pttl = -1;
    let mut holder_ends: Option<Instant>;
    // Since when attempts of a queued waiter have failed (the server is away, or fails over).
    let mut failing_since: Option<Instant> = None;
    let mut retry = RETRY_AFTER_FAILURE.start();
    loop {
        // An attempt in flight may queue us or take the lock: a dropped future must undo it.
        leave.arm();
        let sent_at = Instant::now();
        let epoch = inner.replicas.ticket(&m.keys.lock);
        match inner.invoke::<(i64, i64)>(&inv, "acquire").await {
            Ok((1, token)) => {
                // Still armed: if the replicas fail us, or the future is dropped, we let go.
                m.confirm_replicas(&owner, false, epoch).await?;
                leave.disarm();
                drop(leave);
                let token = token as u64;
                return Ok(Some(m.guard(
                    owner,
                    token,
                    lease,
                    sent_at,
                    lease.duration(),
                    false,
                )));
            }
            Ok((_, holder_pttl)) => {
                if !waits {
                    leave.disarm();
                    return Ok(None);
                }
                if !queued {
                    queued = true;
                    inv = invocation("2");
                }
                busy_sent = sent_at;
                pttl = holder_pttl;
                holder_ends = lease_ends_in(pttl).map(|left| sent_at + left);
                failing_since = None;
                retry.reset();
            }
            Err(e) if queued && e.is_retryable() => {
                holder_ends = None;
                bear(
                    &m.name,
                    e,
                    &mut failing_since,
                    sent_at,
                    settings.waiter_timeout(),
                    pttl,
                )?;
            }
            Err(e) => {
                leave.set_armed(e.kind() != ErrorKind::WrongType);
                return Err(e);
            }
        }
        let Some(s) = sub.as_ref() else {
            let asked = Instant::now();
            match inner.subs.subscribe_as(&channel, Some(&owner)).await {
                Ok(joined) => sub = Some(joined),
                Err(e) if e.is_retryable() => {
                    bear(
                        &m.name,
                        e,
                        &mut failing_since,
                        asked,
                        settings.waiter_timeout(),
                        pttl,
                    )?;
                    retry.wait().await;
                }
                Err(e) => return Err(e),
            }
            // A hand-off before the subscription sent a message we did not see.
            continue;
        };
        // Queued behind the holder. Listen until a hand-off, our heartbeat, the holder's
        // lease end (it may have died) or our own deadline, whichever comes first; after a
        // failed attempt, try again sooner.
        let mut wait = heartbeat;
        if failing_since.is_some() {
            wait = wait.min(retry.next_pause());
        }
        if let Some(end) = holder_ends {
            wait = wait.min(end.saturating_duration_since(Instant::now()));
        }
        let left = give_up_at.map(|at| at.saturating_duration_since(Instant::now()));
        if let Some(left) = left {
            wait = wait.min(left);
        }
        if !wait.is_zero() {
            let _ = tokio::time::timeout(wait, s.notified()).await;
        }
        if let Some(token) = s.take_grant() {
            // Handed over after our last busy attempt: its expiry runs from no earlier.
            let fresh = busy_sent + grant_expiry > Instant::now() + grant_expiry / 3;
            if take_grants && fresh {
                leave.disarm();
                drop(leave);
                return Ok(Some(m.guard(
                    owner,
                    token,
                    lease,
                    busy_sent,
                    grant_expiry,
                    false,
                )));
            }
            // Otherwise the next attempt takes it up (with the whole lease, from then).
            continue;
        }
        if give_up_at.is_some_and(|at| Instant::now() >= at) {
            // Out of time. Leaving also passes on a lock handed to us that we have not seen;
            // if it fails (or this future is dropped meanwhile), the guard tries once more.
            inner
                .leave_queue(&m.keys, &owner, settings.waiter_timeout())
                .await?;
            leave.disarm();
            return Ok(None);
        }
    }
}

/// How soon a queued waiter tries again after failed attempts (at most: a heartbeat is sooner):
/// from 50 ms, jittered, up to 400 ms.
const RETRY_AFTER_FAILURE: Backoff = Backoff::WAITER;

/// Whether a queued waiter bears the failure `e` of a request sent at `sent_at` (a failover, a
/// restart): it keeps its place for a heartbeat timeout (`waiter_timeout`), and the holder's
/// lease as last seen (`pttl` ms) would have kept it waiting that long anyway. Past that, the
/// error is the answer.
fn bear(
    lock: &str,
    e: Error,
    failing_since: &mut Option<Instant>,
    sent_at: Instant,
    waiter_timeout: Duration,
    pttl: i64,
) -> Result<()> {
    let since = *failing_since.get_or_insert(sent_at);
    if since.elapsed() >= waiter_timeout.max(Duration::from_millis(pttl.max(0) as u64)) {
        return Err(e);
    }
    tracing::debug!(
        backend = "redis",
        lock,
        error = %e,
        "lockkit: waiting through a failed request"
    );
    Ok(())
}
