//! The lockkit conformance suite against Redlock over five independent masters
//! (`LOCKKIT_TEST_REDLOCK_URL`, as `scripts/services.sh up --redlock` prints it).

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("redlock").map(lockkit_core::LockConfig::new)
}

lockkit_testing::conformance_suite!(config, lockkit_redis::connect_redlock);
