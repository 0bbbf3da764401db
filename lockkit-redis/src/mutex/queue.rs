//! Waiting on a native mutex: waiters queue in arrival order, and a release hands the lock
//! straight to the first live one (the release script makes it the owner and tells it the
//! token), so under contention the next holder starts half a round trip after the release,
//! with no retry and no other waiter woken.
//!
//! Each client refreshes its waiters' places (a heartbeat) every `waiter_heartbeat`, one round
//! trip per lock for all of them (`beats.rs`), and each waiter listens on its client's channel
//! of the lock (`<lock key>:<client-uuid>`, one subscription per lock per client, shared by its
//! local waiters). A waiter that died is skipped once its heartbeat is 3 beats old; a lock
//! handed to a waiter that died just before expires after 3 beats. A message that is lost costs
//! at most one heartbeat: the beat sees the lock handed to us, and our next attempt takes it up.
//!
//! The wait itself is the core's driver; this file supplies its verbs.

use std::time::Duration;

use lockkit_core::spi::{drive, Exit, Failures, GuardParts, Queue, Request, Standing, Woken};
use lockkit_core::{async_trait, ErrorKind, FencingToken, Result};
use tokio::time::Instant;

use super::handle::RedisMutex;
use crate::beats::Beating;
use crate::client::lease_ends_in;
use crate::leading::demote_when_announced;
use crate::pubsub::Subscription;
use crate::replicas::Ticket;

/// Acquires `m` as `req` asks: at once when free, else (when `req` allows a wait) queued.
pub(super) async fn acquire(m: &RedisMutex, req: &Request) -> Result<Option<GuardParts>> {
    drive(&NativeQueue { m, value: None }, req).await
}

/// Campaigns in the election whose native mutex is `m` (on [`LockKeys::election`] keys) with
/// `value`: the same queue, always fair (candidates lead in arrival order), and a lock handed
/// over is taken up by an attempt, which writes the leader hash as it grants (see
/// `scripts/elect.lua`).
///
/// [`LockKeys::election`]: crate::LockKeys::election
pub(crate) async fn campaign(
    m: &RedisMutex,
    value: &[u8],
    req: &Request,
) -> Result<Option<GuardParts>> {
    drive(
        &NativeQueue {
            m,
            value: Some(value),
        },
        req,
    )
    .await
}

struct NativeQueue<'a> {
    m: &'a RedisMutex,
    /// A candidate's value (elections only).
    value: Option<&'a [u8]>,
}

/// How a claim came to hold.
enum Won {
    /// An attempt took the lock: replicas confirm it before it is ours.
    Taken {
        token: u64,
        sent_at: Instant,
        epoch: Ticket,
    },
    /// A release handed it to us; its expiry (`expiry`) runs from no earlier than `since`.
    HandedOver {
        token: u64,
        since: Instant,
        expiry: Duration,
    },
}

/// One waiter: its owner id, its place, its share of the grant channel.
struct Claim {
    owner: String,
    /// Whether a leave must follow: an attempt was sent that may have queued us or taken the
    /// lock, and no answer has cleared it.
    armed: bool,
    /// Whether the first attempt queued us; later attempts refresh our place.
    queued: bool,
    channel: String,
    sub: Option<Subscription>,
    /// When the last attempt that found the lock busy was sent: a hand-off came after it.
    busy_sent: Instant,
    /// The holder's remaining lease at that attempt (ms; -1: none).
    pttl: i64,
    /// When the holder's lease ends, as far as the last answer tells.
    holder_ends: Option<Instant>,
    /// Our place in the lock's beat, which keeps our place in the queue (once queued).
    beat: Option<Beating>,
    won: Option<Won>,
    /// The lease an attempt takes the lock with: one whose answer is lost holds it that long.
    lease: Duration,
}

impl NativeQueue<'_> {
    /// One run of the acquire script: the first queues us if the lock is busy (when `req` may
    /// wait); later ones refresh our place and take up a hand-off whose message we missed.
    async fn attempt(&self, c: &mut Claim, req: &Request) -> Result<Standing> {
        let (m, inner) = (self.m, &self.m.inner);
        let settings = &inner.settings;
        let lease = req.lease().duration();
        let fair = req.fair() || self.value.is_some();
        let inv = if req.waits() || fair {
            let attempt = match (c.queued, req.waits(), fair) {
                (true, _, false) => "2",
                (true, _, true) => "2f",
                (false, true, false) => "1",
                (false, true, true) => "1f",
                (false, false, false) => "0",
                (false, false, true) => "0f",
            };
            let mut inv = m.acquire_invocation(&inner.scripts.acquire, &c.owner, lease);
            inv.key(&m.keys.queue)
                .key(&m.keys.waiters)
                .arg(attempt)
                .arg(settings.waiter_timeout().as_millis() as u64);
            if let Some(value) = self.value {
                crate::client::election_keys(&mut inv, &m.keys);
                inv.arg(value);
            }
            inv
        } else {
            // Neither waits nor defers to waiters: the lock is taken if free, and the queue is
            // never looked at.
            m.acquire_invocation(&inner.scripts.try_acquire, &c.owner, lease)
        };
        c.armed = true;
        let sent_at = Instant::now();
        let epoch = inner.replicas.ticket(&m.keys.lock);
        match inner.invoke::<(i64, i64)>(&inv, "acquire").await {
            Ok((1, token)) => {
                c.won = Some(Won::Taken {
                    token: token as u64,
                    sent_at,
                    epoch,
                });
                Ok(Standing::Owner)
            }
            Ok((_, holder_pttl)) => {
                if !req.waits() {
                    c.armed = false;
                    return Ok(Standing::Waiting);
                }
                c.queued = true;
                c.busy_sent = sent_at;
                c.pttl = holder_pttl;
                c.holder_ends = lease_ends_in(holder_pttl).map(|left| sent_at + left);
                Ok(Standing::Waiting)
            }
            Err(e) => {
                c.holder_ends = None;
                // A key of another type was never touched: nothing to undo.
                c.armed = e.kind() != ErrorKind::WrongType;
                Err(e)
            }
        }
    }
}

#[async_trait]
impl Queue for NativeQueue<'_> {
    type Claim = Claim;
    type Output = GuardParts;

    /// A waiting acquire listens on its client's channel of the lock. It joins before queueing
    /// when the server already has the subscription, so the hand-off message cannot be missed;
    /// otherwise it queues first, subscribes, and looks once more.
    async fn claim(&self, req: &Request) -> Result<Claim> {
        let inner = &self.m.inner;
        let owner = inner.new_owner();
        let (channel, sub) = if req.waits() {
            let channel = inner.grant_channel(&self.m.keys);
            let sub = inner.subs.join_active(&channel, &owner);
            (channel, sub)
        } else {
            (String::new(), None)
        };
        Ok(Claim {
            owner,
            armed: false,
            queued: false,
            channel,
            sub,
            busy_sent: Instant::now(),
            pttl: -1,
            holder_ends: None,
            beat: None,
            won: None,
            lease: req.lease().duration(),
        })
    }

    async fn enqueue(&self, c: &mut Claim, req: &Request) -> Result<Standing> {
        self.attempt(c, req).await
    }

    /// Listens until a hand-off, a word from the lock's beat (a hand-off whose message was
    /// lost, our place dropped, the lock free, the beat failing: see `beats.rs`) or the
    /// deadline, whichever comes first.
    async fn wait(&self, c: &mut Claim, req: &Request) -> Result<Woken> {
        let inner = &self.m.inner;
        let beat = c
            .beat
            .get_or_insert_with(|| inner.beats.join(&self.m.keys, &c.owner));
        if let Some(end) = c.holder_ends.take() {
            beat.holder_ends(end);
        }
        let Some(sub) = c.sub.as_ref() else {
            // Subscribing now: a hand-off before that sent a message we did not see.
            inner
                .subs
                .listen(&mut c.sub, &c.channel, Some(&c.owner), Instant::now())
                .await?;
            return Ok(Woken::Look);
        };
        let heard = req
            .within(async {
                tokio::select! {
                    _ = sub.notified() => true,
                    _ = beat.look() => false,
                }
            })
            .await;
        if heard != Some(true) {
            return Ok(Woken::Look);
        }
        if let Some(token) = c.sub.as_ref().and_then(Subscription::take_grant) {
            // Handed over after our last busy attempt: its expiry runs from no earlier. A
            // fixed lease is taken up by an attempt instead, which starts the whole lease then
            // (the hand-off's expiry runs from a moment the waiter cannot know), as is a
            // hand-off that must reach replicas first, and a candidate's (the attempt makes it
            // the leader).
            let expiry = req.lease().duration().min(inner.settings.waiter_timeout());
            let take = !inner.replicas.waits() && req.lease().is_watchdog() && self.value.is_none();
            let fresh = c.busy_sent + expiry > Instant::now() + expiry / 3;
            if take && fresh {
                c.won = Some(Won::HandedOver {
                    token,
                    since: c.busy_sent,
                    expiry,
                });
                return Ok(Woken::Owner);
            }
        }
        Ok(Woken::Look)
    }

    async fn standing(&self, c: &mut Claim, req: &Request) -> Result<Standing> {
        self.attempt(c, req).await
    }

    async fn hold(&self, c: &mut Claim, req: &Request) -> Result<Option<GuardParts>> {
        let m = self.m;
        let lease = req.lease();
        let ((parts, id), term) = match c.won.take() {
            None => return Ok(None),
            Some(Won::Taken {
                token,
                sent_at,
                epoch,
            }) => {
                // Still armed: if the replicas fail us, or the future is dropped, we let go.
                m.confirm_replicas(&c.owner, false, epoch).await?;
                let owner = std::mem::take(&mut c.owner);
                let guard = m.guard(owner, token, lease, sent_at, lease.duration(), false);
                (guard, token)
            }
            Some(Won::HandedOver {
                token,
                since,
                expiry,
            }) => {
                let owner = std::mem::take(&mut c.owner);
                (m.guard(owner, token, lease, since, expiry, false), token)
            }
        };
        if self.value.is_some() {
            // A leader: an admin's demotion is announced (see `leading.rs`).
            let (inner, keys, state) = (m.inner.clone(), m.keys.clone(), parts.state().clone());
            let term = FencingToken(term);
            tokio::spawn(demote_when_announced(inner, keys, term, id, state));
        }
        c.armed = false;
        Ok(Some(parts))
    }

    /// Leaves the queue, passing on a lock handed to us that we have not seen. Out of time, the
    /// leave is awaited; after a failure it goes to the background.
    async fn leave(&self, c: &mut Claim, exit: Exit) -> Result<()> {
        if !c.armed {
            return Ok(());
        }
        let (inner, wait) = (&self.m.inner, self.m.inner.settings.waiter_timeout());
        if exit == Exit::Failed {
            self.m.leave_later(&c.owner, wait, c.lease);
        } else {
            inner.leave_queue(&self.m.keys, &c.owner, wait).await?;
        }
        c.armed = false;
        Ok(())
    }

    fn abandon(&self, c: Claim) {
        if c.armed {
            let wait = self.m.inner.settings.waiter_timeout();
            self.m.leave_later(&c.owner, wait, c.lease);
        }
    }

    /// A queued waiter keeps its place through a failover or a restart for a heartbeat
    /// timeout (`waiter_timeout`), and the holder's lease as last seen would have kept it
    /// waiting that long anyway. Past that, the error is the answer.
    fn tolerance(&self, c: &Claim, _f: &Failures<'_>) -> Duration {
        if !c.queued {
            return Duration::ZERO;
        }
        // What is left of the holder's lease as last seen (attempts are rare now that the
        // beat keeps our place: that lease may be long past).
        let waiter_timeout = self.m.inner.settings.waiter_timeout();
        let lease = Duration::from_millis(c.pttl.max(0) as u64);
        waiter_timeout.max(lease.saturating_sub(c.busy_sent.elapsed()))
    }

    fn lock_name(&self) -> &str {
        &self.m.name
    }
}
