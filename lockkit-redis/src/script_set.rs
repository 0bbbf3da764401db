//! The Lua scripts, run with EVALSHA (redis-rs reloads them on NOSCRIPT).

use redis::Script;

/// The Lua sources, for operators who want to read exactly what runs on their server. Every
/// script that may meet a key of another type starts with `scripts/typed.lua` (which tells
/// `WRONGTYPE`, a foreign key, from any other error, which the script returns); every script
/// that issues a fencing token with `scripts/fence.lua` (server time and the token rule); the
/// native mutex's also with `scripts/handoff.lua` (its queue and hand-off); every script that
/// removes one of our hash fields with `scripts/owned.lua`; the `redisson_compat` mutex's with
/// `scripts/rs_fair_queue.lua` (Redisson's fair-lock queue).
pub mod source {
    /// The text of `scripts/<file>`s, one after the other.
    macro_rules! lua {
        ($($file:literal),+) => {
            concat!($(include_str!(concat!("scripts/", $file))),+)
        };
    }

    /// Acquire + fencing token; a waiting acquire queues (and takes up a hand-off).
    /// For an election, taking the lock also makes the candidate the leader.
    pub const ACQUIRE: &str = lua!(
        "typed.lua",
        "fence.lua",
        "handoff.lua",
        "elect.lua",
        "acquire.lua"
    );
    /// Acquire at once or not at all, never queueing: the mutex acquire on Redisson's `RLock`
    /// layout (`redisson_compat`), and natively a `try_lock` that is not fair.
    pub const TRY_ACQUIRE: &str = lua!("typed.lua", "fence.lua", "try_acquire.lua");
    /// Several native mutexes at once for one owner, all or none, never queueing (a multi-lock
    /// whose keys one script reaches).
    pub const TAKE_ALL: &str = lua!("typed.lua", "fence.lua", "take_all.lua");
    /// Owner-checked, idempotent release that hands the lock to the first live waiter (and
    /// for an election, clears the leader).
    pub const RELEASE: &str = lua!(
        "typed.lua",
        "owned.lua",
        "fence.lua",
        "handoff.lua",
        "elect.lua",
        "release.lua"
    );
    /// A waiter gives up: leaves the queue and passes on a lock handed to it.
    pub const LEAVE: &str = lua!(
        "typed.lua",
        "owned.lua",
        "fence.lua",
        "handoff.lua",
        "elect.lua",
        "leave.lua"
    );
    /// One client's heartbeat for all its queued waiters of one native mutex.
    pub const BEAT: &str = lua!("typed.lua", "fence.lua", "handoff.lua", "beat.lua");
    /// An elected leader changes its value while it leads.
    pub const PROCLAIM: &str = lua!("proclaim.lua");
    /// An election's leader (read-only).
    pub const LEADER: &str = lua!("leader.lua");
    /// Batched, owner-checked renewal of elected leaders (lock and leader hash).
    pub const RENEW_LEADER: &str = lua!("renew_leader.lua");
    /// Admin force-unlock (hands the lock to the first live waiter; for an election, also
    /// clears the leader).
    pub const FORCE_UNLOCK: &str = lua!(
        "typed.lua",
        "fence.lua",
        "handoff.lua",
        "elect.lua",
        "tell_holders.lua",
        "force_unlock.lua"
    );
    /// Batched, owner-checked renewal (also used by `extend`).
    pub const RENEW: &str = lua!("renew.lua");
    /// Owner-checked reentry (the hold count grows to the one the guard sends).
    pub const REENTER: &str = lua!("reenter.lua");
    /// Read-only probe (remaining lease).
    pub const PROBE: &str = lua!("probe.lua");
    /// Operators' snapshot of one lock, RW lock or semaphore (read-only).
    pub const INSPECT: &str = lua!("typed.lua", "inspect.lua");
    /// Mutex release on Redisson's layout: publishes Redisson's unlock message.
    pub const RS_RELEASE: &str = lua!(
        "typed.lua",
        "owned.lua",
        "rs_fair_queue.lua",
        "rs_release.lua"
    );
    /// Admin force-unlock on Redisson's layout.
    pub const RS_FORCE_UNLOCK: &str = lua!(
        "rs_fair_queue.lua",
        "tell_holders.lua",
        "rs_force_unlock.lua"
    );
    /// Fair (FIFO) acquire in Redisson's `RFairLock` queue, with waiter heartbeats.
    pub const RS_FAIR_ACQUIRE: &str = lua!(
        "typed.lua",
        "fence.lua",
        "rs_fair_queue.lua",
        "rs_fair_acquire.lua"
    );
    /// A fair waiter leaves Redisson's `RFairLock` queue.
    pub const RS_FAIR_LEAVE: &str = lua!("rs_fair_queue.lua", "rs_fair_leave.lua");
    /// Read lock / semaphore acquire (leases in a sorted set).
    pub const LEASE_SET: &str = lua!("typed.lua", "fence.lua", "lease_set.lua");
    /// Write lock acquire with writer intent.
    pub const RW_WRITE: &str = lua!("typed.lua", "fence.lua", "rw_write.lua");
    /// Release of a write lock, read lock or permits; withdrawal of a writer's intent.
    pub const SHARED_RELEASE: &str = lua!("typed.lua", "owned.lua", "shared_release.lua");
    /// Batched renewal of shared leases.
    pub const RENEW_SET: &str = lua!("renew_set.lua");
    /// Write -> read downgrade.
    pub const RW_DOWNGRADE: &str = lua!("typed.lua", "owned.lua", "rw_downgrade.lua");
    /// Read-only probe of a read-write lock or semaphore.
    pub const RW_PROBE: &str = lua!("typed.lua", "fence.lua", "rw_probe.lua");
    /// Admin: a native semaphore's size, for every handle.
    pub const SEM_SET_SIZE: &str = lua!("typed.lua", "sem_set_size.lua");
    /// Admin force-unlock of a read-write lock or semaphore.
    pub const SHARED_FORCE: &str = lua!("tell_holders.lua", "shared_force.lua");
    /// Read or write acquire on Redisson's `RReadWriteLock` layout (`redisson_compat`).
    pub const RS_RW_ACQUIRE: &str = lua!("typed.lua", "fence.lua", "rs_rw_acquire.lua");
    /// Release of a read or write hold, or a writer's intent, on Redisson's layout.
    pub const RS_RW_RELEASE: &str = lua!("typed.lua", "rs_rw_release.lua");
    /// Write -> read downgrade on Redisson's layout.
    pub const RS_RW_DOWNGRADE: &str = lua!("typed.lua", "rs_rw_downgrade.lua");
    /// Admin force-unlock of a read-write lock on Redisson's layout.
    pub const RS_RW_FORCE: &str = lua!("tell_holders.lua", "rs_rw_force.lua");
    /// Leased permit acquire on Redisson's `RSemaphore` layout (`redisson_compat`).
    pub const RS_SEM_ACQUIRE: &str = lua!("typed.lua", "fence.lua", "rs_sem_acquire.lua");
    /// Permit release on Redisson's `RSemaphore` layout.
    pub const RS_SEM_RELEASE: &str = lua!("rs_sem_release.lua");
    /// Free permits on Redisson's `RSemaphore` layout (read-only).
    pub const RS_SEM_PROBE: &str = lua!("typed.lua", "rs_sem_probe.lua");
    /// Redlock (`redlock://`): take the lock on one master and issue its token.
    pub const REDLOCK_ACQUIRE: &str = lua!("redlock_acquire.lua");
    /// Redlock: raise one master's fencing counter to the token a quorum issued.
    pub const REDLOCK_RAISE: &str = lua!("redlock_raise.lua");
    /// Redlock: owner-checked release on one master.
    pub const REDLOCK_RELEASE: &str = lua!("redlock_release.lua");
    /// Redlock: batched, owner-checked renewal on one master (also used by `extend`).
    pub const REDLOCK_RENEW: &str = lua!("redlock_renew.lua");
    /// Redlock, admin: delete the lock on one master, whoever holds it.
    pub const REDLOCK_FORCE: &str = lua!("tell_holders.lua", "redlock_force.lua");
    /// Redlock: one master's view of a lock (read-only).
    pub const REDLOCK_PROBE: &str = lua!("redlock_probe.lua");
}

/// The compiled scripts, shared by every handle of one backend.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) try_acquire: Script,
    pub(crate) take_all: Script,
    pub(crate) release: Script,
    pub(crate) leave: Script,
    pub(crate) beat: Script,
    pub(crate) force_unlock: Script,
    pub(crate) renew: Script,
    pub(crate) renew_leader: Script,
    pub(crate) proclaim: Script,
    pub(crate) leader: Script,
    pub(crate) reenter: Script,
    pub(crate) probe: Script,
    pub(crate) inspect: Script,
    pub(crate) rs_release: Script,
    pub(crate) rs_force_unlock: Script,
    pub(crate) rs_fair_acquire: Script,
    pub(crate) rs_fair_leave: Script,
    pub(crate) lease_set: Script,
    pub(crate) rw_write: Script,
    pub(crate) shared_release: Script,
    pub(crate) renew_set: Script,
    pub(crate) rw_downgrade: Script,
    pub(crate) rw_probe: Script,
    pub(crate) sem_set_size: Script,
    pub(crate) shared_force: Script,
    pub(crate) rs_rw_acquire: Script,
    pub(crate) rs_rw_release: Script,
    pub(crate) rs_rw_downgrade: Script,
    pub(crate) rs_rw_force: Script,
    pub(crate) rs_sem_acquire: Script,
    pub(crate) rs_sem_release: Script,
    pub(crate) rs_sem_probe: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            acquire: Script::new(source::ACQUIRE),
            try_acquire: Script::new(source::TRY_ACQUIRE),
            take_all: Script::new(source::TAKE_ALL),
            release: Script::new(source::RELEASE),
            leave: Script::new(source::LEAVE),
            beat: Script::new(source::BEAT),
            force_unlock: Script::new(source::FORCE_UNLOCK),
            renew: Script::new(source::RENEW),
            renew_leader: Script::new(source::RENEW_LEADER),
            proclaim: Script::new(source::PROCLAIM),
            leader: Script::new(source::LEADER),
            reenter: Script::new(source::REENTER),
            probe: Script::new(source::PROBE),
            inspect: Script::new(source::INSPECT),
            rs_release: Script::new(source::RS_RELEASE),
            rs_force_unlock: Script::new(source::RS_FORCE_UNLOCK),
            rs_fair_acquire: Script::new(source::RS_FAIR_ACQUIRE),
            rs_fair_leave: Script::new(source::RS_FAIR_LEAVE),
            lease_set: Script::new(source::LEASE_SET),
            rw_write: Script::new(source::RW_WRITE),
            shared_release: Script::new(source::SHARED_RELEASE),
            renew_set: Script::new(source::RENEW_SET),
            rw_downgrade: Script::new(source::RW_DOWNGRADE),
            rw_probe: Script::new(source::RW_PROBE),
            sem_set_size: Script::new(source::SEM_SET_SIZE),
            shared_force: Script::new(source::SHARED_FORCE),
            rs_rw_acquire: Script::new(source::RS_RW_ACQUIRE),
            rs_rw_release: Script::new(source::RS_RW_RELEASE),
            rs_rw_downgrade: Script::new(source::RS_RW_DOWNGRADE),
            rs_rw_force: Script::new(source::RS_RW_FORCE),
            rs_sem_acquire: Script::new(source::RS_SEM_ACQUIRE),
            rs_sem_release: Script::new(source::RS_SEM_RELEASE),
            rs_sem_probe: Script::new(source::RS_SEM_PROBE),
        }
    }
}
