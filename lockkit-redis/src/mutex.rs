//! The mutex: Redisson RLock semantics with ownership per acquisition.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::{
    async_trait, AcquireOptions, DistLock, Error, ErrorKind, FencingToken, GuardParts, Held,
    HoldRegistry, Lease, LockGuard, Result, StateCell,
};
use redis::Value;
use tokio::time::Instant;

use crate::backend::{check_lease, Inner};
use crate::keys::LockKeys;
use crate::watchdog::Watched;

/// How long a woken waiter that found the lock re-taken waits before it listens again.
const BARGED_BACKOFF: Duration = Duration::from_millis(1);

/// A mutex handle.
#[derive(Debug)]
pub(crate) struct RedisMutex {
    inner: Arc<Inner>,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    holds: HoldRegistry,
}

enum Attempt {
    Acquired { token: u64, sent_at: Instant },
    Busy { pttl: i64 },
}

/// Releases an acquisition whose reply we never saw (the future was dropped, or the reply was
/// lost), so a cancelled acquire leaves no lock behind.
struct Pending<'a> {
    inner: &'a Arc<Inner>,
    keys: &'a Arc<LockKeys>,
    owner: &'a str,
    fair: bool,
    armed: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.armed {
            let (keys, owner, fair) = (self.keys.clone(), self.owner.to_string(), self.fair);
            self.inner.in_background(|inner| async move {
                let _ = inner.release(&keys, &owner, fair).await;
                if fair {
                    let _ = inner.leave_queue(&keys, &owner).await;
                }
            });
        }
    }
}

/// Takes a fair waiter out of the queue if its acquire ends without the lock (timeout, error,
/// or the future was dropped).
struct Queued<'a> {
    inner: &'a Arc<Inner>,
    keys: &'a Arc<LockKeys>,
    owner: &'a str,
    armed: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if self.armed {
            let (keys, owner) = (self.keys.clone(), self.owner.to_string());
            self.inner.in_background(|inner| async move {
                let _ = inner.leave_queue(&keys, &owner).await;
            });
        }
    }
}

impl RedisMutex {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> Result<Self> {
        let keys = Arc::new(inner.keys(name)?);
        Ok(RedisMutex {
            inner,
            name: name.into(),
            keys,
            holds: HoldRegistry::new(),
        })
    }

    async fn attempt(&self, owner: &str, lease: Duration, fair: bool) -> Result<Attempt> {
        let settings = &self.inner.settings;
        let scripts = &self.inner.scripts;
        let mut inv = if fair {
            scripts.fair_acquire.prepare_invoke()
        } else {
            scripts.acquire.prepare_invoke()
        };
        inv.key(&self.keys.lock).key(&self.keys.fence);
        if !fair {
            inv.key(&self.keys.wake);
        }
        inv.arg(owner)
            .arg(lease.as_millis() as u64)
            .arg(settings.fence_ttl.as_millis() as u64);
        if fair {
            inv.key(&self.keys.queue)
                .key(&self.keys.waiters)
                .arg((settings.fair_heartbeat * 3).as_millis() as u64)
                .arg(&self.keys.channel);
        }
        let mut pending = Pending {
            inner: &self.inner,
            keys: &self.keys,
            owner,
            fair,
            armed: true,
        };
        let sent_at = Instant::now();
        let (acquired, value): (i64, i64) = match self.inner.invoke(&inv, "acquire").await {
            Ok(r) => r,
            Err(e) if e.kind() == &ErrorKind::WrongType => {
                pending.armed = false;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        if acquired != 1 {
            pending.armed = false;
            return Ok(Attempt::Busy { pttl: value });
        }
        if settings.wait_replicas > 0 {
            let acked: i64 = self
                .inner
                .query(
                    redis::cmd("WAIT")
                        .arg(settings.wait_replicas)
                        .arg(settings.wait_timeout.as_millis() as u64),
                    "WAIT",
                )
                .await?;
            if acked < i64::from(settings.wait_replicas) {
                pending.armed = false;
                let _ = self.inner.release(&self.keys, owner, fair).await;
                return Err(Error::new(
                    ErrorKind::ReplicaSync,
                    format!(
                        "lock {:?}: {acked} of {} replicas acknowledged the acquire within {:?}; \
                         rolled back",
                        self.name, settings.wait_replicas, settings.wait_timeout
                    ),
                ));
            }
        }
        pending.armed = false;
        Ok(Attempt::Acquired {
            token: value as u64,
            sent_at,
        })
    }

    /// FIFO: queued waiters are served in arrival order; each release wakes only the first one
    /// (by name, over the lock's channel). Waiters refresh a heartbeat every `fair_heartbeat`, so
    /// a dead waiter is skipped after 3 missed beats and a live one is never dropped.
    async fn acquire_fair(&self, opts: &AcquireOptions) -> Result<Option<LockGuard>> {
        let lease = opts.lease;
        let heartbeat = self.inner.settings.fair_heartbeat;
        let give_up_at = opts.wait_budget().map(|d| Instant::now() + d);
        let owner = self.inner.new_owner();
        let mut queued = Queued {
            inner: &self.inner,
            keys: &self.keys,
            owner: &owner,
            armed: false,
        };
        let mut sub: Option<crate::pubsub::Subscription> = None;
        loop {
            let pttl = match self.attempt(&owner, lease.duration(), true).await {
                Ok(Attempt::Acquired { token, sent_at }) => {
                    queued.armed = false;
                    drop(queued);
                    return Ok(Some(self.guard(owner.clone(), token, lease, sent_at, true)));
                }
                Ok(Attempt::Busy { pttl }) => pttl,
                Err(e) => {
                    queued.armed = true;
                    return Err(e);
                }
            };
            queued.armed = true;
            let left = give_up_at.map(|at| at.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                queued.armed = false;
                let _ = self.inner.leave_queue(&self.keys, &owner).await;
                return Ok(None);
            }
            let Some(s) = sub.as_ref() else {
                sub = Some(
                    self.inner
                        .subs
                        .subscribe_as(&self.keys.channel, Some(&owner))
                        .await?,
                );
                continue;
            };
            // Come back within one heartbeat to keep our place, and at the holder's expiry.
            let mut wait = heartbeat;
            if pttl > 0 {
                wait = wait.min(Duration::from_millis(pttl as u64));
            }
            if let Some(left) = left {
                wait = wait.min(left);
            }
            let _ = tokio::time::timeout(wait, s.notified()).await;
        }
    }

    fn guard(
        &self,
        owner: String,
        token: u64,
        lease: Lease,
        sent_at: Instant,
        fair: bool,
    ) -> LockGuard {
        let state = StateCell::new();
        let id = self.inner.watchdog.register(Watched {
            kind: crate::watchdog::RenewKind::Hash,
            key: self.keys.lock.clone(),
            owner: owner.clone(),
            lease: lease.duration(),
            renew: lease.is_watchdog(),
            sent_at,
            state: state.clone(),
        });
        let held = RedisHeld {
            inner: self.inner.clone(),
            name: self.name.clone(),
            keys: self.keys.clone(),
            owner,
            id,
            fair,
        };
        let guard = LockGuard::new(GuardParts::new(
            self.name.clone(),
            FencingToken(token),
            lease,
            state,
            Box::new(held),
        ));
        self.holds.track(&guard);
        guard
    }
}

#[async_trait]
impl DistLock for RedisMutex {
    fn name(&self) -> &str {
        &self.name
    }

    /// # Cancel safety
    /// Dropping the future leaves no lock behind: an acquire whose reply was not seen is
    /// released in the background by its (unique) owner field; a waiter holds no server state
    /// except its share of the channel subscription, which is dropped with it.
    async fn acquire(&self, opts: &AcquireOptions) -> Result<Option<LockGuard>> {
        let lease = opts.lease;
        check_lease(lease.duration())?;
        if opts.fair {
            return self.acquire_fair(opts).await;
        }
        let give_up_at = opts.wait_budget().map(|d| Instant::now() + d);
        let owner = self.inner.new_owner();
        let mut sub: Option<crate::pubsub::Subscription> = None;
        let mut woken = false;
        loop {
            let pttl = match self.attempt(&owner, lease.duration(), false).await? {
                Attempt::Acquired { token, sent_at } => {
                    return Ok(Some(self.guard(owner, token, lease, sent_at, false)));
                }
                Attempt::Busy { pttl } => pttl,
            };
            if woken {
                // Another client took the lock between the release and our attempt (it was
                // probably the releaser, looping back). Pausing a moment before listening
                // again keeps a busy lock from making its waiters retry on every release; our
                // attempt raised the wake flag, so the next release still wakes us.
                let pause = BARGED_BACKOFF.min(give_up_at.map_or(BARGED_BACKOFF, |at| {
                    at.saturating_duration_since(Instant::now())
                }));
                tokio::time::sleep(pause).await;
            }
            let now = Instant::now();
            let left = give_up_at.map(|at| at.saturating_duration_since(now));
            if left == Some(Duration::ZERO) {
                // A wake-up we took is not lost for the next waiter: our busy attempt raised
                // the wake flag again.
                return Ok(None);
            }
            let Some(s) = sub.as_ref() else {
                sub = Some(self.inner.subs.subscribe(&self.keys.channel).await?);
                // A release between the attempt and the subscription sent no message we saw.
                continue;
            };
            // A missed message costs at most the holder's remaining lease.
            let mut wait = match pttl {
                p if p > 0 => Duration::from_millis(p as u64),
                -1 => Duration::from_secs(1),
                _ => Duration::from_millis(1),
            };
            if let Some(left) = left {
                wait = wait.min(left);
            }
            woken = tokio::time::timeout(wait, s.notified()).await.is_ok();
        }
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(probe(&self.inner, &self.keys).await?.locked)
    }

    async fn hold_count(&self) -> Result<u32> {
        Ok(self.holds.hold_count())
    }

    async fn force_unlock(&self) -> Result<bool> {
        let mut inv = self.inner.scripts.force_unlock.prepare_invoke();
        inv.key(&self.keys.lock)
            .key(&self.keys.queue)
            .arg(&self.keys.channel);
        let r: i64 = self.inner.invoke(&inv, "force_unlock").await?;
        Ok(r == 1)
    }

    async fn remaining_lease(&self) -> Result<Option<Duration>> {
        let p = probe(&self.inner, &self.keys).await?;
        Ok(if p.locked {
            Some(p.pttl.unwrap_or(Duration::MAX))
        } else {
            None
        })
    }
}

/// What the probe script saw.
pub(crate) struct Probe {
    pub(crate) locked: bool,
    /// The remaining lease; `None` when free or when the key has no expiry.
    pub(crate) pttl: Option<Duration>,
    pub(crate) owners: Vec<(String, i64)>,
}

pub(crate) async fn probe(inner: &Inner, keys: &LockKeys) -> Result<Probe> {
    let mut inv = inner.scripts.probe.prepare_invoke();
    inv.key(&keys.lock);
    let values: Vec<Value> = inner.invoke(&inv, "probe").await?;
    let pttl = match values.first() {
        Some(Value::Int(p)) => *p,
        _ => -2,
    };
    let mut owners = Vec::new();
    for pair in values[1.min(values.len())..].chunks(2) {
        if let [owner, holds] = pair {
            let owner: String = redis::from_redis_value_ref(owner).unwrap_or_default();
            let holds: i64 = redis::from_redis_value_ref(holds).unwrap_or_default();
            owners.push((owner, holds));
        }
    }
    Ok(Probe {
        locked: pttl != -2,
        pttl: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
        owners,
    })
}

/// One held ownership of a mutex.
#[derive(Debug)]
struct RedisHeld {
    inner: Arc<Inner>,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    owner: String,
    id: u64,
    /// Acquired in fair mode: the release wakes the first queued waiter by name.
    fair: bool,
}

#[async_trait]
impl Held for RedisHeld {
    async fn release(&self) -> Result<()> {
        self.inner.watchdog.unregister(self.id);
        if self
            .inner
            .release(&self.keys, &self.owner, self.fair)
            .await?
        {
            Ok(())
        } else {
            Err(Error::not_held(&self.name))
        }
    }

    fn release_in_background(&self) {
        self.inner.watchdog.unregister(self.id);
        let (keys, owner, fair) = (self.keys.clone(), self.owner.clone(), self.fair);
        self.inner.in_background(|inner| async move {
            if let Err(e) = inner.release(&keys, &owner, fair).await {
                tracing::debug!(error = %e, "lockkit: background release failed; the lease will end it");
            }
        });
    }

    async fn extend(&self, lease: Duration) -> Result<()> {
        check_lease(lease)?;
        let renew = &self.inner.scripts.renew;
        self.inner
            .extend(
                renew,
                &self.keys.lock,
                &self.owner,
                lease,
                self.id,
                &self.name,
            )
            .await
    }

    async fn reenter(&self) -> Result<()> {
        self.inner
            .reenter(&self.keys.lock, &self.owner, self.id, &self.name)
            .await
    }
}
