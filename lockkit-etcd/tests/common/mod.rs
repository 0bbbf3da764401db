//! Helpers shared by the etcd test binaries.
#![allow(dead_code)]

use std::time::Duration;

use lockkit_core::LockConfig;
use lockkit_etcd::etcd_client::{Client, GetOptions, SortOrder, SortTarget};
use lockkit_etcd::EtcdLocks;

/// The test server URL, or `None` to skip (only when etcd is not required).
pub fn url() -> Option<String> {
    lockkit_testing::server_url("etcd")
}

/// A handle with options (`lease_ttl=2s` and the like) appended to the URL's query.
pub async fn connect(url: &str, query: &str) -> EtcdLocks {
    let sep = if url.contains('?') { '&' } else { '?' };
    let full = if query.is_empty() {
        url.to_string()
    } else {
        format!("{url}{sep}{query}")
    };
    lockkit_etcd::connect_etcd(&LockConfig::new(full))
        .await
        .expect("connect to etcd")
}

/// A plain etcd client on the same server, for looking behind lockkit's back.
pub async fn raw(url: &str) -> Client {
    let u = lockkit_core::ServerUrl::parse(url).unwrap();
    let eps: Vec<String> = u.hosts.iter().map(|h| h.to_string()).collect();
    Client::connect(eps, None).await.unwrap()
}

/// The key prefix of mutex `name` under the default root `lockkit`.
pub fn prefix(name: &str) -> String {
    format!("lockkit/{}/", lockkit_core::encode_name(name))
}

/// The keys on a mutex's prefix, oldest first: (key, create revision, lease).
pub async fn keys(raw: &mut Client, name: &str) -> Vec<(String, i64, i64)> {
    let resp = raw
        .get(
            prefix(name),
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend),
            ),
        )
        .await
        .unwrap();
    resp.kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                kv.create_revision(),
                kv.lease(),
            )
        })
        .collect()
}

/// Polls `f` every 20 ms until it is true or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = tokio::time::Instant::now() + limit;
    loop {
        if f().await {
            return;
        }
        if tokio::time::Instant::now() >= until {
            panic!("{what}: not within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A unique lock name.
pub fn name(case: &str) -> String {
    lockkit_testing::unique_name(case)
}
