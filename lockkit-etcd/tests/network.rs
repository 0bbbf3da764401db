//! Network faults between a holder and the shared test server, through a fault-injecting proxy
//! (`lockkit_testing::network`): a half-open connection, a link slower than the lease, a short
//! partition that heals in place, every connection reset.

fn config() -> Option<lockkit_core::LockConfig> {
    lockkit_testing::server_url("etcd").map(lockkit_core::LockConfig::new)
}

lockkit_testing::network_suite!(config, lockkit_etcd::connect);
