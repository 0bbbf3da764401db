//! The conformance suite against the secure profile (`scripts/services.sh up --secure`):
//! `LOCKKIT_TEST_ZK_SECURE_URL`, with credentials and a TLS client certificate.

async fn locks() -> Option<lockkit_core::Locks> {
    let url = lockkit_core::testing::server_url("zk_secure")?;
    Some(
        lockkit_zk::connect(&lockkit_core::LockConfig::new(url))
            .await
            .unwrap(),
    )
}

lockkit_core::conformance_suite!(locks);
