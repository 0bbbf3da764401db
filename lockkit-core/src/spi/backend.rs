//! The traits a backend implements.

use std::any::Any;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::inspect::{LockEntry, LockInfo, Primitive};
use crate::kind::BackendKind;
use crate::leader::{Leader, LeaderChanges};
use crate::member::Member;
use crate::reaper::Reaper;
use crate::spi::{GuardParts, Request};

/// A backend client. Names arrive validated; options were checked against
/// [`capabilities`](Backend::capabilities) before any call.
#[async_trait]
pub trait Backend: Any + Send + Sync + fmt::Debug {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// What it offers. The core refuses everything denied here with `Unsupported`.
    fn capabilities(&self) -> Capabilities;

    /// The handle's default lease, from its config (`LockConfig::lease` or the `lease`
    /// option, parsed by [`Settings`](crate::settings::Settings)).
    fn default_lease(&self) -> Duration;

    /// The handle's reaper: where the backend hands every delete that did not succeed at once,
    /// and where the core runs background releases. `close` waits for it.
    fn reaper(&self) -> Reaper;

    /// A mutex. Creating one talks to no server.
    fn mutex(&self, name: &str) -> Result<Box<dyn RawMutex>>;

    /// What the lock `name` of `primitive` is on the server: two (primitive, name) pairs with
    /// the same answer are one lock (a multi-lock refuses to take it twice). By default every
    /// primitive has names of its own; a backend whose layouts share a key answers alike for
    /// them.
    fn resource(&self, primitive: Primitive, name: &str) -> String {
        format!("{}/{name}", primitive.as_str())
    }

    /// Takes every member of a multi-lock in one atomic step on the server, all or none, without
    /// waiting: [`Taken::All`] with one part per member in the order of `members`, [`Taken::Busy`]
    /// when a member was held (or, for a fair `req`, had waiters before it) and nothing was
    /// taken, [`Taken::NotHere`] when this set cannot be taken in one step here (a member kind,
    /// layout or option the step does not cover, keys that do not share a server, a session
    /// found gone) and nothing was taken. `req`'s lease applies to each member; `members` are two or more, in the
    /// multi-lock's global order ([`Member::mutex_names`] picks out a set of mutexes). The core's
    /// [`MultiLock`](crate::MultiLock) asks this first and, unless every member was taken,
    /// takes the members one by one in its global order (on `Busy`, an acquire that may not
    /// wait is over at once). By default `NotHere`.
    ///
    /// # Cancel safety
    /// Dropping the future must leave nothing behind: a step whose answer was not seen is
    /// undone in the background.
    async fn take_all(
        &self,
        members: &[Member<'_>],
        req: &Request,
    ) -> Result<Taken<Vec<GuardParts>>> {
        let _ = (members, req);
        Ok(Taken::NotHere)
    }

    /// A read-write lock (only called when `capabilities().rwlock` is `Some`).
    fn rwlock(&self, name: &str) -> Result<Box<dyn RawRwLock>> {
        let _ = name;
        Err(Error::unsupported(format!(
            "{} has no read-write lock",
            self.kind()
        )))
    }

    /// A semaphore (only called when `capabilities().semaphore` is `Some`). `permits` is the
    /// size the handle asks for, or `None` for the size stored with the semaphore (only when
    /// `capabilities().semaphore_size`). With `semaphore_size`, the backend stores the size
    /// asked for when none is stored, refuses another with `InvalidArgument` naming the stored
    /// one, and reads the size in the same atomic step that admits a holder.
    fn semaphore(&self, name: &str, permits: Option<u32>) -> Result<Box<dyn RawSemaphore>> {
        let _ = (name, permits);
        Err(Error::unsupported(format!(
            "{} has no semaphore",
            self.kind()
        )))
    }

    /// A leader election (only called when `capabilities().election` is `Some`).
    fn election(&self, name: &str) -> Result<Box<dyn RawElection>> {
        let _ = name;
        Err(Error::unsupported(format!(
            "{} has no leader election",
            self.kind()
        )))
    }

    /// Gives server-side resources back (sessions, leases, held keys) and stops background
    /// work. The core has already marked every guard Lost and refuses new acquires.
    async fn close(&self) -> Result<()>;

    /// The locks whose names start with `prefix` that have a holder or a waiter right now (only
    /// called when the `list` capability is granted), in any order. Must not block the server
    /// (no `KEYS`, no unbounded read): scan in pages.
    async fn list(&self, prefix: &str) -> Result<Vec<LockEntry>> {
        let _ = prefix;
        Err(Error::unsupported(format!(
            "{} cannot list locks",
            self.kind()
        )))
    }

    /// Holders and waiters of one lock (only called when the primitive's `inspect` capability
    /// is granted).
    async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        let _ = (name, primitive);
        Err(Error::unsupported(format!(
            "{} cannot inspect locks",
            self.kind()
        )))
    }
}

/// What an atomic take of several locks did ([`Backend::take_all`]).
#[derive(Debug)]
pub enum Taken<T> {
    /// Every member is held.
    All(T),
    /// A member was busy: nothing was taken.
    Busy,
    /// The set cannot be taken in one step here: nothing was taken.
    NotHere,
}

/// The protocol of one mutex.
#[async_trait]
pub trait RawMutex: Send + Sync + fmt::Debug + 'static {
    /// Acquires the lock as `req` says; `Ok(None)` when its deadline passed first.
    ///
    /// # Cancel safety
    /// Dropping the future must leave nothing behind: no key, node, queue entry or lease.
    async fn acquire(&self, req: &Request) -> Result<Option<GuardParts>>;

    /// Whether anyone holds the lock.
    async fn is_locked(&self) -> Result<bool>;

    /// Admin: releases the lock whoever holds it; whether it was held.
    async fn force_unlock(&self) -> Result<bool>;

    /// The holder's remaining lease, or `None` when the lock is free (only called when the
    /// `remaining_lease` capability is granted).
    async fn remaining_lease(&self) -> Result<Option<Duration>> {
        Err(Error::unsupported(
            "remaining_lease is not offered by this backend",
        ))
    }
}

/// The protocol of one read-write lock.
#[async_trait]
pub trait RawRwLock: Send + Sync + fmt::Debug + 'static {
    /// Acquires a read (shared) hold.
    async fn read(&self, req: &Request) -> Result<Option<GuardParts>>;

    /// Acquires the write (exclusive) hold.
    async fn write(&self, req: &Request) -> Result<Option<GuardParts>>;

    /// Whether anyone holds the lock, in either mode.
    async fn is_locked(&self) -> Result<bool>;

    /// Admin: releases every read and write hold; whether anything was held.
    async fn force_unlock(&self) -> Result<bool>;
}

/// The protocol of one semaphore.
#[async_trait]
pub trait RawSemaphore: Send + Sync + fmt::Debug + 'static {
    /// Acquires `n` permits at once. The core checked `1 <= n`, and `n <= permits` when the
    /// handle asked for a size; with a stored size, `n` above it, a stored size other than the
    /// one asked for, or no size at all for a handle that asked for none is `InvalidArgument`.
    async fn acquire(&self, n: u32, req: &Request) -> Result<Option<GuardParts>>;

    /// Permits free right now.
    async fn available(&self) -> Result<u32>;

    /// The size stored with the semaphore, `None` when none is (only called with
    /// `capabilities().semaphore_size`).
    async fn size(&self) -> Result<Option<u32>> {
        Err(Error::unsupported("this backend stores no semaphore size"))
    }

    /// Admin: stores `permits` (at least 1) as the size for every handle, returning the size
    /// stored before. Waiters that now fit are admitted at once; holders keep their permits
    /// when it shrinks (only called with `capabilities().semaphore_size`).
    async fn set_size(&self, permits: u32) -> Result<Option<u32>> {
        let _ = permits;
        Err(Error::unsupported("this backend stores no semaphore size"))
    }
}

/// A backend's leader election.
#[async_trait]
pub trait RawElection: Send + Sync {
    /// Joins the candidates with `value` and waits as `req` says: the parts once this candidate
    /// leads (their token is the term, their `Held` answers `proclaim`), `Ok(None)` when the
    /// wait budget ran out. Cancel safe: a candidate whose future is dropped leaves nothing.
    async fn campaign(&self, value: &[u8], req: &Request) -> Result<Option<GuardParts>>;

    /// The current leader, or `None`.
    async fn leader(&self) -> Result<Option<Leader>>;

    /// Every change of leader from now on, the current leader first.
    async fn observe(&self) -> Result<LeaderChanges>;

    /// Admin: deletes the leader's node, key or lock whoever leads, so that its leadership turns
    /// Lost and the next candidate leads. Returns whether anyone led.
    async fn force_resign(&self) -> Result<bool>;
}
