//! The conformance suite against a 3-server ZooKeeper ensemble (`LOCKKIT_TEST_ZK_ENSEMBLE_URL`,
//! a connect string naming every server; started by `scripts/services.sh up --cluster`).

async fn locks() -> Option<lockkit_core::Locks> {
    let url = lockkit_core::testing::server_url("zk_ensemble")?;
    Some(
        lockkit_zk::connect(&lockkit_core::LockConfig::new(url))
            .await
            .unwrap(),
    )
}

lockkit_core::conformance_suite!(locks);
