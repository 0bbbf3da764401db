//! The lockkit conformance suite against a Redis primary found through Sentinel
//! (`LOCKKIT_TEST_REDIS_SENTINEL_URL`, e.g. `redis+sentinel://127.0.0.1:26400,…/lockkit`, as
//! `scripts/services.sh up --cluster` prints it).

async fn locks() -> Option<lockkit_core::Locks> {
    let url = lockkit_core::testing::server_url("redis_sentinel")?;
    Some(
        lockkit_redis::connect(&lockkit_core::LockConfig::new(url))
            .await
            .unwrap(),
    )
}

lockkit_core::conformance_suite!(locks);
