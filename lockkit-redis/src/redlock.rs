//! Redlock over independent Redis masters (`redlock://h1:p1,h2:p2,h3:p3`): a mutex held while
//! a majority of N masters that share nothing hold its key, as antirez specified it and as
//! `rslock`, redsync and node-redlock implement it, with lockkit's watchdog, lost signal and
//! token on top.
//!
//! - **Acquire**: one round sends `SET key owner NX PX` (with the token, in
//!   `scripts/redlock_acquire.lua`) to every master in parallel, each bounded by `node_timeout`,
//!   under an owner of its own. The lock is held when a quorum (N/2+1) took it and validity is
//!   left: the guard's deadline is `sent_at + lease - margin`, with `sent_at` taken before the
//!   first send and the core's margin (2 % of the lease, at most 500 ms but never less than
//!   1 %, plus 2 ms) as the drift allowance, never less than Redlock's `lease / 100 + 2 ms`. A
//!   failed round, or one whose validity is spent, is released on every master that may have
//!   the key (also those that did not answer), and tried again while the wait budget lasts.
//!   lockkit waiters queue on each master in the order they came: a release tells the first
//!   one (pub/sub), the others try after a pause, and a round that finds the lock free gives
//!   way to an earlier waiter (see `scripts/redlock_acquire.lua`). Rounds that reach no quorum are borne for a few node
//!   timeouts, then the acquire fails with a retryable `Connection` or `Timeout` error (a try
//!   fails at once).
//! - **Watchdog**: renewals go to every master; a lock counts renewed when a quorum renewed it,
//!   and is Lost once more than N - quorum masters say it is not ours (a restarted, emptied
//!   master says so) or the deadline passes without a quorum.
//! - **Release**: on every master, including those the lock seemed to fail on.
//! - **Tokens**: each master issues `max(counter + 1, its time in whole seconds × 10⁶)`; the
//!   guard's token is the largest of the quorum's, and the acquire raises the counter to it on
//!   the masters that issued less before it returns. Two quorums share a master, so while no master
//!   loses its counter, tokens increase from one holder to the next. A master restarted
//!   without its data (or a failover to a replica that missed the write) breaks that, and
//!   nothing across independent masters can repair it without consensus. So
//!   [`Capabilities::fencing`](lockkit_core::Capabilities::fencing) is false: the token orders
//!   holders for logs and best-effort checks, and is no fencing guarantee.
//!
//! The README of this crate compares what Redlock guarantees with Redis + `WAIT`, etcd and
//! ZooKeeper, and says when to choose it.

mod backend;
mod client;
mod config;
mod held;
mod masters;
mod mutex;
mod renew;

pub use backend::RedlockBackend;
pub use config::{RedlockKey, REDLOCK_KIND};

use lockkit_core::{BackendInfo, LockConfig, Locks, Result, SchemeInfo};

/// The Redlock backend's descriptor, for the facade's routing.
pub static REDLOCK: BackendInfo = BackendInfo {
    kind: REDLOCK_KIND,
    schemes: &[SchemeInfo {
        name: "redlock",
        aliases: &[],
        default_port: Some(6379),
        tls: false,
    }],
    feature: Some("redis"),
    connect: |cfg| Box::pin(connect_redlock(cfg)),
};

/// Connects to the independent masters `cfg` names (`redlock://[user:pass@]h1:p1,h2:p2,…[/db]`,
/// the same credentials and db on each, plus the options in the crate docs).
///
/// Opens one connection per master in parallel and starts the watchdog. Fails with
/// `Connection` (retryable) unless a quorum of masters answers, `Auth` when they refuse the
/// credentials, and `Config` for a bad URL or option. A master down at connect is reached once
/// it answers.
pub async fn connect_redlock(cfg: &LockConfig) -> Result<Locks> {
    Ok(Locks::new(connect_redlock_backend(cfg).await?))
}

/// Like [`connect_redlock`], but returns the backend itself.
pub async fn connect_redlock_backend(cfg: &LockConfig) -> Result<RedlockBackend> {
    let settings = config::Settings::from_config(cfg, &REDLOCK)?;
    RedlockBackend::connect(settings).await
}
