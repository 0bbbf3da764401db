//! The lockkit conformance suite against a real etcd (`LOCKKIT_TEST_ETCD_URL`).

async fn locks() -> Option<lockkit_core::Locks> {
    let url = lockkit_core::testing::server_url("etcd")?;
    Some(
        lockkit_etcd::connect(&lockkit_core::LockConfig::new(url))
            .await
            .unwrap(),
    )
}

lockkit_core::conformance_suite!(locks);
