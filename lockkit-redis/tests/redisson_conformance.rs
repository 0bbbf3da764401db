//! The whole conformance suite against a real redis-server with `redisson_compat=true`: the
//! mutex, read-write lock and semaphore on Redisson's key layouts keep every lockkit guarantee.

async fn locks() -> Option<lockkit_core::Locks> {
    let url = lockkit_core::testing::server_url("redis")?;
    let mut cfg = lockkit_core::LockConfig::new(url);
    cfg.options.insert("redisson_compat".into(), "true".into());
    Some(lockkit_redis::connect(&cfg).await.unwrap())
}

lockkit_core::conformance_suite!(locks);
