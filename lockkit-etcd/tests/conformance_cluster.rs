//! The lockkit conformance suite against a 3-member etcd cluster
//! (`LOCKKIT_TEST_ETCD_CLUSTER_URL`, every member's endpoint; started by
//! `scripts/services.sh up --cluster`).

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("etcd_cluster").map(lockkit_core::LockConfig::new)
}

lockkit_testing::conformance_suite!(config, lockkit_etcd::connect);
