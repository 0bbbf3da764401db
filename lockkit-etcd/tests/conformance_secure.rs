//! The conformance suite against the secure profile (`scripts/services.sh up --secure`):
//! `LOCKKIT_TEST_ETCD_SECURE_URL`, with credentials and a TLS client certificate.

async fn locks() -> Option<lockkit_core::Locks> {
    let url = lockkit_core::testing::server_url("etcd_secure")?;
    Some(
        lockkit_etcd::connect(&lockkit_core::LockConfig::new(url))
            .await
            .unwrap(),
    )
}

lockkit_core::conformance_suite!(locks);
