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

/// Connects to the backend named by `url`: `mem://`, `file:///dir`, `redis://…`, `rediss://…`,
/// `redis+sentinel://…`, `redis+cluster://…`, `zk://…`, `etcd://…` or `etcds://…`, with default
/// options.
///
/// A URL whose backend feature is compiled out fails with [`ErrorKind::BackendDisabled`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lockkit::Result<()> {
/// let locks = lockkit::connect("mem://").await?;
/// assert_eq!(locks.backend(), lockkit::BackendKind::Memory);
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
    match url.scheme {
        Scheme::Mem => lockkit_core::mem::connect(cfg).await,
        Scheme::File => lockkit_core::file::connect(cfg).await,
        Scheme::Redis | Scheme::Rediss | Scheme::RedisSentinel | Scheme::RedisCluster => {
            redis_backend(cfg, url.scheme).await
        }
        Scheme::Zk => zk_backend(cfg, url.scheme).await,
        Scheme::Etcd | Scheme::Etcds => etcd_backend(cfg, url.scheme).await,
        other => Err(other.disabled_error()),
    }
}

#[cfg(feature = "redis")]
async fn redis_backend(cfg: &LockConfig, _: Scheme) -> Result<Locks> {
    lockkit_redis::connect(cfg).await
}
#[cfg(not(feature = "redis"))]
async fn redis_backend(_: &LockConfig, scheme: Scheme) -> Result<Locks> {
    Err(scheme.disabled_error())
}

#[cfg(feature = "zk")]
async fn zk_backend(cfg: &LockConfig, _: Scheme) -> Result<Locks> {
    lockkit_zk::connect(cfg).await
}
#[cfg(not(feature = "zk"))]
async fn zk_backend(_: &LockConfig, scheme: Scheme) -> Result<Locks> {
    Err(scheme.disabled_error())
}

#[cfg(feature = "etcd")]
async fn etcd_backend(cfg: &LockConfig, _: Scheme) -> Result<Locks> {
    lockkit_etcd::connect(cfg).await
}
#[cfg(not(feature = "etcd"))]
async fn etcd_backend(_: &LockConfig, scheme: Scheme) -> Result<Locks> {
    Err(scheme.disabled_error())
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
