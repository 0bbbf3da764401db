//! Helpers shared by the etcd test binaries.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::time::Duration;

use lockkit_core::LockConfig;
use lockkit_etcd::etcd_client::{Client, Compare, GetOptions, SortOrder, SortTarget, Txn, TxnOp};
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

/// The `host:port` of the first endpoint of an `etcd://` URL.
pub fn server(url: &str) -> String {
    lockkit_core::ServerUrl::parse_for(url, &lockkit_etcd::INFO)
        .unwrap()
        .hosts[0]
        .to_string()
}

/// A plain etcd client on the same server, for looking behind lockkit's back.
pub async fn raw(url: &str) -> Client {
    let u = lockkit_core::ServerUrl::parse_for(url, &lockkit_etcd::INFO).unwrap();
    let eps: Vec<String> = u.hosts.iter().map(|h| h.to_string()).collect();
    Client::connect(eps, None).await.unwrap()
}

/// Runs `then` in one transaction only if `when` holds; whether it did.
pub async fn txn_if(client: &mut Client, when: Compare, then: TxnOp) -> bool {
    let txn = Txn::new().when([when]).and_then([then]);
    client.txn(txn).await.unwrap().succeeded()
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

/// Waits (up to 5 s) until mutex `name` has `count` keys.
pub async fn until_keys(raw: &Client, name: &str, count: usize) {
    eventually(
        Duration::from_secs(5),
        &format!("{count} keys on {name}"),
        || {
            let mut r = raw.clone();
            async move { keys(&mut r, name).await.len() == count }
        },
    )
    .await;
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

/// A proxy to one etcd endpoint that delays everything `delay` (in order) on every connection
/// but the first: a lockkit handle's first connection carries its requests, its next one its
/// watches, so its watch events arrive that much after everyone else's while its reads stay
/// current (a watch on a lagging member).
pub async fn lagging_proxy(server: &str, delay: Duration) -> lockkit_testing::proxy::Proxy {
    let proxy = lockkit_testing::proxy::Proxy::start(server).await.unwrap();
    proxy.set(lockkit_testing::proxy::Toxics {
        latency: delay,
        spare: 1,
        ..Default::default()
    });
    proxy
}

/// The sum of etcd's metric `metric` over its labels, from its `/metrics` page on the client
/// port.
pub fn gauge(url: &str, metric: &str) -> f64 {
    let u = lockkit_core::ServerUrl::parse_for(url, &lockkit_etcd::INFO).unwrap();
    let mut conn = std::net::TcpStream::connect(u.hosts[0].to_string()).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut page = String::new();
    conn.read_to_string(&mut page).unwrap();
    let values: Vec<f64> = page
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(metric)?;
            let value = match rest.strip_prefix(' ') {
                Some(v) => v,
                None => rest.strip_prefix('{')?.split_once("} ")?.1,
            };
            value.trim().parse().ok()
        })
        .collect();
    assert!(!values.is_empty(), "no {metric} on etcd's /metrics page");
    values.iter().sum()
}
