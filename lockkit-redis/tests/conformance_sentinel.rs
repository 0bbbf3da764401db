//! The lockkit conformance suite against a Redis primary found through Sentinel
//! (`LOCKKIT_TEST_REDIS_SENTINEL_URL`, e.g. `redis+sentinel://127.0.0.1:26400,…/lockkit`, as
//! `scripts/services.sh up --cluster` prints it).

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("redis_sentinel").map(lockkit_core::LockConfig::new)
}

lockkit_testing::conformance_suite!(config, lockkit_redis::connect);
