//! `LostReason`: why a lock was lost.

use std::fmt;

/// Why a lock was lost.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LostReason {
    /// The lease ran out before it was renewed (or, for a fixed lease, extended).
    LeaseExpired,
    /// The session (ZooKeeper) or session lease (etcd) that kept the lock ended.
    SessionExpired,
    /// The lock's key or node was deleted, taken over or force-unlocked.
    Deleted,
    /// The `Locks` handle was closed.
    Closed,
}

impl LostReason {
    /// A short name for logs and metrics: `lease_expired`, `session_expired`, `deleted`,
    /// `closed`.
    pub fn as_str(self) -> &'static str {
        match self {
            LostReason::LeaseExpired => "lease_expired",
            LostReason::SessionExpired => "session_expired",
            LostReason::Deleted => "deleted",
            LostReason::Closed => "closed",
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::LeaseExpired => "the lease ran out",
            LostReason::SessionExpired => "the session expired",
            LostReason::Deleted => "the lock was deleted, taken over or force-unlocked",
            LostReason::Closed => "the Locks handle was closed",
        })
    }
}
