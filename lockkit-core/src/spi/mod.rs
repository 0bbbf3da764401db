//! The backend SPI: what a backend implements to plug into [`Locks`](crate::Locks).
//!
//! A backend is a protocol adapter. It implements [`Backend`] (primitive handles, `close`,
//! `inspect`), [`RawMutex`], [`RawRwLock`] and [`RawSemaphore`] (acquire on its protocol), and
//! [`Held`] (release, extend, reenter, downgrade of one ownership), and where the server can,
//! [`Backend::take_all`] (a multi-lock's members in one atomic step). Everything cross-cutting
//! lives in the core and is done once for every backend: name validation, capability and permit
//! checks, the default lease from the config, wait deadlines, hold counts, guard state derived
//! from the lease deadline ([`StateCell`], [`LeaseClock`]), background release on drop, `close`
//! turning guards Lost, and one tracing span per acquire and release.

mod backend;
mod held;
mod request;
mod size;

pub use crate::armed::{Armed, Undo};
pub use crate::leader::{LeaderFeed, Look};
pub use backend::{Backend, RawElection, RawMutex, RawRwLock, RawSemaphore, Taken};
pub use held::{GuardParts, Held};
pub use request::Request;
pub use size::{no_size, own_size, settle_size, size_mismatch, too_many};

pub use crate::clock::{margin, LeaseClock};
pub use crate::driver::{drive, Exit, Failures, Queue, Standing, Woken};
pub use crate::lease::{Got, Guards, KeepAlive, Pooled, SessionPool, SharedLease};
pub use crate::reaper::{moot_after, Attempt, Reaper};
pub use crate::state::StateCell;
pub use crate::watchdog::{Due, Renew, Renewed, Watchdog, Watched, BATCH};
