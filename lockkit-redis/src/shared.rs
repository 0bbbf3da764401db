//! The read-write lock and the semaphore: shared holders in a sorted set scored by their lease
//! deadline, an exclusive write hash, and waiting writers' intents that keep new readers out.
//! With `redisson_compat`, the same primitives on Redisson's layouts ([`redisson`]).

mod handle;
mod redisson;

use handle::{Capacity, Core, Layout, Mode};

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::{
    drive, moot_after, no_size, settle_size, size_mismatch, too_many, Armed, Exit, GuardParts,
    Held, Queue, RawRwLock, RawSemaphore, Request, Standing, StateCell, Undo, Woken,
};
use lockkit_core::{async_trait, Error, ErrorKind, Lease, Result};
use tokio::time::Instant;

use crate::client::{expiry_bound, wake_at, Inner, Reentries};
use crate::keys::LockKeys;
use crate::watchdog::Renewal;
use lockkit_core::spi::Watched;

struct Acquired {
    token: u64,
    sent_at: Instant,
    member: String,
}

/// Hands the reaper undoing an acquire of `member` whose reply was never seen, or withdrawing a
/// writer's intent (`mode` Write). `lease`: the lease the acquire asks for, the longest what it
/// took can live.
fn undo_later(core: &Core, member: &str, mode: Mode, lease: Duration) {
    let (keys, member) = (core.keys.clone(), member.to_string());
    let layout = core.layout;
    let inner = &core.inner;
    // What this attempt may have taken lives at most a lease; an intent, a heartbeat timeout.
    let moot = moot_after(&[lease, inner.settings.waiter_timeout()]);
    inner.reap("undo an unanswered acquire", moot, move |inner| {
        let (keys, member) = (keys.clone(), member.clone());
        async move {
            release(&inner, layout, &keys, &member, mode.release_code()).await?;
            if mode == Mode::Write {
                release(&inner, layout, &keys, &member, "i").await?;
            }
            Ok(())
        }
    });
}

/// Runs the shared release script: `w` write, `s` shared, `i` writer intent.
async fn release(
    inner: &Inner,
    layout: Layout,
    keys: &LockKeys,
    member: &str,
    mode: &str,
) -> Result<bool> {
    if layout == Layout::Redisson {
        return redisson::release(inner, keys, member, mode).await;
    }
    let latch = keys.unlock_latch(member);
    let mut inv = inner.scripts.shared_release.prepare_invoke();
    inv.key(&keys.lock)
        .key(&keys.holders)
        .key(&latch)
        .key(&keys.waiters)
        .arg(member)
        .arg(&keys.channel)
        .arg(inner.latch_ttl_ms())
        .arg(mode);
    Ok(inner.invoke_retrying(&inv, "release").await? == 1)
}

impl Core {
    /// The native acquire call of `mode` for `member` (lease_set or rw_write), counting a
    /// semaphore's permits against `capacity`.
    fn native_acquire_call(
        &self,
        mode: Mode,
        member: &str,
        lease: Duration,
        capacity: Capacity,
    ) -> redis::ScriptInvocation<'_> {
        let settings = &self.inner.settings;
        let mut inv = match mode {
            Mode::Write => self.inner.scripts.rw_write.prepare_invoke(),
            _ => self.inner.scripts.lease_set.prepare_invoke(),
        };
        inv.key(&self.keys.lock)
            .key(&self.keys.holders)
            .key(&self.keys.waiters)
            .key(&self.keys.fence);
        if mode != Mode::Write {
            inv.key(self.keys.size.as_ref().unwrap_or(&self.keys.holders));
        }
        inv.arg(member)
            .arg(lease.as_millis() as u64)
            .arg(settings.fence_ttl.as_millis() as u64);
        match mode {
            Mode::Write => {
                inv.arg(settings.waiter_timeout().as_millis() as u64);
            }
            Mode::Read => {
                inv.arg(1).arg(0);
            }
            Mode::Permits(n) => {
                inv.arg(n).arg(capacity.arg());
            }
        }
        inv
    }

    async fn acquire(&self, mode: Mode, req: &Request) -> Result<Option<Acquired>> {
        let lease = req.lease().duration();
        // The same call is sent on every attempt.
        let member = mode.member(self.layout, self.inner.new_owner());
        let call = match self.layout {
            Layout::Native => self.native_acquire_call(mode, &member, lease, self.capacity),
            Layout::Redisson => redisson::acquire_call(self, mode, &member, lease),
        };
        // A semaphore handle's size is checked when its acquire starts; a waiter then counts
        // against whatever size is stored, as an operator's set_permits changes it.
        let waiting = (self.layout == Layout::Native
            && matches!(self.capacity, Capacity::Asked(_)))
        .then(|| self.native_acquire_call(mode, &member, lease, Capacity::Stored));
        let queue = SharedQueue {
            core: self,
            mode,
            lease,
            member,
            call,
            waiting,
        };
        drive(&queue, req).await
    }

    fn parts(&self, mode: Mode, got: Acquired, lease: Lease) -> GuardParts {
        let watched = Watched {
            name: self.name.clone(),
            sent_at: got.sent_at,
            expiry: lease.duration(),
            entry: Renewal {
                kind: mode.renew_kind(self.layout),
                key: mode.owned_key(self.layout, &self.keys).to_string(),
                owner: got.member.clone(),
                leader: None,
            },
        };
        let token = got.token;
        self.inner
            .watchdog
            .hold(watched, token, lease, |id, state| {
                Box::new(SharedHeld {
                    inner: self.inner.clone(),
                    name: self.name.clone(),
                    keys: self.keys.clone(),
                    layout: self.layout,
                    member: got.member,
                    mode,
                    id,
                    token,
                    lease: std::sync::Mutex::new(lease),
                    reentries: Reentries::new(state.clone()),
                    state,
                })
            })
    }

    /// Whether anyone holds the read-write lock.
    async fn is_locked(&self) -> Result<bool> {
        if self.layout == Layout::Redisson {
            return redisson::is_locked(self).await;
        }
        let (write, used, _) = self.probe().await?;
        Ok(write || used > 0)
    }

    /// The semaphore's free permits, of its stored size (or the size asked for, before one is
    /// stored).
    async fn available(&self) -> Result<u32> {
        if self.layout == Layout::Redisson {
            return redisson::available(self).await;
        }
        let (_, used, stored) = self.probe().await?;
        let (size, _) = settle_size(&self.name, self.capacity.asked(), stored)?;
        Ok(size.saturating_sub(used))
    }

    /// Whether the write lock is held, the permits in use and a semaphore's stored size.
    async fn probe(&self) -> Result<(bool, u32, Option<u32>)> {
        let mut inv = self.inner.scripts.rw_probe.prepare_invoke();
        inv.key(&self.keys.lock).key(&self.keys.holders);
        if let Some(size) = &self.keys.size {
            inv.key(size);
        }
        let (write, used, size): (i64, i64, i64) = self.inner.invoke(&inv, "probe").await?;
        let size = u32::try_from(size).ok().filter(|&n| n > 0);
        Ok((write == 1, used.max(0) as u32, size))
    }

    /// A native semaphore's size key.
    fn size_key(&self) -> Result<&str> {
        self.keys
            .size
            .as_deref()
            .ok_or_else(|| Error::unsupported("Redisson's RSemaphore keeps no size"))
    }
}

/// A read-write lock handle.
#[derive(Debug)]
pub(crate) struct RedisRwLock {
    core: Core,
}

impl RedisRwLock {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> Result<Self> {
        let (keys, layout) = if inner.settings.redisson_compat {
            (LockKeys::redisson_rwlock(name)?, Layout::Redisson)
        } else {
            (
                LockKeys::rwlock(&inner.settings.prefix, name),
                Layout::Native,
            )
        };
        Ok(RedisRwLock {
            core: Core {
                inner,
                name: name.into(),
                keys: Arc::new(keys),
                layout,
                capacity: Capacity::Unlimited,
            },
        })
    }
}

#[async_trait]
impl RawRwLock for RedisRwLock {
    async fn read(&self, req: &Request) -> Result<Option<GuardParts>> {
        let got = self.core.acquire(Mode::Read, req).await?;
        Ok(got.map(|g| self.core.parts(Mode::Read, g, req.lease())))
    }

    async fn write(&self, req: &Request) -> Result<Option<GuardParts>> {
        let got = self.core.acquire(Mode::Write, req).await?;
        Ok(got.map(|g| self.core.parts(Mode::Write, g, req.lease())))
    }

    async fn is_locked(&self) -> Result<bool> {
        self.core.is_locked().await
    }

    async fn force_unlock(&self) -> Result<bool> {
        force(&self.core).await
    }
}

/// A shared primitive as the core driver's queue: every attempt sends the same call; a writer
/// that had to wait has registered its intent (which keeps new readers out) until it holds or
/// leaves. Waiters listen on the lock's channel.
struct SharedQueue<'a> {
    core: &'a Core,
    mode: Mode,
    lease: Duration,
    member: String,
    /// The first attempt's call.
    call: redis::ScriptInvocation<'a>,
    /// Every later attempt's, when it differs (a semaphore handle of a size then adopts the
    /// stored one).
    waiting: Option<redis::ScriptInvocation<'a>>,
}

/// One waiter of a shared primitive.
struct SharedClaim {
    /// An attempt was sent whose acquisition is not ours yet: undone if the claim ends.
    undo: bool,
    /// A waiting writer's intent is registered: withdrawn if the claim ends.
    intent: bool,
    sub: Option<crate::pubsub::Subscription>,
    /// Whether the last wait ended with a message.
    woken: bool,
    /// The message count of the channel when this waiter last passed a wake-up on.
    passed: u64,
    /// The holder's remaining lease at the last attempt (ms).
    pttl: i64,
    won: Option<(u64, Instant, crate::replicas::Ticket)>,
    /// Whether an attempt was answered.
    tried: bool,
}

impl SharedQueue<'_> {
    async fn attempt(&self, c: &mut SharedClaim) -> Result<Standing> {
        let inner = &self.core.inner;
        c.undo = true;
        let sent_at = Instant::now();
        let epoch = inner.replicas.ticket(&self.core.keys.lock);
        let call = match &self.waiting {
            Some(waiting) if c.tried => waiting,
            _ => &self.call,
        };
        let (ok, value): (i64, i64) = match inner.invoke(call, "acquire").await {
            Ok(r) => r,
            Err(e) => {
                c.undo = e.kind() != ErrorKind::WrongType;
                return Err(e);
            }
        };
        c.tried = true;
        if ok < 0 {
            // The semaphore's size refused us: nothing was taken.
            c.undo = false;
            let (name, stored) = (&*self.core.name, value.clamp(0, i64::from(u32::MAX)) as u32);
            return Err(match (ok, self.mode) {
                (-2, _) => size_mismatch(name, self.core.capacity.asked().unwrap_or(0), stored),
                (-3, Mode::Permits(n)) => too_many(name, n, stored),
                _ => no_size(name),
            });
        }
        if ok == 1 {
            c.won = Some((value as u64, sent_at, epoch));
            return Ok(Standing::Owner);
        }
        c.undo = false;
        c.intent |= self.mode == Mode::Write;
        c.pttl = value;
        Ok(Standing::Waiting)
    }

    /// Hands what the claim left undone to the reaper: an acquisition whose reply it did not
    /// see, or a writer's intent (withdrawn with it).
    fn hand_off(&self, c: &mut SharedClaim) {
        let (undo, intent) = (std::mem::take(&mut c.undo), std::mem::take(&mut c.intent));
        if undo || intent {
            undo_later(self.core, &self.member, self.mode, self.lease);
        }
    }

    /// Passes a wake-up we took on to the next waiter.
    fn forward(&self, c: &SharedClaim) {
        if c.woken {
            if let Some(s) = c.sub.as_ref() {
                s.forward();
            }
        }
    }
}

#[async_trait]
impl Queue for SharedQueue<'_> {
    type Claim = SharedClaim;
    type Output = Acquired;

    async fn claim(&self, _req: &Request) -> Result<SharedClaim> {
        Ok(SharedClaim {
            undo: false,
            intent: false,
            sub: None,
            woken: false,
            passed: 0,
            pttl: -1,
            won: None,
            tried: false,
        })
    }

    async fn enqueue(&self, c: &mut SharedClaim, _req: &Request) -> Result<Standing> {
        self.attempt(c).await
    }

    /// Bounded by the holder's remaining lease and, since intents and blocked readers have no
    /// lease to wait for, by the heartbeat. A wake-up the last look found no use for goes to
    /// the next local waiter first: a release wakes one waiter per client, and another may fit
    /// where this one did not (fewer permits, or a reader behind a writer's intent).
    async fn wait(&self, c: &mut SharedClaim, req: &Request) -> Result<Woken> {
        if std::mem::take(&mut c.woken) {
            if let Some(s) = c.sub.as_ref() {
                s.pass_on(&mut c.passed);
            }
        }
        let inner = &self.core.inner;
        let wake = wake_at(inner.settings.waiter_heartbeat, c.pttl, req);
        // Just subscribed (`None`): a release before that sent no message we saw; look again.
        let listened = inner
            .subs
            .listen(&mut c.sub, &self.core.keys.channel, None, wake);
        c.woken = listened.await? == Some(true);
        Ok(Woken::Look)
    }

    async fn standing(&self, c: &mut SharedClaim, _req: &Request) -> Result<Standing> {
        self.attempt(c).await
    }

    async fn hold(&self, c: &mut SharedClaim, _req: &Request) -> Result<Option<Acquired>> {
        let Some((token, sent_at, epoch)) = c.won.take() else {
            return Ok(None);
        };
        let core = self.core;
        // Still armed: if the replicas fail us, or the future is dropped, we let go.
        if let Err(e) = core.inner.replicas.acquired(epoch).await {
            let code = self.mode.release_code();
            let undone = release(&core.inner, core.layout, &core.keys, &self.member, code).await;
            // A rollback the server did not take stays armed: the reaper retries it.
            c.undo = undone.is_err();
            return Err(crate::error::rolled_back(&core.keys.lock, e));
        }
        (c.undo, c.intent) = (false, false);
        if self.mode != Mode::Write {
            // Shared holders can come in together: pass the wake-up on.
            self.forward(c);
        }
        Ok(Some(Acquired {
            token,
            sent_at,
            member: self.member.clone(),
        }))
    }

    /// Out of time, a writer withdraws its intent now; every other end goes to the reaper. A
    /// wake-up we took is passed on whatever the end (a semaphore's new size wakes one waiter,
    /// and one it refuses must pass it on).
    async fn leave(&self, c: &mut SharedClaim, exit: Exit) -> Result<()> {
        self.forward(c);
        if exit == Exit::TimedOut && c.intent && !c.undo {
            let core = self.core;
            release(&core.inner, core.layout, &core.keys, &self.member, "i").await?;
            c.intent = false;
        }
        self.hand_off(c);
        Ok(())
    }

    fn abandon(&self, mut c: SharedClaim) {
        self.hand_off(&mut c);
    }
}

async fn force(core: &Core) -> Result<bool> {
    if core.layout == Layout::Redisson {
        return redisson::force(core).await;
    }
    let mut inv = core.inner.scripts.shared_force.prepare_invoke();
    inv.key(&core.keys.lock)
        .key(&core.keys.holders)
        .arg(&core.keys.channel)
        .arg(core.inner.holder_channels());
    Ok(core.inner.invoke::<i64>(&inv, "force_unlock").await? == 1)
}

/// A semaphore handle.
#[derive(Debug)]
pub(crate) struct RedisSemaphore {
    core: Core,
}

impl RedisSemaphore {
    /// A semaphore asking for `permits` (`None`: the stored size; natively only, since
    /// Redisson's layout keeps no size).
    pub(crate) fn new(inner: Arc<Inner>, name: &str, permits: Option<u32>) -> Result<Self> {
        let (keys, layout, capacity) = if inner.settings.redisson_compat {
            let permits = lockkit_core::spi::own_size(permits)?;
            let keys = LockKeys::redisson_semaphore(name)?;
            (keys, Layout::Redisson, Capacity::Asked(permits))
        } else {
            let keys = LockKeys::semaphore(&inner.settings.prefix, name);
            let capacity = permits.map_or(Capacity::Stored, Capacity::Asked);
            (keys, Layout::Native, capacity)
        };
        Ok(RedisSemaphore {
            core: Core {
                inner,
                name: name.into(),
                keys: Arc::new(keys),
                layout,
                capacity,
            },
        })
    }
}

#[async_trait]
impl RawSemaphore for RedisSemaphore {
    async fn acquire(&self, n: u32, req: &Request) -> Result<Option<GuardParts>> {
        let got = self.core.acquire(Mode::Permits(n), req).await?;
        Ok(got.map(|g| self.core.parts(Mode::Permits(n), g, req.lease())))
    }

    async fn available(&self) -> Result<u32> {
        self.core.available().await
    }

    async fn size(&self) -> Result<Option<u32>> {
        let key = self.core.size_key()?;
        let inner = &self.core.inner;
        let got: Option<String> = inner.query(redis::cmd("GET").arg(key), "size").await?;
        got.map(|v| {
            v.parse().ok().filter(|&n: &u32| n > 0).ok_or_else(|| {
                Error::new(
                    ErrorKind::WrongType,
                    format!("key {key} holds {v:?}, not a semaphore size"),
                )
            })
        })
        .transpose()
    }

    /// Stores the size and wakes the waiters, in one script.
    async fn set_size(&self, permits: u32) -> Result<Option<u32>> {
        let core = &self.core;
        let mut inv = core.inner.scripts.sem_set_size.prepare_invoke();
        inv.key(core.size_key()?)
            .arg(permits)
            .arg(&core.keys.channel);
        let before: i64 = core.inner.invoke(&inv, "set_permits").await?;
        Ok(u32::try_from(before).ok().filter(|&n| n > 0))
    }
}

/// A downgrade whose answer was not seen: the server may have turned the write hold into a read
/// hold. The write hold is released first, so a downgrade that reaches the server later finds
/// nothing to turn, then the read hold.
struct UnseenDowngrade {
    inner: Arc<Inner>,
    layout: Layout,
    keys: Arc<LockKeys>,
    writer: String,
    reader: String,
    /// How long either hold may live on the server.
    moot: Duration,
}

impl Undo for UnseenDowngrade {
    fn undo(self) {
        let UnseenDowngrade {
            inner,
            layout,
            keys,
            writer,
            reader,
            moot,
        } = self;
        inner.reap("undo an unanswered downgrade", moot, move |inner| {
            let (keys, writer, reader) = (keys.clone(), writer.clone(), reader.clone());
            async move {
                release(&inner, layout, &keys, &writer, "w").await?;
                release(&inner, layout, &keys, &reader, "s").await?;
                Ok(())
            }
        });
    }
}

/// One held write lock, read lock or set of permits.
#[derive(Debug)]
struct SharedHeld {
    inner: Arc<Inner>,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    layout: Layout,
    member: String,
    mode: Mode,
    id: u64,
    token: u64,
    /// The lease as asked for, or as the last `extend` set it: a downgrade gives the read hold
    /// this one.
    lease: std::sync::Mutex<Lease>,
    /// Write holds: the reentries the server counts (see `Inner::reenter`).
    reentries: Reentries,
    state: StateCell,
}

#[async_trait]
impl Held for SharedHeld {
    async fn release(&self) -> Result<()> {
        self.inner.watchdog.unregister(self.id);
        let code = self.mode.release_code();
        let epoch = self.inner.replicas.ticket(&self.keys.lock);
        match release(&self.inner, self.layout, &self.keys, &self.member, code).await {
            Ok(true) => {
                self.inner.replicas.released(&self.name, epoch).await;
                Ok(())
            }
            Ok(false) => Err(Error::lost(&self.name)),
            Err(e) => {
                let (keys, member, layout) = (self.keys.clone(), self.member.clone(), self.layout);
                let moot = expiry_bound(&self.state);
                self.inner
                    .reap("release a shared hold", moot, move |inner| {
                        let (keys, member) = (keys.clone(), member.clone());
                        async move {
                            release(&inner, layout, &keys, &member, code)
                                .await
                                .map(drop)
                        }
                    });
                Err(e)
            }
        }
    }

    async fn extend(&self, lease: Duration) -> Result<()> {
        let renewal = Renewal {
            kind: self.mode.renew_kind(self.layout),
            key: self.mode.owned_key(self.layout, &self.keys).to_string(),
            owner: self.member.clone(),
            leader: None,
        };
        self.inner
            .extend(&renewal, lease, self.id, &self.name)
            .await?;
        *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = Lease::Fixed(lease);
        Ok(())
    }

    async fn reenter(&self) -> Result<()> {
        if self.mode != Mode::Write {
            return Ok(());
        }
        let (keys, member) = (&self.keys, &self.member);
        self.inner
            .reenter(&self.reentries, &keys.lock, member, self.id, &self.name)
            .await
    }

    async fn downgrade(&self) -> Result<GuardParts> {
        if self.mode != Mode::Write {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "only a write lock can be downgraded",
            ));
        }
        // Redisson's layout names a write hold `<owner>:write` and a read hold `<owner>`.
        let reader = match self.layout {
            Layout::Native => self.member.clone(),
            Layout::Redisson => self.member.trim_end_matches(":write").to_string(),
        };
        let mut inv = match self.layout {
            Layout::Native => self.inner.scripts.rw_downgrade.prepare_invoke(),
            Layout::Redisson => self.inner.scripts.rs_rw_downgrade.prepare_invoke(),
        };
        let lease = *self.lease.lock().unwrap_or_else(|e| e.into_inner());
        let lease_ms = lease.duration().as_millis() as u64;
        match self.layout {
            Layout::Native => inv
                .key(&self.keys.lock)
                .key(&self.keys.holders)
                .arg(&self.member)
                .arg(lease_ms)
                .arg(&self.keys.channel),
            Layout::Redisson => inv
                .key(&self.keys.lock)
                .arg(&self.member)
                .arg(&reader)
                .arg(lease_ms)
                .arg(&self.keys.holders)
                .arg(&self.keys.channel),
        };
        // Armed until the answer is seen: a downgrade the server took while its reply was lost
        // (or this future dropped) leaves a read hold no guard owns, which kept writers out
        // for a whole lease.
        let unseen = Armed::new(UnseenDowngrade {
            inner: self.inner.clone(),
            layout: self.layout,
            keys: self.keys.clone(),
            writer: self.member.clone(),
            reader: reader.clone(),
            moot: moot_after(&[lease.duration(), self.state.clock().server_bound()]),
        });
        let sent_at = Instant::now();
        let answer = self.inner.invoke::<i64>(&inv, "downgrade").await?;
        unseen.disarm();
        if answer != 1 {
            self.inner.watchdog.lost(self.id);
            return Err(Error::lost(&self.name));
        }
        self.inner.watchdog.unregister(self.id);
        let core = Core {
            inner: self.inner.clone(),
            name: self.name.clone(),
            keys: self.keys.clone(),
            layout: self.layout,
            capacity: Capacity::Unlimited,
        };
        // The read ownership keeps the write ownership's token: no writer came in between.
        Ok(core.parts(
            Mode::Read,
            Acquired {
                token: self.token,
                sent_at,
                member: reader,
            },
            lease,
        ))
    }
}
