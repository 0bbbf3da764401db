//! Waiting on a mutex in Redisson's layout (`redisson_compat`): Redisson's own protocol, so
//! Java clients wake lockkit waiters and the other way round. `RLock`: a release publishes `0`
//! on the lock's channel; each client wakes one local waiter per message, and the waiter tries
//! again. Fair mode is `RFairLock`: one queue for both libraries' waiters (see
//! `scripts/rs_fair_queue.lua`), each woken on a channel of its own.

use std::time::Duration;

use lockkit_core::spi::{drive, moot_after, Exit, GuardParts, Queue, Request, Standing, Woken};
use lockkit_core::{async_trait, ErrorKind, Result};
use tokio::time::Instant;

use super::handle::RedisMutex;
use crate::client::{lease_ends_in, wake_at};
use crate::replicas::Ticket;

/// How long a woken waiter that found the lock re-taken waits before it listens again.
const BARGED_BACKOFF: Duration = Duration::from_millis(1);

/// Hands the reaper the release of an acquisition whose reply `owner` never saw (the future was
/// dropped, or the reply was lost), so a cancelled acquire leaves no lock behind. `fair`: a fair
/// attempt's wait in Redisson's queue; `lease`: the lease the attempt asked for, the longest
/// what it took can live.
fn undo_later(m: &RedisMutex, owner: &str, fair: Option<Duration>, lease: Duration) {
    let (keys, owner) = (m.keys.clone(), owner.to_string());
    let moot = moot_after(&[lease, fair.unwrap_or_default()]);
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

/// Redisson's RLock: a woken waiter tries again; the lock is not fair.
pub(super) async fn acquire(m: &RedisMutex, req: &Request) -> Result<Option<GuardParts>> {
    let lease = req.lease().duration();
    drive(
        &RsQueue {
            m,
            lease,
            fair: None,
        },
        req,
    )
    .await
}

/// Redisson's RFairLock: waiters, Redisson's and lockkit's, are served in arrival order from one
/// queue, each keeping its place for its wait after the one before it (an acquire's deadline,
/// else `fair_lock_wait_timeout`); each release wakes only the first one, by `0` on
/// `<lock channel>:<owner>`. A waiter that gives up leaves the queue; one whose process died is
/// skipped once its place lapses, as Redisson's are.
pub(super) async fn acquire_fair(m: &RedisMutex, req: &Request) -> Result<Option<GuardParts>> {
    let fair = Fair {
        wait: req.remaining().unwrap_or(m.inner.settings.fair_lock_wait),
        queue: req.waits(),
    };
    let lease = req.lease().duration();
    drive(
        &RsQueue {
            m,
            lease,
            fair: Some(fair),
        },
        req,
    )
    .await
}

/// Redisson's mutex protocols as the core driver's queue.
struct RsQueue<'a> {
    m: &'a RedisMutex,
    lease: Duration,
    fair: Option<Fair>,
}

/// One waiter in Redisson's layout.
struct Claim {
    owner: String,
    /// An attempt was sent whose acquisition is not ours yet (no reply, or replicas to
    /// confirm): undone if the claim ends.
    undo: bool,
    /// In the fair queue: left if the claim ends.
    queued: bool,
    /// The channel that wakes it: the lock's, or its own in the fair queue.
    channel: String,
    sub: Option<crate::pubsub::Subscription>,
    /// Whether the last wait ended with a message.
    woken: bool,
    /// The holder's remaining lease at the last attempt (ms).
    pttl: i64,
    won: Option<(u64, Instant, Ticket)>,
}

impl RsQueue<'_> {
    /// Hands what the claim left undone to the reaper: an acquisition whose reply it did not
    /// see (which leaves the fair queue too), or its place in the fair queue.
    fn hand_off(&self, c: &mut Claim) {
        let wait = self.fair.map(|f| f.wait);
        if std::mem::take(&mut c.undo) {
            undo_later(self.m, &c.owner, wait, self.lease);
        } else if c.queued {
            // Only queued: what an attempt took is undone above.
            self.m
                .leave_later(&c.owner, wait.unwrap_or_default(), Duration::ZERO);
        }
        c.queued = false;
    }

    /// One attempt; in Redisson's fair queue when fair.
    async fn attempt(&self, c: &mut Claim) -> Result<Standing> {
        let m = self.m;
        let scripts = &m.inner.scripts;
        let script = if self.fair.is_some() {
            &scripts.rs_fair_acquire
        } else {
            &scripts.try_acquire
        };
        let mut inv = m.acquire_invocation(script, &c.owner, self.lease);
        if let Some(f) = self.fair {
            inv.key(&m.keys.queue)
                .key(&m.keys.waiters)
                .arg(f.wait.as_millis().max(1) as u64)
                .arg(crate::client::wall_ms())
                .arg(&m.keys.channel)
                .arg(if f.queue { "1" } else { "0" });
        }
        c.undo = true;
        let sent_at = Instant::now();
        let epoch = m.inner.replicas.ticket(&m.keys.lock);
        let (acquired, value): (i64, i64) = match m.inner.invoke(&inv, "acquire").await {
            Ok(r) => r,
            Err(e) => {
                c.undo = e.kind() != ErrorKind::WrongType;
                // A fair attempt whose reply was lost may have queued us.
                c.queued |= self.fair.is_some_and(|f| f.queue);
                return Err(e);
            }
        };
        if acquired == 1 {
            c.won = Some((value as u64, sent_at, epoch));
            return Ok(Standing::Owner);
        }
        c.undo = false;
        c.pttl = value;
        // A try never queued.
        c.queued |= self.fair.is_some_and(|f| f.queue);
        Ok(Standing::Waiting)
    }
}

#[async_trait]
impl Queue for RsQueue<'_> {
    type Claim = Claim;
    type Output = GuardParts;

    async fn claim(&self, _req: &Request) -> Result<Claim> {
        let owner = self.m.inner.new_owner();
        let channel = match self.fair {
            Some(_) => format!("{}:{owner}", self.m.keys.channel),
            None => self.m.keys.channel.clone(),
        };
        Ok(Claim {
            owner,
            undo: false,
            queued: false,
            channel,
            sub: None,
            woken: false,
            pttl: -1,
            won: None,
        })
    }

    async fn enqueue(&self, c: &mut Claim, _req: &Request) -> Result<Standing> {
        self.attempt(c).await
    }

    async fn wait(&self, c: &mut Claim, req: &Request) -> Result<Woken> {
        let m = self.m;
        if std::mem::take(&mut c.woken) && self.fair.is_none() {
            // Another client took the lock between the release and our attempt (it was
            // probably the releaser, looping back): pause a moment before listening again, so
            // a busy lock does not make its waiters retry on every release.
            tokio::time::sleep_until(req.bound(Instant::now() + BARGED_BACKOFF)).await;
            if req.expired() {
                return Ok(Woken::Look);
            }
        }
        // A missed message costs at most the holder's remaining lease (unfair: a second when it
        // has no expiry; fair: a heartbeat at most).
        let most = match self.fair {
            Some(_) => m.inner.settings.waiter_heartbeat,
            None => lease_ends_in(c.pttl).unwrap_or(Duration::from_secs(1)),
        };
        let wake = wake_at(most, c.pttl, req);
        // Just subscribed (`None`): a release before that sent no message we saw; look again.
        c.woken = m
            .inner
            .subs
            .listen(&mut c.sub, &c.channel, None, wake)
            .await?
            == Some(true);
        Ok(Woken::Look)
    }

    async fn standing(&self, c: &mut Claim, _req: &Request) -> Result<Standing> {
        self.attempt(c).await
    }

    async fn hold(&self, c: &mut Claim, req: &Request) -> Result<Option<GuardParts>> {
        let Some((token, sent_at, epoch)) = c.won.take() else {
            return Ok(None);
        };
        let fair = self.fair.is_some();
        // Still armed: if the replicas fail us, or the future is dropped, we let go.
        self.m.confirm_replicas(&c.owner, fair, epoch).await?;
        (c.undo, c.queued) = (false, false);
        let owner = std::mem::take(&mut c.owner);
        let lease = req.lease();
        Ok(Some(
            self.m
                .guard(owner, token, lease, sent_at, lease.duration(), fair)
                .0,
        ))
    }

    /// Out of time, a fair waiter leaves the queue now; every other end goes to the reaper.
    async fn leave(&self, c: &mut Claim, exit: Exit) -> Result<()> {
        match self.fair {
            Some(f) if exit == Exit::TimedOut && c.queued && !c.undo => {
                self.m
                    .inner
                    .leave_queue(&self.m.keys, &c.owner, f.wait)
                    .await?;
                c.queued = false;
            }
            _ => self.hand_off(c),
        }
        Ok(())
    }

    fn abandon(&self, mut c: Claim) {
        self.hand_off(&mut c);
    }
}
