//! Read-only views of locks for operators (`lockkit inspect`, `lockkit top`).
//!
//! With the `serde` feature the views serialize (and deserialize) to the JSON that
//! `lockkit inspect --json` and `lockkit top --json` print: a holder is
//! `{"owner", "mode", "permits" (semaphores only), "token", "remaining_lease_ms"}`, a waiter
//! `{"owner", "mode", "permits"}`, a lock `{"holders": [...], "waiters": [...]}` with the waiters
//! in queue order, and a listed lock `{"name", "primitive"}`.

use std::fmt;
use std::time::Duration;

use crate::fencing::FencingToken;

/// Which primitive to look at.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Primitive {
    /// A mutex.
    Mutex,
    /// A read-write lock.
    RwLock,
    /// A semaphore.
    Semaphore,
    /// A leader election.
    Election,
}

impl Primitive {
    /// The short name used in logs and metrics: `mutex`, `rwlock`, `semaphore`, `election`.
    pub fn as_str(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::RwLock => "rwlock",
            Primitive::Semaphore => "semaphore",
            Primitive::Election => "election",
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::RwLock => "read-write lock",
            Primitive::Semaphore => "semaphore",
            Primitive::Election => "leader election",
        }
    }
}

/// How a holder or waiter holds (or wants) the lock.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "mode", content = "permits", rename_all = "lowercase")
)]
pub enum HoldMode {
    /// Mutex or write lock.
    Exclusive,
    /// Read lock.
    Shared,
    /// Semaphore permits.
    Permits(u32),
}

impl fmt::Display for HoldMode {
    /// `exclusive`, `shared` or `permits:N`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldMode::Exclusive => f.pad("exclusive"),
            HoldMode::Shared => f.pad("shared"),
            HoldMode::Permits(n) => f.pad(&format!("permits:{n}")),
        }
    }
}

/// One holder of a lock.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HolderInfo {
    /// The backend's owner identity (Redis hash field, ZooKeeper node, etcd key).
    pub owner: String,
    /// How it holds.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub mode: HoldMode,
    /// Its fencing token, where the backend can tell.
    pub token: Option<FencingToken>,
    /// Its remaining lease, where the backend can tell.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "remaining_lease_ms", with = "millis", default)
    )]
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
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WaiterInfo {
    /// The backend's identity of the waiter.
    pub owner: String,
    /// What it waits for.
    #[cfg_attr(feature = "serde", serde(flatten))]
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
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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

/// One lock found by [`Locks::list`](crate::Locks::list): a name and its primitive.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LockEntry {
    /// The lock's name, as callers pass it to `mutex`, `rwlock` or `semaphore`.
    pub name: String,
    /// Which primitive it is.
    pub primitive: Primitive,
}

impl LockEntry {
    /// An entry.
    pub fn new(name: impl Into<String>, primitive: Primitive) -> Self {
        LockEntry {
            name: name.into(),
            primitive,
        }
    }
}

/// `Option<Duration>` as whole milliseconds (`null` when unknown).
#[cfg(feature = "serde")]
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}
