//! Each worker's network link to the servers: one fault-injecting proxy
//! ([`lockkit_testing::proxy::Proxy`]) per server endpoint of the URL, so that a network fault
//! hits one worker (the holder) or every worker, and never the coordinator's probe and scans.
//!
//! Clients that learn server addresses from the servers would route around the proxies: Redis
//! Sentinel hands out the primary's address and Redis Cluster its nodes', so [`Links::new`]
//! refuses those URLs. etcd and ZooKeeper clients keep to the endpoints they were given
//! (lockkit's etcd client does not sync its endpoint list).

use std::collections::HashMap;
use std::time::Duration;

use lockkit_testing::proxy::Proxy;

/// The proxies of every live worker.
pub struct Links {
    /// The URL up to its endpoints (`etcd://`, `redis://user@`).
    head: String,
    /// The server endpoints (`host:port`).
    endpoints: Vec<String>,
    /// The URL after its endpoints (path and query).
    tail: String,
    proxies: HashMap<u32, Vec<Proxy>>,
}

impl Links {
    /// Links to the servers of `url`; a Sentinel or Cluster URL is refused (see the module
    /// docs).
    pub fn new(url: &str) -> std::io::Result<Links> {
        if url.starts_with("redis+sentinel://") || url.starts_with("redis+cluster://") {
            return Err(std::io::Error::other(format!(
                "network faults cannot reach the data connections of {url}: Redis hands out \
                 its servers' addresses, which route around the proxies (fault the primary \
                 directly: scripts/faults.sh run redis primary)"
            )));
        }
        let (head, endpoints, tail) = split(url)?;
        Ok(Links {
            head,
            endpoints,
            tail,
            proxies: HashMap::new(),
        })
    }

    /// Starts `worker`'s proxies; returns the URL it connects through.
    pub async fn open(&mut self, worker: u32) -> std::io::Result<String> {
        let mut proxies = Vec::with_capacity(self.endpoints.len());
        for e in &self.endpoints {
            proxies.push(Proxy::start(e.clone()).await?);
        }
        let hosts: Vec<String> = proxies.iter().map(|p| p.addr().to_string()).collect();
        self.proxies.insert(worker, proxies);
        Ok(format!("{}{}{}", self.head, hosts.join(","), self.tail))
    }

    /// Stops `worker`'s proxies (it was killed).
    pub fn close(&mut self, worker: u32) {
        self.proxies.remove(&worker);
    }

    /// Holds every byte either way on `worker`'s links (a partition; healed in place by
    /// [`heal`](Self::heal)).
    pub fn partition(&self, worker: u32) {
        self.each(worker, Proxy::partition);
    }

    /// Drops nothing but delivers nothing back: the servers' answers on `worker`'s links are
    /// held while its requests still reach them (a half-open connection whose peer still acts).
    pub fn hold_answers(&self, worker: u32) {
        self.each(worker, |p| p.update(|t| t.hold_down = true));
    }

    /// Adds `latency` plus up to `jitter` each way on `worker`'s links.
    pub fn slow(&self, worker: u32, latency: Duration, jitter: Duration) {
        self.each(worker, |p| p.latency(latency, jitter));
    }

    /// Lifts every toxic on `worker`'s links: what was held is delivered, in order.
    pub fn heal(&self, worker: u32) {
        self.each(worker, |p| {
            p.heal();
            p.latency(Duration::ZERO, Duration::ZERO);
        });
    }

    /// Resets `worker`'s live connections (what was held is dropped).
    pub fn reset(&self, worker: u32) {
        self.each(worker, Proxy::reset);
    }

    /// Resets every worker's live connections at once.
    pub fn reset_all(&self) {
        for p in self.proxies.values().flatten() {
            p.reset();
        }
    }

    fn each(&self, worker: u32, f: impl Fn(&Proxy)) {
        for p in self.proxies.get(&worker).into_iter().flatten() {
            f(p);
        }
    }
}

/// Splits a server URL around its comma-separated endpoints.
fn split(url: &str) -> std::io::Result<(String, Vec<String>, String)> {
    let bad = || std::io::Error::other(format!("no server endpoints in {url:?}"));
    let scheme_end = url.find("://").ok_or_else(bad)? + 3;
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let hosts_start = authority.rfind('@').map_or(0, |i| i + 1);
    let endpoints: Vec<String> = authority[hosts_start..]
        .split(',')
        .filter(|h| !h.is_empty())
        .map(String::from)
        .collect();
    if endpoints.is_empty() || endpoints.iter().any(|e| !e.contains(':')) {
        return Err(bad());
    }
    Ok((
        url[..scheme_end + hosts_start].to_string(),
        endpoints,
        rest[authority_end..].to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_around_their_endpoints() {
        let (head, eps, tail) = split("etcd://127.0.0.1:1,127.0.0.1:2?lease_ttl=2s").unwrap();
        assert_eq!(head, "etcd://");
        assert_eq!(eps, ["127.0.0.1:1", "127.0.0.1:2"]);
        assert_eq!(tail, "?lease_ttl=2s");
        let (head, eps, tail) = split("redis://u:p@127.0.0.1:6379/2").unwrap();
        assert_eq!((head.as_str(), tail.as_str()), ("redis://u:p@", "/2"));
        assert_eq!(eps, ["127.0.0.1:6379"]);
        assert!(split("zk://").is_err());
        assert!(Links::new("redis+sentinel://127.0.0.1:1/m").is_err());
        assert!(Links::new("redis+cluster://127.0.0.1:1").is_err());
        assert!(split("mem://x").is_err());
    }

    #[tokio::test]
    async fn a_worker_connects_through_its_own_proxies() {
        let mut links = Links::new("zk://127.0.0.1:1,127.0.0.1:2/chroot?x=1").unwrap();
        let a = links.open(1).await.unwrap();
        let b = links.open(2).await.unwrap();
        assert_ne!(a, b);
        assert!(
            a.starts_with("zk://127.0.0.1:") && a.ends_with("/chroot?x=1"),
            "{a}"
        );
        assert_eq!(a.matches(',').count(), 1);
        links.close(1);
        assert!(!links.proxies.contains_key(&1));
    }
}
