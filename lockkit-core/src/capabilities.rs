//! What a backend offers, per primitive.
//!
//! Like object_store's `Capability`, these are plain facts a caller can check up front; the
//! core refuses what a backend denies with [`ErrorKind::Unsupported`](crate::ErrorKind)
//! before the backend is asked, and the conformance suite checks that everything granted works.

use crate::inspect::Primitive;

/// What one primitive (mutex, read-write lock or semaphore) offers on a backend.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Support {
    /// `AcquireOptions::fair(true)` is honoured: waiters are served first come, first served
    /// and newcomers do not barge in.
    pub fair: bool,
    /// Fixed (non-renewed) leases and `extend()`.
    pub fixed_lease: bool,
    /// `Locks::inspect` lists holders and waiters.
    pub inspect: bool,
    /// `Mutex::remaining_lease` tells the holder's remaining lease.
    pub remaining_lease: bool,
}

impl Support {
    /// Nothing beyond the primitive itself (waiting, watchdog leases, tokens, lost signal).
    pub const fn basic() -> Self {
        Support {
            fair: false,
            fixed_lease: false,
            inspect: false,
            remaining_lease: false,
        }
    }

    /// Everything.
    pub const fn all() -> Self {
        Support {
            fair: true,
            fixed_lease: true,
            inspect: true,
            remaining_lease: true,
        }
    }

    /// Sets [`fair`](Self::fair).
    pub const fn fair(mut self, yes: bool) -> Self {
        self.fair = yes;
        self
    }

    /// Sets [`fixed_lease`](Self::fixed_lease).
    pub const fn fixed_lease(mut self, yes: bool) -> Self {
        self.fixed_lease = yes;
        self
    }

    /// Sets [`inspect`](Self::inspect).
    pub const fn inspect(mut self, yes: bool) -> Self {
        self.inspect = yes;
        self
    }

    /// Sets [`remaining_lease`](Self::remaining_lease).
    pub const fn remaining_lease(mut self, yes: bool) -> Self {
        self.remaining_lease = yes;
        self
    }
}

/// What a backend offers. Every primitive it has comes with its [`Support`]; `None` means the
/// primitive itself answers `Unsupported`.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// The mutex (every backend has one).
    pub mutex: Support,
    /// The read-write lock.
    pub rwlock: Option<Support>,
    /// The counting semaphore.
    pub semaphore: Option<Support>,
    /// Leader election.
    pub election: Option<Support>,
    /// Locks exclude other processes and machines (false only for `mem://`).
    pub cross_process: bool,
    /// `Locks::list` finds the locks under a name prefix.
    pub list: bool,
    /// A semaphore's size lives on the server with the semaphore: a handle asking for another
    /// size is refused, `Locks::open_semaphore` adopts the stored one and
    /// `Semaphore::set_permits` changes it for everyone. Without it each handle counts against
    /// its own total, and those calls answer `Unsupported`.
    pub semaphore_size: bool,
    /// The guard's token is a fencing token: one counter per lock, kept by one server or one
    /// consensus group, issues it, so every holder's token is larger than every earlier
    /// holder's (what a Redis failover can do to it is in that backend's notes). False on
    /// Redlock, whose independent masters can issue a token again after one restarts without
    /// its data: there the token orders holders on a best-effort basis only.
    pub fencing: bool,
}

impl Capabilities {
    /// A backend with only a mutex offering `mutex`, across processes.
    pub const fn new(mutex: Support) -> Self {
        Capabilities {
            mutex,
            rwlock: None,
            semaphore: None,
            election: None,
            cross_process: true,
            list: false,
            semaphore_size: false,
            fencing: true,
        }
    }

    /// Adds the read-write lock.
    pub const fn with_rwlock(mut self, support: Support) -> Self {
        self.rwlock = Some(support);
        self
    }

    /// Adds the semaphore.
    pub const fn with_semaphore(mut self, support: Support) -> Self {
        self.semaphore = Some(support);
        self
    }

    /// Adds leader election.
    pub const fn with_election(mut self, support: Support) -> Self {
        self.election = Some(support);
        self
    }

    /// Sets [`cross_process`](Self::cross_process).
    pub const fn cross_process(mut self, yes: bool) -> Self {
        self.cross_process = yes;
        self
    }

    /// Sets [`list`](Self::list).
    pub const fn list(mut self, yes: bool) -> Self {
        self.list = yes;
        self
    }

    /// Sets [`semaphore_size`](Self::semaphore_size).
    pub const fn semaphore_size(mut self, yes: bool) -> Self {
        self.semaphore_size = yes;
        self
    }

    /// Sets [`fencing`](Self::fencing).
    pub const fn fencing(mut self, yes: bool) -> Self {
        self.fencing = yes;
        self
    }

    /// What `primitive` offers, or `None` when the backend lacks it.
    pub fn of(&self, primitive: Primitive) -> Option<Support> {
        match primitive {
            Primitive::Mutex => Some(self.mutex),
            Primitive::RwLock => self.rwlock,
            Primitive::Semaphore => self.semaphore,
            Primitive::Election => self.election,
        }
    }
}
