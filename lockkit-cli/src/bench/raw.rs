//! Raw-floor rows for the server backends: each server's own minimal lock cycle, with its own
//! client and without lockkit, so the table shows what lockkit adds on top.
//!
//! | backend | one cycle |
//! | --- | --- |
//! | redis | `SET key v NX PX 30000` + `DEL key` (2 round trips) |
//! | zk | create an ephemeral node + delete it (2 round trips) |
//! | etcd | a transaction put-if-absent (create revision 0) + a delete (2 round trips) |
//!
//! Plain single-server URLs without credentials only: TLS (`rediss`, `etcds`), credentials and
//! Redis Sentinel or Cluster URLs get an `n/a` row saying why.

use std::time::Duration;

use lockkit_measure::Latencies;
#[cfg(feature = "full")]
use std::time::Instant;

#[cfg(feature = "full")]
use indicatif::ProgressBar;
#[cfg(feature = "full")]
use lockkit::{BackendKind, LockConfig};

/// The raw floor: the backend's own minimal steps for one lock cycle, without lockkit.
pub(crate) enum RawFloor {
    Measured(Latencies, Duration, &'static str),
    NotMeasured(&'static str),
    Failed(String),
}

#[cfg(feature = "full")]
/// The server URL, or why this module cannot measure it.
fn hosts(cfg: &LockConfig) -> Result<lockkit::ServerUrl, &'static str> {
    let mut url = cfg.server_url().map_err(|_| "no raw floor for this URL")?;
    let backend = lockkit::backend_for(&url.scheme).map_err(|_| "no raw floor for this URL")?;
    url.resolve(backend)
        .map_err(|_| "no raw floor for this URL")?;
    if url.username.is_some() || url.password.is_some() {
        return Err("no raw floor with credentials (plain URLs only)");
    }
    Ok(url)
}

#[cfg(feature = "full")]
/// Measures the raw floor of a server backend.
pub(super) async fn floor(
    cfg: &LockConfig,
    kind: BackendKind,
    ops: u64,
    pb: &ProgressBar,
) -> RawFloor {
    let url = match hosts(cfg) {
        Ok(u) => u,
        Err(why) => return RawFloor::NotMeasured(why),
    };
    let key = format!("lockkit-raw-floor-{:016x}", rand::random::<u64>());
    let r = match (kind.as_str(), url.scheme.as_str()) {
        ("redis", "redis") => redis_floor(&url, &key, ops, pb).await,
        ("zk", _) => zk_floor(&url, &key, ops, pb).await,
        ("etcd", "etcd") => etcd_floor(&url, &key, ops, pb).await,
        _ => return RawFloor::NotMeasured(
            "no raw floor over TLS or for Sentinel/Cluster URLs (plain single-server URLs only)",
        ),
    };
    match r {
        Ok((waits, elapsed, what)) => RawFloor::Measured(waits, elapsed, what),
        Err(e) => RawFloor::Failed(e),
    }
}

#[cfg(feature = "full")]
type Measured = Result<(Latencies, Duration, &'static str), String>;

#[cfg(feature = "full")]
async fn redis_floor(url: &lockkit::ServerUrl, key: &str, ops: u64, pb: &ProgressBar) -> Measured {
    let h = url.hosts.first().ok_or("no host")?;
    let db = if url.path.is_empty() {
        "0"
    } else {
        url.path.as_str()
    };
    let client = redis::Client::open(format!("redis://{h}/{db}")).map_err(|e| e.to_string())?;
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let mut waits = Latencies::new();
    let started = Instant::now();
    for _ in 0..ops {
        let t0 = Instant::now();
        let got: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg("raw")
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut con)
            .await
            .map_err(|e| e.to_string())?;
        waits.record(t0.elapsed());
        if got.is_none() {
            return Err(format!("raw floor key {key} was busy"));
        }
        let _: i64 = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut con)
            .await
            .map_err(|e| e.to_string())?;
        pb.inc(1);
    }
    Ok((waits, started.elapsed(), "SET NX PX + DEL"))
}

#[cfg(feature = "full")]
async fn zk_floor(url: &lockkit::ServerUrl, key: &str, ops: u64, pb: &ProgressBar) -> Measured {
    use zookeeper_client::{Acls, Client, CreateMode};
    let mut connect = url.host_list();
    if !url.path.is_empty() {
        connect.push('/');
        connect.push_str(url.path.trim_start_matches('/'));
    }
    let client = Client::connect(&connect).await.map_err(|e| e.to_string())?;
    let path = format!("/{key}");
    let opts = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let mut waits = Latencies::new();
    let started = Instant::now();
    for _ in 0..ops {
        let t0 = Instant::now();
        client
            .create(&path, b"", &opts)
            .await
            .map_err(|e| format!("create {path}: {e}"))?;
        waits.record(t0.elapsed());
        client
            .delete(&path, None)
            .await
            .map_err(|e| format!("delete {path}: {e}"))?;
        pb.inc(1);
    }
    Ok((waits, started.elapsed(), "create ephemeral + delete"))
}

#[cfg(feature = "full")]
async fn etcd_floor(url: &lockkit::ServerUrl, key: &str, ops: u64, pb: &ProgressBar) -> Measured {
    use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
    let endpoints: Vec<String> = url.hosts.iter().map(|h| format!("http://{h}")).collect();
    let mut client = Client::connect(endpoints, None)
        .await
        .map_err(|e| e.to_string())?;
    let mut waits = Latencies::new();
    let started = Instant::now();
    for _ in 0..ops {
        let t0 = Instant::now();
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, "raw", None)]);
        let resp = client.txn(txn).await.map_err(|e| e.to_string())?;
        waits.record(t0.elapsed());
        if !resp.succeeded() {
            return Err(format!("raw floor key {key} was busy"));
        }
        client.delete(key, None).await.map_err(|e| e.to_string())?;
        pb.inc(1);
    }
    Ok((waits, started.elapsed(), "txn put-if-absent + delete"))
}
