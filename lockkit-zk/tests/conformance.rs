//! The conformance suite against a real ZooKeeper (`LOCKKIT_TEST_ZK_URL`).

async fn locks() -> Option<lockkit_core::Locks> {
    let url = lockkit_core::testing::server_url("zk")?;
    Some(
        lockkit_zk::connect(&lockkit_core::LockConfig::new(url))
            .await
            .unwrap(),
    )
}

lockkit_core::conformance_suite!(locks);
