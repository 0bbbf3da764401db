//! One guard type over the primitives `exec`, `elect` and `bench` can hold.

use lockkit::{
    AcquireOptions, Election, FencingToken, Leadership, LockGuard, Lost, Mutex, Permit, ReadGuard,
    Result, RwLock, Semaphore, WriteGuard,
};

/// How to hold a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HoldKind {
    Mutex,
    Read,
    Write,
    Permit,
}

/// A lock handle of any primitive, or an election with the value to campaign with.
#[derive(Clone, Debug)]
pub(crate) enum AnyLock {
    Mutex(Mutex),
    Read(RwLock),
    Write(RwLock),
    Permit(Semaphore),
    Leader(Election, String),
}

impl AnyLock {
    /// The handle for `name`: a mutex, one side of a RW lock, or a semaphore of `permits`.
    pub(crate) fn new(
        locks: &lockkit::Locks,
        name: &str,
        kind: HoldKind,
        permits: u32,
    ) -> Result<Self> {
        Ok(match kind {
            HoldKind::Mutex => AnyLock::Mutex(locks.mutex(name)?),
            HoldKind::Read => AnyLock::Read(locks.rwlock(name)?),
            HoldKind::Write => AnyLock::Write(locks.rwlock(name)?),
            HoldKind::Permit => AnyLock::Permit(locks.semaphore(name, permits)?),
        })
    }

    /// The election `name`, to campaign in with `value`.
    pub(crate) fn leader(locks: &lockkit::Locks, name: &str, value: String) -> Result<Self> {
        Ok(AnyLock::Leader(locks.election(name)?, value))
    }

    /// One acquire (a campaign); `Ok(None)` when the wait ran out.
    pub(crate) async fn acquire(&self, opts: &AcquireOptions) -> Result<Option<AnyGuard>> {
        Ok(match self {
            AnyLock::Mutex(l) => l.acquire(opts).await?.map(AnyGuard::Mutex),
            AnyLock::Read(l) => l.read(opts).await?.map(AnyGuard::Read),
            AnyLock::Write(l) => l.write(opts).await?.map(AnyGuard::Write),
            AnyLock::Permit(s) => s.acquire(1, opts).await?.map(AnyGuard::Permit),
            AnyLock::Leader(e, v) => e
                .campaign_with(v.as_bytes(), opts)
                .await?
                .map(AnyGuard::Leader),
        })
    }
}

/// A held guard of any primitive.
#[derive(Debug)]
pub(crate) enum AnyGuard {
    Mutex(LockGuard),
    Read(ReadGuard),
    Write(WriteGuard),
    Permit(Permit),
    Leader(Leadership),
}

macro_rules! each {
    ($self:ident, $g:ident => $e:expr) => {
        match $self {
            AnyGuard::Mutex($g) => $e,
            AnyGuard::Read($g) => $e,
            AnyGuard::Write($g) => $e,
            AnyGuard::Permit($g) => $e,
            AnyGuard::Leader($g) => $e,
        }
    };
}

impl AnyGuard {
    pub(crate) fn token(&self) -> FencingToken {
        each!(self, g => g.token())
    }

    pub(crate) fn lost(&self) -> Lost {
        each!(self, g => g.lost())
    }

    pub(crate) fn lease(&self) -> lockkit::Lease {
        each!(self, g => g.lease())
    }

    /// Time left before the lease's deadline as the guard computes it (`None`: no deadline).
    pub(crate) fn remaining(&self) -> Option<std::time::Duration> {
        each!(self, g => g.remaining())
    }

    pub(crate) fn state(&self) -> lockkit::LockState {
        each!(self, g => g.state())
    }

    pub(crate) async fn release(self) -> Result<()> {
        each!(self, g => g.release().await)
    }
}
