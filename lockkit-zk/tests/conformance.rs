//! The conformance suite against a real ZooKeeper (`LOCKKIT_TEST_ZK_URL`).

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("zk").map(lockkit_core::LockConfig::new)
}

lockkit_testing::conformance_suite!(config, lockkit_zk::connect);
