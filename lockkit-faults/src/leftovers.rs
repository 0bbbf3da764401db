//! What a run left behind on the servers: Redis keys of the lock, ZooKeeper nodes under the
//! lock's path, etcd keys under its prefix and live etcd leases.
//!
//! Two scans. The first runs while every worker has stopped acquiring and holds nothing but
//! still has its handle open ([`scan_live`]): what it finds is what the protocol left on live
//! sessions and leases, which `close()` would revoke and so hide. The second runs after the
//! workers closed their handles and exited ([`scan`] with [`Phase::AfterClose`]) and also
//! counts live etcd leases: what `close()` failed to clean up.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::subject::{multi_members, Primitive};

/// Leftovers one scan found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Leftovers {
    /// Lock keys, nodes or etcd keys still present (must be 0).
    pub locks: Vec<String>,
    /// etcd leases still alive (must be 0).
    pub leases: Vec<String>,
    /// Keys kept by design: the Redis fencing counter (`fence_ttl`, with an expiry) and a
    /// semaphore's size (Redis key, etcd key; persistent. ZooKeeper's size node is not looked
    /// at: only the holders' directories are).
    pub kept: Vec<String>,
    /// Redis unlock latches still present; they expire by design within seconds.
    pub latches: usize,
    /// Why the scan could not run, if it could not.
    pub error: Option<String>,
    /// For the scan on live sessions: how long after its first try nothing was left (`None`:
    /// something still was when its grace ran out).
    pub clean_after_ms: Option<f64>,
}

/// When a scan runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The workers' handles are open: their sessions' etcd leases are alive by design, so only
    /// lock keys and nodes count.
    LiveSessions,
    /// The workers closed their handles: live etcd leases count too.
    AfterClose,
}

impl Leftovers {
    /// Lock keys / nodes plus live leases.
    pub fn count(&self) -> usize {
        self.locks.len() + self.leases.len()
    }
}

struct Target {
    scheme: String,
    hosts: Vec<String>,
    path: String,
}

fn parse(url: &str) -> Option<Target> {
    let (scheme, rest) = url.split_once("://")?;
    let rest = rest.split('?').next().unwrap_or_default();
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
    Some(Target {
        scheme: scheme.to_string(),
        hosts: hosts.split(',').map(String::from).collect(),
        path: path.to_string(),
    })
}

/// Scans with the workers' handles open until nothing is left or `grace` has passed since the
/// first try: a release that failed is still being retried in the background, a dropped
/// acquire's cleanup task may still be deleting its key. Whatever is left after that counts.
pub async fn scan_live(url: &str, primitive: Primitive, name: &str, grace: Duration) -> Leftovers {
    let started = Instant::now();
    loop {
        let mut found = scan(url, primitive, name, Phase::LiveSessions).await;
        if found.error.is_none() && found.count() == 0 {
            found.clean_after_ms = Some(started.elapsed().as_secs_f64() * 1000.0);
            return found;
        }
        if started.elapsed() >= grace {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Scans the servers of `url` for what the lock or election `name` (default prefix `lockkit`)
/// left behind.
pub async fn scan(url: &str, primitive: Primitive, name: &str, phase: Phase) -> Leftovers {
    if primitive != Primitive::Multi {
        return scan_one(url, primitive, name, phase).await;
    }
    // A multi-lock row's members are mutexes; live etcd leases are counted once.
    let mut all = Leftovers::default();
    for (i, member) in multi_members(name).iter().enumerate() {
        let phase = if i == 0 { phase } else { Phase::LiveSessions };
        let found = scan_one(url, Primitive::Mutex, member, phase).await;
        all.locks.extend(found.locks);
        all.leases.extend(found.leases);
        all.kept.extend(found.kept);
        all.latches += found.latches;
        all.error = all.error.or(found.error);
    }
    all
}

async fn scan_one(url: &str, primitive: Primitive, name: &str, phase: Phase) -> Leftovers {
    let Some(t) = parse(url) else {
        return failed(format!("cannot parse {url}"));
    };
    let scanned = tokio::time::timeout(Duration::from_secs(20), async {
        match t.scheme.as_str() {
            "redis" => redis_scan(&format!("redis://{}/{}", t.hosts[0], t.path), name).await,
            "redis+sentinel" => match sentinel_primary(&t).await {
                Ok(primary) => redis_scan(&format!("redis://{primary}"), name).await,
                Err(e) => Err(e),
            },
            "zk" => zk_scan(&t, name, primitive).await,
            "etcd" => etcd_scan(&t, name, primitive, phase).await,
            other => Err(format!("leftover scan not implemented for {other}://")),
        }
    })
    .await;
    match scanned {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => failed(e),
        Err(_) => failed("leftover scan timed out".into()),
    }
}

fn failed(error: String) -> Leftovers {
    Leftovers {
        error: Some(error),
        ..Leftovers::default()
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

async fn sentinel_primary(t: &Target) -> Result<String, String> {
    let master = if t.path.is_empty() {
        "mymaster"
    } else {
        &t.path
    };
    let mut last = String::from("no sentinel host");
    for h in &t.hosts {
        let client = redis::Client::open(format!("redis://{h}")).map_err(err)?;
        let Ok(mut con) = client.get_multiplexed_async_connection().await else {
            last = format!("sentinel {h} unreachable");
            continue;
        };
        let addr: redis::RedisResult<Option<(String, String)>> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(master)
            .query_async(&mut con)
            .await;
        match addr {
            Ok(Some((host, port))) => return Ok(format!("{host}:{port}")),
            Ok(None) => last = format!("sentinel {h} does not know {master}"),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

async fn redis_scan(url: &str, name: &str) -> Result<Leftovers, String> {
    let client = redis::Client::open(url).map_err(err)?;
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .map_err(err)?;
    let mut out = Leftovers::default();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("lockkit:*{{{name}}}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut con)
            .await
            .map_err(err)?;
        for key in keys {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut con)
                .await
                .map_err(err)?;
            // The fencing counter and the short-lived unlock latches expire by design; any key
            // without an expiry, and any lock key at all, is a leftover. -2: expired meanwhile.
            if ttl == -2 {
                continue;
            }
            // An election's, RW lock's and semaphore's keys are a mutex's with `elect-`, `rw-`
            // or `sem-` before their kind.
            let kind = key.strip_prefix("lockkit:").unwrap_or(&key);
            let kind = ["elect-", "rw-", "sem-"]
                .iter()
                .find_map(|p| kind.strip_prefix(p))
                .unwrap_or(kind);
            if kind.starts_with("unlock:") && ttl >= 0 {
                out.latches += 1;
            } else if kind.starts_with("fence:") && ttl >= 0 {
                out.kept
                    .push(format!("{key} (expires in {} s)", ttl / 1000));
            } else if kind.starts_with("size:") {
                out.kept.push(format!("{key} (the semaphore's size)"));
            } else {
                out.locks.push(format!("{key} (pttl {ttl})"));
            }
        }
        if next == 0 {
            return Ok(out);
        }
        cursor = next;
    }
}

async fn zk_scan(t: &Target, name: &str, primitive: Primitive) -> Result<Leftovers, String> {
    let mut connect = t.hosts.join(",");
    if !t.path.is_empty() {
        connect = format!("{connect}/{}", t.path.trim_start_matches('/'));
    }
    let client = zookeeper_client::Client::connect(&connect)
        .await
        .map_err(err)?;
    // A semaphore keeps its holders' nodes in `leases/` and `locks/` (Curator's layout) beside
    // its persistent `size` node.
    let dir = format!("/lockkit/{}/{name}", primitive.as_str());
    let dirs = match primitive {
        Primitive::Semaphore => vec![format!("{dir}/leases"), format!("{dir}/locks")],
        _ => vec![dir],
    };
    let mut out = Leftovers::default();
    for dir in dirs {
        match client.list_children(&dir).await {
            Ok(children) => out
                .locks
                .extend(children.into_iter().map(|c| format!("{dir}/{c}"))),
            Err(zookeeper_client::Error::NoNode) => {}
            Err(e) => return Err(err(e)),
        }
    }
    Ok(out)
}

async fn etcd_scan(
    t: &Target,
    name: &str,
    primitive: Primitive,
    phase: Phase,
) -> Result<Leftovers, String> {
    use etcd_client::{Client, GetOptions};
    let endpoints: Vec<String> = t.hosts.iter().map(|h| format!("http://{h}")).collect();
    let mut client = Client::connect(endpoints, None).await.map_err(err)?;
    let prefix = match primitive {
        Primitive::Mutex => format!("lockkit/{name}/"),
        Primitive::Election => format!("lockkit/%election/{name}/"),
        Primitive::Rwlock => format!("lockkit/%rw/{name}/"),
        Primitive::Semaphore => format!("lockkit/%sem/{name}/"),
        Primitive::Multi => return Err("a multi-lock is scanned member by member".into()),
    };
    let resp = client
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(err)?;
    let mut out = Leftovers::default();
    for kv in resp.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        // A semaphore's size, kept without a lease by design.
        if key.ends_with("/%size") {
            out.kept.push(key);
        } else {
            out.locks.push(key);
        }
    }
    if phase == Phase::LiveSessions {
        return Ok(out);
    }
    let leases = client.leases().await.map_err(err)?;
    for lease in leases.leases() {
        let ttl = client
            .lease_time_to_live(lease.id(), None)
            .await
            .map_err(err)?;
        if ttl.ttl() > 0 {
            out.leases
                .push(format!("{:x} (ttl {} s)", lease.id(), ttl.ttl()));
        }
    }
    Ok(out)
}
