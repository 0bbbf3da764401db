//! What a shared-primitive handle (read-write lock or semaphore) is: its layout, the modes it
//! is held in, and the state every call of one handle shares.

use std::sync::Arc;

use crate::client::Inner;
use crate::keys::LockKeys;
use crate::watchdog::RenewKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Read,
    Write,
    Permits(u32),
}

/// Whose key layout a handle uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    Native,
    /// Redisson's `RReadWriteLock` or `RSemaphore` (`redisson_compat`).
    Redisson,
}

impl Mode {
    pub(super) fn renew_kind(self, layout: Layout) -> RenewKind {
        match (self, layout) {
            (Mode::Write, _) | (Mode::Read, Layout::Redisson) => RenewKind::Hash,
            _ => RenewKind::Set,
        }
    }

    /// The release script's mode: `w` write, `s` shared.
    pub(super) fn release_code(self) -> &'static str {
        if self == Mode::Write {
            "w"
        } else {
            "s"
        }
    }

    /// The key holding this mode's ownership: the write hash or the holders set.
    pub(super) fn owned_key(self, layout: Layout, keys: &LockKeys) -> &str {
        match self.renew_kind(layout) {
            RenewKind::Hash | RenewKind::Leader => &keys.lock,
            RenewKind::Set => &keys.holders,
        }
    }

    /// The hash field or set member of one ownership by `owner`.
    pub(super) fn member(self, layout: Layout, owner: String) -> String {
        match (self, layout) {
            (Mode::Permits(n), _) => format!("{owner}|{n}"),
            (Mode::Write, Layout::Redisson) => format!("{owner}:write"),
            _ => owner,
        }
    }
}

/// What one shared-primitive handle needs.
#[derive(Debug)]
pub(super) struct Core {
    pub(super) inner: Arc<Inner>,
    pub(super) name: Arc<str>,
    pub(super) keys: Arc<LockKeys>,
    pub(super) layout: Layout,
    pub(super) capacity: Capacity,
}

/// What a handle's acquires count against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Capacity {
    /// Nothing: a read-write lock.
    Unlimited,
    /// A semaphore of this size (stored when none is, natively; where Redisson's count starts).
    Asked(u32),
    /// A native semaphore's stored size.
    Stored,
}

impl Capacity {
    /// The scripts' argument: 0 unlimited, -1 the stored size.
    pub(super) fn arg(self) -> i64 {
        match self {
            Capacity::Unlimited => 0,
            Capacity::Asked(n) => i64::from(n),
            Capacity::Stored => -1,
        }
    }

    /// The size asked for, if any.
    pub(super) fn asked(self) -> Option<u32> {
        match self {
            Capacity::Asked(n) => Some(n),
            _ => None,
        }
    }
}
