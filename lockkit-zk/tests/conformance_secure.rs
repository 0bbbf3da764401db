//! The conformance suite against the secure profile (`scripts/services.sh up --secure`):
//! `LOCKKIT_TEST_ZK_SECURE_URL`, with credentials and a TLS client certificate.

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("zk_secure").map(lockkit_core::LockConfig::new)
}

lockkit_testing::conformance_suite!(config, lockkit_zk::connect);
