//! The lockkit conformance suite against a real etcd (`LOCKKIT_TEST_ETCD_URL`).

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("etcd").map(lockkit_core::LockConfig::new)
}

lockkit_testing::conformance_suite!(config, lockkit_etcd::connect);
