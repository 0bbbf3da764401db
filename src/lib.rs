#![doc = include_str!("../README.md")]

pub use lockkit_core::*;

/// The Redis backend's own API (Redisson compatibility, replica `WAIT`, typed handle).
#[cfg(feature = "redis")]
pub use lockkit_redis as redis;

/// The ZooKeeper backend's own API (node paths, typed handle).
#[cfg(feature = "zk")]
pub use lockkit_zk as zk;

/// The etcd backend's own API (`is_owner` compares for your own transactions, typed handle).
#[cfg(feature = "etcd")]
pub use lockkit_etcd as etcd;

/// The backends compiled in, in the order URLs are matched against their schemes.
pub const BACKENDS: &[&BackendInfo] = &[
    &lockkit_core::mem::INFO,
    &lockkit_core::file::INFO,
    #[cfg(feature = "redis")]
    &lockkit_redis::INFO,
    #[cfg(feature = "redis")]
    &lockkit_redis::REDLOCK,
    #[cfg(feature = "zk")]
    &lockkit_zk::INFO,
    #[cfg(feature = "etcd")]
    &lockkit_etcd::INFO,
];

/// The schemes of the optional backends, by the cargo feature that compiles each in: a URL of
/// one compiled out (not in [`BACKENDS`]) fails with [`ErrorKind::BackendDisabled`] rather than as an unknown scheme.
/// (A test checks it against the backends' own descriptors.)
#[doc(hidden)]
pub const OPTIONAL: &[(&str, &[&str])] = &[
    (
        "redis",
        &[
            "redis",
            "rediss",
            "redis+sentinel",
            "redis+cluster",
            "redlock",
        ],
    ),
    ("zk", &["zk", "zookeeper"]),
    ("etcd", &["etcd", "etcds"]),
];

/// The backend that takes URL scheme `scheme` (any case, or an alias such as `zookeeper`).
pub fn backend_for(scheme: &str) -> Result<&'static BackendInfo> {
    // The compiled-in backends are matched first, so only the schemes of those compiled out
    // reach the optional list.
    route(scheme, BACKENDS, OPTIONAL)
}

/// Connects to the backend named by `url`: `mem://`, `file:///dir`, `redis://…`, `rediss://…`,
/// `redis+sentinel://…`, `redis+cluster://…`, `redlock://…`, `zk://…`, `etcd://…` or `etcds://…`, with default
/// options.
///
/// A URL whose backend feature is compiled out fails with [`ErrorKind::BackendDisabled`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lockkit::Result<()> {
/// let locks = lockkit::connect("mem://").await?;
/// assert_eq!(locks.backend(), lockkit::BackendKind::MEMORY);
/// # Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<Locks> {
    from_config(&LockConfig::new(url)).await
}

/// Connects with a full [`LockConfig`] (from code, TOML or the environment).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lockkit::Result<()> {
/// let cfg = lockkit::LockConfig::from_toml_str("url = \"mem://\"\nlease = \"10s\"")?;
/// let locks = lockkit::from_config(&cfg).await?;
/// # Ok(()) }
/// ```
pub async fn from_config(cfg: &LockConfig) -> Result<Locks> {
    let url = cfg.server_url()?;
    (backend_for(&url.scheme)?.connect)(cfg).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every Redis scheme reaches the Redis backend (or says which feature it needs).
    #[tokio::test]
    async fn redis_schemes_are_routed() {
        for url in [
            "redis+sentinel://127.0.0.1:1,127.0.0.1:2",
            "redis+cluster://127.0.0.1:1/3",
        ] {
            let e = connect(url).await.unwrap_err();
            if cfg!(feature = "redis") {
                // The Redis backend's own URL check: a Sentinel URL needs a master name, a
                // cluster has no db path.
                assert_eq!(e.kind(), ErrorKind::Config, "{url}: {e}");
            } else {
                assert!(
                    matches!(
                        e.kind(),
                        ErrorKind::BackendDisabled {
                            feature: "redis",
                            ..
                        }
                    ),
                    "{url}: {e}"
                );
            }
        }
    }
}
