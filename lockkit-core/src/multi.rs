//! `MultiLock`: several locks taken as one, all or none.
//!
//! The members are taken one after the other in one fixed global order (by primitive, then by
//! name), so two multi-locks over overlapping sets always take their common members in the same
//! order and can never deadlock each other. The whole set shares one wait budget (Curator's
//! `InterProcessMultiLock` spends a full timeout on each lock). When a member cannot be had
//! within what is left of the budget, or its acquire fails, the members taken so far are released
//! before the acquire returns, so a failed, timed-out or cancelled multi-acquire leaves no member
//! held (a dropped acquire drops its guards, which release in the background).
//!
//! Before it returns, the acquire checks every member again: an early member whose fixed lease or
//! session ran out while later members were awaited makes the set not held, so the whole set is
//! given back and taken again within the same budget (or the acquire returns `Ok(None)`). A
//! multi-acquire never returns a guard with a member that is already lost.
//!
//! A member lost *while the set is held* turns the guard `Lost` and resolves `lost()`, but the
//! other members stay held until the guard is released or dropped. This is deliberate: the code
//! under the guard may still be writing under those members, and letting another holder into
//! them behind its back would be worse than keeping them a little longer. Stop at `lost()` and
//! release (or drop) the guard; `release()` then reports `LockLost`.
//!
//! A lock may be a member once: two members the backend keeps in one place (on Redisson's layout
//! a mutex and an RW lock of one name are one hash) are refused, as a name given twice is.
//!
//! Ordered acquisition works on every backend, because every backend has mutexes and RW locks;
//! it is what Redisson's `RedissonMultiLock` does. It is not atomic: between two members another
//! client may take the second, and then the first is given back. Where the backend can take a
//! set of mutexes in one atomic step ([`Backend::take_all`](crate::spi::Backend::take_all): one
//! Lua script on a Redis server, one etcd transaction, one ZooKeeper `multi`), an acquire tries
//! that first, one round trip for the whole set instead of one per member; a set it finds busy
//! (a member held, or on etcd and ZooKeeper queued for) is taken member by member as above (a
//! `try_lock` is over at once).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::guard::{LockGuard, ReadGuard, WriteGuard};
use crate::inspect::{HoldMode, Primitive};
use crate::kernel::{Kernel, BUDGET_GRACE};
use crate::member::Member;
use crate::mutex::{forever, Mutex};
use crate::options::{AcquireOptions, Wait};
use crate::ownership::Ownership;
use crate::rwlock::{read_guard, write_guard, RwLock};
use crate::spi::Taken;
use crate::state::{LockState, Lost};

/// A member's handle.
#[derive(Clone, Debug)]
enum Handle {
    Mutex(Mutex),
    Read(RwLock),
    Write(RwLock),
}

impl Handle {
    fn name(&self) -> &str {
        match self {
            Handle::Mutex(m) => m.name(),
            Handle::Read(rw) | Handle::Write(rw) => rw.name(),
        }
    }

    fn member(&self) -> Member<'_> {
        match self {
            Handle::Mutex(m) => Member::Mutex(m.name()),
            Handle::Read(rw) => Member::Read(rw.name()),
            Handle::Write(rw) => Member::Write(rw.name()),
        }
    }

    /// The guard of `own`, an ownership of this member taken by an atomic take.
    fn adopt(&self, own: Arc<Ownership>) -> Held {
        match self {
            Handle::Mutex(m) => Held::Mutex(m.guard(own)),
            Handle::Read(_) => Held::Read(read_guard(own)),
            Handle::Write(_) => Held::Write(write_guard(own)),
        }
    }

    async fn acquire(&self, opts: &AcquireOptions) -> Result<Option<Held>> {
        Ok(match self {
            Handle::Mutex(m) => m.acquire(opts).await?.map(Held::Mutex),
            Handle::Read(rw) => rw.read(opts).await?.map(Held::Read),
            Handle::Write(rw) => rw.write(opts).await?.map(Held::Write),
        })
    }
}

/// A member's guard.
enum Held {
    Mutex(LockGuard),
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Held {
    fn name(&self) -> &str {
        match self {
            Held::Mutex(g) => g.name(),
            Held::Read(g) => g.name(),
            Held::Write(g) => g.name(),
        }
    }

    fn mode(&self) -> HoldMode {
        match self {
            Held::Read(_) => HoldMode::Shared,
            _ => HoldMode::Exclusive,
        }
    }

    fn token(&self) -> FencingToken {
        match self {
            Held::Mutex(g) => g.token(),
            Held::Read(g) => g.token(),
            Held::Write(g) => g.token(),
        }
    }

    fn state(&self) -> LockState {
        match self {
            Held::Mutex(g) => g.state(),
            Held::Read(g) => g.state(),
            Held::Write(g) => g.state(),
        }
    }

    fn lost(&self) -> Lost {
        match self {
            Held::Mutex(g) => g.lost(),
            Held::Read(g) => g.lost(),
            Held::Write(g) => g.lost(),
        }
    }

    async fn release(self) -> Result<()> {
        match self {
            Held::Mutex(g) => g.release().await,
            Held::Read(g) => g.release().await,
            Held::Write(g) => g.release().await,
        }
    }
}

/// Several locks taken as one, all or none, made by [`Locks::multi`](crate::Locks::multi) or
/// [`Locks::multi_of`](crate::Locks::multi_of).
/// Cheap to clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lockkit_core::Result<()> {
/// let locks = lockkit_core::mem::connect(&lockkit_core::LockConfig::new("mem://multi-doc")).await?;
/// let both = locks.multi(["account/1", "account/2"])?;
/// let guard = both.lock().await?;
/// for (name, token) in guard.tokens() {
///     println!("{name}: token {token}"); // pass each to the resource it protects
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    /// In the global order.
    members: Vec<Handle>,
    kernel: Arc<Kernel>,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.members.iter().map(Handle::name))
            .finish()
    }
}

impl MultiLock {
    /// The multi-lock over `members`, whose handles `mutex` and `rwlock` make; `resource`
    /// says which lock on the server a member is ([`Backend::resource`](crate::spi::Backend)).
    pub(crate) fn new(
        kernel: Arc<Kernel>,
        members: &[Member<'_>],
        resource: impl Fn(Primitive, &str) -> String,
        mutex: impl Fn(&str) -> Result<Mutex>,
        rwlock: impl Fn(&str) -> Result<RwLock>,
    ) -> Result<MultiLock> {
        if members.is_empty() {
            return Err(Error::invalid("a multi-lock needs at least one member"));
        }
        let mut sorted = members.to_vec();
        sorted.sort_by(|a, b| {
            (a.primitive().as_str(), a.name()).cmp(&(b.primitive().as_str(), b.name()))
        });
        // Two members are one lock when the backend keeps them in one place (Redisson's layout
        // keeps a mutex and an RW lock of one name in one hash), not only when they are equal.
        let mut seen = std::collections::HashMap::new();
        for m in &sorted {
            if let Some(first) = seen.insert(resource(m.primitive(), m.name()), *m) {
                return Err(Error::invalid(format!(
                    "{first:?} and {m:?} are one lock on this backend; each lock may be a \
                     member of a multi-lock once"
                )));
            }
        }
        let members = sorted
            .iter()
            .map(|m| {
                Ok(match m {
                    Member::Mutex(n) => Handle::Mutex(mutex(n)?),
                    Member::Read(n) => Handle::Read(rwlock(n)?),
                    Member::Write(n) => Handle::Write(rwlock(n)?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(MultiLock { members, kernel })
    }

    /// The members' names, in the order they are taken.
    pub fn names(&self) -> Vec<&str> {
        self.members.iter().map(Handle::name).collect()
    }

    /// Takes every member per `opts`, all within `opts.wait` for the whole set; `Ok(None)` when
    /// the budget ran out first. The lease and order options apply to each member. On `Ok(None)`
    /// or an error, every member taken so far has been given back: released, or (when the
    /// server does not answer within the budget plus the core's 100 ms grace) being released in
    /// the background.
    ///
    /// A set is never returned with a member that is already lost; it is taken again instead.
    /// With [`Wait::Forever`] and a fixed lease shorter than the time the whole set takes to
    /// acquire, that never ends: pick a lease that covers the set.
    ///
    /// # Cancel safety
    /// Dropping the future drops the members taken so far, which releases them in the
    /// background.
    pub async fn acquire(&self, opts: &AcquireOptions) -> Result<Option<MultiGuard>> {
        let deadline = match opts.wait {
            // A budget too long for the clock is no budget.
            Wait::For(d) => Instant::now().checked_add(d),
            Wait::None => Some(Instant::now()),
            Wait::Forever => None,
        };
        let had_budget = deadline.is_some_and(|d| Instant::now() < d);
        match self.take_all(opts, deadline).await? {
            Taken::All(set) => return Ok(Some(set)),
            Taken::Busy if opts.wait == Wait::None => return Ok(None),
            // A step that used up what budget there was (a server that does not answer) ends
            // the acquire: the members' own tries would each take the kernel's grace again.
            _ if had_budget && deadline.is_some_and(|d| Instant::now() >= d) => return Ok(None),
            Taken::Busy | Taken::NotHere => {}
        }
        loop {
            let mut held = Vec::with_capacity(self.members.len());
            for member in &self.members {
                let opts = match deadline {
                    // What is left of the budget; once it is gone, one attempt each.
                    Some(d) => opts.wait(d.saturating_duration_since(Instant::now())),
                    None => *opts,
                };
                match member.acquire(&opts).await {
                    Ok(Some(g)) => held.push(g),
                    Ok(None) => {
                        give_back(held, deadline).await;
                        return Ok(None);
                    }
                    Err(e) => {
                        give_back(held, deadline).await;
                        return Err(e);
                    }
                }
            }
            // An early member's lease or session may have ended while later ones were awaited:
            // a set with a lost member is not held, so it is given back and taken again while
            // the budget lasts.
            if !held.iter().any(|g| g.state() == LockState::Lost) {
                return Ok(Some(MultiGuard { members: held }));
            }
            give_back(held, deadline).await;
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
        }
    }

    /// Every member at once, in one atomic step of the backend's
    /// ([`Backend::take_all`](crate::spi::Backend::take_all)), when it has one for this set.
    /// A set with a member lost by the time it is put together is given back within the budget
    /// (`deadline`) and counts as busy. A step that failed in a way worth trying again (a
    /// connection lost, a lease gone) is left to ordered acquisition, which rides such failures
    /// out member by member (a `try_lock` answers the error); its backend cleans up whatever
    /// the step may have done.
    async fn take_all(
        &self,
        opts: &AcquireOptions,
        deadline: Option<Instant>,
    ) -> Result<Taken<MultiGuard>> {
        if self.members.len() < 2 {
            // One member: its own acquire is one round trip already, and queues at once.
            return Ok(Taken::NotHere);
        }
        let members: Vec<Member<'_>> = self.members.iter().map(Handle::member).collect();
        let named: Vec<(Primitive, Arc<str>)> = members
            .iter()
            .map(|m| (m.primitive(), Arc::from(m.name())))
            .collect();
        let backend = self.kernel.backend.clone();
        let taken = self
            .kernel
            .acquire_all(&named, opts, |req| async move {
                backend.take_all(&members, &req).await
            })
            .await;
        let taken = match taken {
            // A try that may not wait answers the error: a fallback would cost another round
            // trip, and could find what the failed step took and not yet gave back.
            Err(e) if e.is_retryable() && opts.wait != Wait::None => return Ok(Taken::NotHere),
            taken => taken?,
        };
        Ok(match taken {
            Taken::All(owned) => {
                let held: Vec<Held> = self
                    .members
                    .iter()
                    .zip(owned)
                    .map(|(h, own)| h.adopt(own))
                    .collect();
                if held.iter().any(|g| g.state() == LockState::Lost) {
                    give_back(held, deadline).await;
                    Taken::Busy
                } else {
                    Taken::All(MultiGuard { members: held })
                }
            }
            Taken::Busy => Taken::Busy,
            Taken::NotHere => Taken::NotHere,
        })
    }

    /// Waits until every member is held, with the handle's default lease.
    pub async fn lock(&self) -> Result<MultiGuard> {
        forever(self.acquire(&AcquireOptions::new()).await?)
    }

    /// One attempt at each member, no waiting; `None` when any is busy.
    pub async fn try_lock(&self) -> Result<Option<MultiGuard>> {
        self.acquire(&AcquireOptions::new().no_wait()).await
    }

    /// Waits at most `wait` for the whole set.
    pub async fn lock_for(&self, wait: Duration) -> Result<Option<MultiGuard>> {
        self.acquire(&AcquireOptions::new().wait(wait)).await
    }
}

/// Releases `held` (a set given up half-way), all at once, and waits for it until the wait
/// budget (`deadline`, plus the grace every acquire gets) runs out: with a healthy server the
/// caller returns only once no member is held. A release that fails or is still under way then
/// goes on in the background.
async fn give_back(held: Vec<Held>, deadline: Option<Instant>) {
    let all = futures::future::join_all(held.into_iter().map(Held::release));
    match deadline {
        Some(d) => {
            let _ = tokio::time::timeout_at(d + BUDGET_GRACE, all).await;
        }
        None => {
            all.await;
        }
    }
}

/// The held set of a [`MultiLock`]. Dropping it releases every member in the background.
#[must_use = "dropping a guard releases the locks at once"]
pub struct MultiGuard {
    members: Vec<Held>,
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGuard")
            .field("tokens", &self.tokens())
            .field("state", &self.state())
            .finish()
    }
}

impl MultiGuard {
    /// Each member's name and fencing token, in the order they were taken.
    pub fn tokens(&self) -> Vec<(&str, FencingToken)> {
        self.members.iter().map(|g| (g.name(), g.token())).collect()
    }

    /// The fencing token of member `name` (its mutex, or its RW lock), if it is one.
    pub fn token(&self, name: &str) -> Option<FencingToken> {
        self.members
            .iter()
            .find(|g| g.name() == name)
            .map(Held::token)
    }

    /// Each member's name and hold mode, in the order they were taken.
    pub fn modes(&self) -> Vec<(&str, HoldMode)> {
        self.members.iter().map(|g| (g.name(), g.mode())).collect()
    }

    /// The set's state: `Lost` as soon as any member is lost, else `Suspect` if any member is,
    /// else `Held` (`Released` once released).
    pub fn state(&self) -> LockState {
        let states: Vec<LockState> = self.members.iter().map(Held::state).collect();
        [LockState::Lost, LockState::Released, LockState::Suspect]
            .into_iter()
            .find(|s| states.contains(s))
            .unwrap_or(LockState::Held)
    }

    /// A future that resolves, with its reason, when any member is lost: from then on the set
    /// is no longer all held. It does not borrow the guard. The other members stay held until
    /// the guard is released or dropped (lockkit never lets another holder into them while
    /// your code may still be working under them): stop that work, then release the guard.
    pub fn lost(&self) -> Lost {
        let mut each: Vec<Lost> = self.members.iter().map(Held::lost).collect();
        Lost::new(std::future::poll_fn(move |cx| {
            each.iter_mut()
                .find_map(|l| match Pin::new(l).poll(cx) {
                    Poll::Ready(reason) => Some(reason),
                    Poll::Pending => None,
                })
                .map_or(Poll::Pending, Poll::Ready)
        }))
    }

    /// Releases every member, all at once, and reports the first error (every member is
    /// released either way; one whose lock was lost gives `LockLost`).
    ///
    /// # Cancel safety
    /// If the future is dropped before it finishes, the members not yet released are released
    /// in the background.
    pub async fn release(self) -> Result<()> {
        let results = futures::future::join_all(self.members.into_iter().map(Held::release)).await;
        let first = results.into_iter().find_map(std::result::Result::err);
        first.map_or(Ok(()), Err)
    }
}
