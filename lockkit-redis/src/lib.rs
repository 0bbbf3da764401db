#![doc = include_str!("../README.md")]

mod backend;
mod beats;
mod client;
mod config;
mod conn;
mod election;
mod error;
mod keys;
mod leading;
mod multi;
mod mutex;
mod pubsub;
mod push;
mod redlock;
mod replicas;
mod script_set;
mod sentinel;
mod shared;
mod tls;
mod views;
mod watchdog;

/// The redis-rs crate this backend is built on, for raw access next to lockkit (benchmarks,
/// admin tools) with the same client version.
pub use redis;

pub use backend::RedisBackend;
pub use config::KIND;
pub use keys::LockKeys;
pub use redlock::{
    connect_redlock, connect_redlock_backend, RedlockBackend, RedlockKey, REDLOCK, REDLOCK_KIND,
};
pub use script_set::source as scripts;

use lockkit_core::{BackendInfo, LockConfig, Locks, Result, SchemeInfo};

/// The Redis backend's descriptor: its schemes and default ports, for the facade's routing.
pub static INFO: BackendInfo = BackendInfo {
    kind: KIND,
    schemes: &[
        SchemeInfo {
            name: "redis",
            aliases: &[],
            default_port: Some(6379),
            tls: false,
        },
        SchemeInfo {
            name: "rediss",
            aliases: &[],
            default_port: Some(6379),
            tls: true,
        },
        SchemeInfo {
            name: "redis+sentinel",
            aliases: &[],
            default_port: Some(26379),
            tls: false,
        },
        SchemeInfo {
            name: "redis+cluster",
            aliases: &[],
            default_port: Some(6379),
            tls: false,
        },
    ],
    feature: Some("redis"),
    connect: |cfg| Box::pin(connect(cfg)),
};

/// Connects to Redis as described by `cfg` (`redis://[user:pass@]host:port[/db]` or
/// `rediss://…`, plus the options in the crate docs).
///
/// Opens one multiplexed, auto-reconnecting command connection and one pub/sub connection, and
/// starts the watchdog. Fails with `Connection` (retryable) when the server cannot be reached,
/// `Auth` when the credentials are refused, and `Config` for a bad URL or option.
pub async fn connect(cfg: &LockConfig) -> Result<Locks> {
    Ok(Locks::new(connect_backend(cfg).await?))
}

/// Like [`connect`], but returns the backend itself, for its Redis-specific methods; wrap it with
/// [`Locks::new`] to use it.
pub async fn connect_backend(cfg: &LockConfig) -> Result<RedisBackend> {
    let settings = config::Settings::from_config(cfg, &INFO)?;
    RedisBackend::connect(settings).await
}
