//! The Lua scripts, run with EVALSHA (redis-rs reloads them on NOSCRIPT).

use redis::Script;

/// The Lua sources, for operators who want to read exactly what runs on their server.
pub mod source {
    /// Acquire + fencing token.
    pub const ACQUIRE: &str = include_str!("scripts/acquire.lua");
    /// Owner-checked, idempotent release.
    pub const RELEASE: &str = include_str!("scripts/release.lua");
    /// Batched, owner-checked renewal (also used by `extend`).
    pub const RENEW: &str = include_str!("scripts/renew.lua");
    /// Owner-checked reentry (hold count + 1).
    pub const REENTER: &str = include_str!("scripts/reenter.lua");
    /// Admin force-unlock.
    pub const FORCE_UNLOCK: &str = include_str!("scripts/force_unlock.lua");
    /// Read-only probe (remaining lease and holders).
    pub const PROBE: &str = include_str!("scripts/probe.lua");
    /// Fair (FIFO) acquire with waiter heartbeats.
    pub const FAIR_ACQUIRE: &str = include_str!("scripts/fair_acquire.lua");
    /// A fair waiter leaves the queue.
    pub const FAIR_LEAVE: &str = include_str!("scripts/fair_leave.lua");
}

/// The compiled scripts, shared by every handle of one backend.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) reenter: Script,
    pub(crate) force_unlock: Script,
    pub(crate) probe: Script,
    pub(crate) fair_acquire: Script,
    pub(crate) fair_leave: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            acquire: Script::new(source::ACQUIRE),
            release: Script::new(source::RELEASE),
            renew: Script::new(source::RENEW),
            reenter: Script::new(source::REENTER),
            force_unlock: Script::new(source::FORCE_UNLOCK),
            probe: Script::new(source::PROBE),
            fair_acquire: Script::new(source::FAIR_ACQUIRE),
            fair_leave: Script::new(source::FAIR_LEAVE),
        }
    }
}
