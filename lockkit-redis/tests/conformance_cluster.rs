//! The lockkit conformance suite against a Redis Cluster (`LOCKKIT_TEST_REDIS_CLUSTER_URL`,
//! e.g. `redis+cluster://127.0.0.1:16410,…`, as `scripts/services.sh up --cluster` prints it).

async fn locks() -> Option<lockkit_core::Locks> {
    let url = lockkit_core::testing::server_url("redis_cluster")?;
    Some(
        lockkit_redis::connect(&lockkit_core::LockConfig::new(url))
            .await
            .unwrap(),
    )
}

lockkit_core::conformance_suite!(locks);
