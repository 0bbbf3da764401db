//! The lockkit conformance suite against a 3-member etcd cluster
//! (`LOCKKIT_TEST_ETCD_CLUSTER_URL`, every member's endpoint; started by
//! `scripts/services.sh up --cluster`).

async fn locks() -> Option<lockkit_core::Locks> {
    let url = lockkit_core::testing::server_url("etcd_cluster")?;
    Some(
        lockkit_etcd::connect(&lockkit_core::LockConfig::new(url))
            .await
            .unwrap(),
    )
}

lockkit_core::conformance_suite!(locks);
