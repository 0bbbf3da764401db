//! The whole conformance suite against a real redis-server with `redisson_compat=true`: the
//! mutex, read-write lock and semaphore on Redisson's key layouts keep every lockkit guarantee.

fn config() -> Option<lockkit_core::LockConfig> {
    let url = lockkit_testing::server_url("redis")?;
    Some(lockkit_core::LockConfig::new(url).with_option("redisson_compat", "true"))
}

lockkit_testing::conformance_suite!(config, lockkit_redis::connect);
