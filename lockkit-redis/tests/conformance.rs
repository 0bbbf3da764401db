//! The lockkit conformance suite against a real redis-server (`LOCKKIT_TEST_REDIS_URL`).

async fn locks() -> Option<lockkit_core::Locks> {
    let url = lockkit_core::testing::server_url("redis")?;
    Some(
        lockkit_redis::connect(&lockkit_core::LockConfig::new(url))
            .await
            .unwrap(),
    )
}

lockkit_core::conformance_suite!(locks);
