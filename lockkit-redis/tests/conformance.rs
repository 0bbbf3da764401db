//! The lockkit conformance suite against a real redis-server (`LOCKKIT_TEST_REDIS_URL`).

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("redis").map(lockkit_core::LockConfig::new)
}

lockkit_testing::conformance_suite!(config, lockkit_redis::connect);
