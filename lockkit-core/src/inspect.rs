//! Read-only views of a lock for operators (`lockkit inspect`).

use std::time::Duration;

use crate::fencing::FencingToken;

/// Which primitive to look at.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// A mutex.
    Mutex,
    /// A read-write lock.
    RwLock,
    /// A semaphore.
    Semaphore,
}

impl Primitive {
    /// The short name used in logs and metrics: `mutex`, `rwlock`, `semaphore`.
    pub fn as_str(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::RwLock => "rwlock",
            Primitive::Semaphore => "semaphore",
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::RwLock => "read-write lock",
            Primitive::Semaphore => "semaphore",
        }
    }
}

/// How a holder or waiter holds (or wants) the lock.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldMode {
    /// Mutex or write lock.
    Exclusive,
    /// Read lock.
    Shared,
    /// Semaphore permits.
    Permits(u32),
}

/// One holder of a lock.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderInfo {
    /// The backend's owner identity (Redis hash field, ZooKeeper node, etcd key).
    pub owner: String,
    /// How it holds.
    pub mode: HoldMode,
    /// Its fencing token, where the backend can tell.
    pub token: Option<FencingToken>,
    /// Its remaining lease, where the backend can tell.
    pub remaining_lease: Option<Duration>,
}

impl HolderInfo {
    /// A holder with no token or lease known.
    pub fn new(owner: impl Into<String>, mode: HoldMode) -> Self {
        HolderInfo {
            owner: owner.into(),
            mode,
            token: None,
            remaining_lease: None,
        }
    }

    /// Sets the token.
    pub fn with_token(mut self, token: FencingToken) -> Self {
        self.token = Some(token);
        self
    }

    /// Sets the remaining lease.
    pub fn with_remaining_lease(mut self, lease: Duration) -> Self {
        self.remaining_lease = Some(lease);
        self
    }
}

/// One queued waiter, in queue order.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterInfo {
    /// The backend's identity of the waiter.
    pub owner: String,
    /// What it waits for.
    pub mode: HoldMode,
}

impl WaiterInfo {
    /// A waiter.
    pub fn new(owner: impl Into<String>, mode: HoldMode) -> Self {
        WaiterInfo {
            owner: owner.into(),
            mode,
        }
    }
}

/// What a backend can tell about one lock right now.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LockInfo {
    /// Current holders.
    pub holders: Vec<HolderInfo>,
    /// Waiters, first in line first (empty where the backend keeps no visible queue).
    pub waiters: Vec<WaiterInfo>,
}

impl LockInfo {
    /// A view with these holders and waiters.
    pub fn new(holders: Vec<HolderInfo>, waiters: Vec<WaiterInfo>) -> Self {
        LockInfo { holders, waiters }
    }
}
