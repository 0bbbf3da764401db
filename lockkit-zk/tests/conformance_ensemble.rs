//! The conformance suite against a 3-server ZooKeeper ensemble (`LOCKKIT_TEST_ZK_ENSEMBLE_URL`,
//! a connect string naming every server; started by `scripts/services.sh up --cluster`).

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("zk_ensemble").map(lockkit_core::LockConfig::new)
}

lockkit_testing::conformance_suite!(config, lockkit_zk::connect);
