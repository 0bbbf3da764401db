//! Operator views: one lock's holders and waiters (`inspect`), and the locks under a name
//! prefix (`list`, a paged `SCAN` on every primary).

use std::time::Duration;

use lockkit_core::{
    Error, ErrorKind, FencingToken, HoldMode, HolderInfo, LockEntry, LockInfo, Primitive, Result,
    WaiterInfo,
};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::Value;

use crate::client::Inner;
use crate::conn::Conn;
use crate::keys::{native_lock_of, LockKeys};

/// Keys read per `SCAN` page.
const SCAN_COUNT: usize = 500;

/// Holders and waiters of one lock, read in one script. The holder of a native mutex or write
/// lock carries the fencing counter's value: every acquire writes its token there, and no other
/// acquire can happen while it holds. With `redisson_compat` no token is shown, since a Redisson
/// `RLock` holder takes none.
pub(crate) async fn inspect(inner: &Inner, name: &str, primitive: Primitive) -> Result<LockInfo> {
    let compat = inner.settings.redisson_compat;
    let keys = match primitive {
        Primitive::Mutex => inner.keys(name)?,
        // Elections are on lockkit's layout whatever `redisson_compat` says.
        Primitive::Election => LockKeys::election(&inner.settings.prefix, name),
        _ if compat => {
            return Err(Error::unsupported(format!(
                "the Redis backend cannot inspect a {} on Redisson's layout",
                primitive.as_str()
            )))
        }
        Primitive::RwLock => LockKeys::rwlock(&inner.settings.prefix, name),
        _ => LockKeys::semaphore(&inner.settings.prefix, name),
    };
    let waiting = if matches!(primitive, Primitive::Mutex | Primitive::Election) {
        &keys.queue
    } else {
        &keys.waiters
    };
    let mut inv = inner.scripts.inspect.prepare_invoke();
    inv.key(&keys.lock)
        .key(&keys.holders)
        .key(waiting)
        .key(&keys.fence)
        .key(&keys.waiters);
    let (pttl, fence, fields, shared, queue): (i64, String, Vec<String>, Vec<String>, Vec<String>) =
        inner.invoke(&inv, "inspect").await?;
    let token = (!compat || primitive == Primitive::Election)
        .then(|| fence.parse().ok().map(FencingToken))
        .flatten();
    let lease = (pttl >= 0).then(|| Duration::from_millis(pttl as u64));
    let mut holders: Vec<HolderInfo> = fields
        .into_iter()
        .map(|owner| {
            let mut h = HolderInfo::new(owner, HoldMode::Exclusive);
            if let Some(t) = token {
                h = h.with_token(t);
            }
            if let Some(d) = lease {
                h = h.with_remaining_lease(d);
            }
            h
        })
        .collect();
    for pair in shared.chunks(2) {
        let [member, ms] = pair else { continue };
        let (owner, mode) = match (primitive, member.rsplit_once('|')) {
            (Primitive::Semaphore, Some((owner, n))) => {
                (owner.to_string(), HoldMode::Permits(n.parse().unwrap_or(1)))
            }
            (Primitive::Semaphore, None) => (member.clone(), HoldMode::Permits(1)),
            _ => (member.clone(), HoldMode::Shared),
        };
        let left = Duration::from_millis(ms.parse().unwrap_or(0));
        holders.push(HolderInfo::new(owner, mode).with_remaining_lease(left));
    }
    let waiters = queue
        .into_iter()
        .map(|owner| WaiterInfo::new(owner, HoldMode::Exclusive))
        .collect();
    Ok(LockInfo::new(holders, waiters))
}

/// The locks under `prefix` that have a lock hash, shared holders or waiters. Native layout only:
/// Redisson's keeps a lock under its bare name, which no scan can tell from other keys.
pub(crate) async fn list(inner: &Inner, prefix: &str) -> Result<Vec<LockEntry>> {
    if inner.settings.redisson_compat {
        return Err(Error::unsupported(
            "the Redis backend cannot list locks on Redisson's layout (redisson_compat): it keeps \
             each lock under its bare name",
        ));
    }
    let ours = &inner.settings.prefix;
    let tag_prefix = crate::keys::tag(prefix);
    // `<prefix>:<kind>:{<escaped name prefix>*`: the tag's closing brace left off.
    let pattern = format!(
        "{}:*{}*",
        glob_escape(ours),
        glob_escape(&tag_prefix[..tag_prefix.len() - 1])
    );
    let mut found = Vec::new();
    for node in nodes(inner).await? {
        let mut cursor = 0u64;
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let (next, keys): (u64, Vec<Vec<u8>>) = scan_page(inner, node.as_ref(), &cmd).await?;
            found.extend(keys.iter().filter_map(|k| {
                let (primitive, name) = native_lock_of(ours, std::str::from_utf8(k).ok()?)?;
                Some(LockEntry::new(name, primitive))
            }));
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(found)
}

fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The nodes to scan: `None` for the one server (single or Sentinel); on a cluster, each primary
/// that serves slots, as `CLUSTER SLOTS` names it (the addresses the cluster client connects to).
async fn nodes(inner: &Inner) -> Result<Vec<Option<(String, u16)>>> {
    let Conn::Cluster(c) = &inner.conn else {
        return Ok(vec![None]);
    };
    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
    let reply = route(
        inner,
        c,
        redis::cmd("CLUSTER").arg("SLOTS").clone(),
        routing,
    )
    .await?;
    let primaries = slot_primaries(&reply);
    if primaries.is_empty() {
        return Err(Error::new(
            ErrorKind::Backend,
            "list: CLUSTER SLOTS named no primary to scan",
        ));
    }
    Ok(primaries.into_iter().map(Some).collect())
}

/// The distinct primaries of a `CLUSTER SLOTS` reply that name a host.
fn slot_primaries(reply: &Value) -> Vec<(String, u16)> {
    let mut out: Vec<(String, u16)> = Vec::new();
    for (_, _, host, port) in crate::conn::slot_ranges(reply) {
        if !host.is_empty() && !out.contains(&(host.clone(), port)) {
            out.push((host, port));
        }
    }
    out
}

async fn route(
    inner: &Inner,
    c: &redis::cluster_async::ClusterConnection,
    cmd: redis::Cmd,
    routing: RoutingInfo,
) -> Result<Value> {
    let mut c = c.clone();
    tokio::time::timeout(
        inner.settings.command_timeout,
        c.route_command(cmd, routing),
    )
    .await
    .map_err(|_| crate::error::timeout("list"))?
    .map_err(|e| crate::error::map(e, "list"))
}

async fn scan_page(
    inner: &Inner,
    node: Option<&(String, u16)>,
    cmd: &redis::Cmd,
) -> Result<(u64, Vec<Vec<u8>>)> {
    let (Some((host, port)), Conn::Cluster(c)) = (node, &inner.conn) else {
        return inner.query(cmd, "list").await;
    };
    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
        host: host.clone(),
        port: *port,
    });
    let reply = route(inner, c, cmd.clone(), routing).await?;
    redis::from_redis_value(reply).map_err(|e| crate::error::map(e.into(), "list"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_slots_reply_gives_each_primary_once() {
        let node = |h: &str, p: i64| {
            Value::Array(vec![
                Value::BulkString(h.as_bytes().to_vec()),
                Value::Int(p),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |a: i64, b: i64, primary: Value| {
            Value::Array(vec![
                Value::Int(a),
                Value::Int(b),
                primary,
                node("127.0.0.1", 9999),
            ])
        };
        let reply = Value::Array(vec![
            range(0, 100, node("127.0.0.1", 16410)),
            range(101, 5460, node("127.0.0.1", 16410)),
            range(5461, 10922, node("127.0.0.1", 16411)),
            range(10923, 16383, node("", 16412)),
        ]);
        assert_eq!(
            slot_primaries(&reply),
            [
                ("127.0.0.1".to_string(), 16410),
                ("127.0.0.1".to_string(), 16411)
            ]
        );
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
