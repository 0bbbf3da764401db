//! Operator views: one lock's holders and waiters (`inspect`), and the locks under a name
//! prefix (`list`, a paged `SCAN` on every primary).

use std::time::Duration;

use lockkit_core::{
    Error, FencingToken, HoldMode, HolderInfo, LockEntry, LockInfo, Primitive, Result, WaiterInfo,
};
use redis::Value;

use crate::client::Inner;
use crate::conn::Conn;
use crate::keys::{untag, LockKeys};

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
        _ if compat => {
            return Err(Error::unsupported(format!(
                "the Redis backend cannot inspect a {} on Redisson's layout",
                primitive.as_str()
            )))
        }
        Primitive::RwLock => LockKeys::rwlock(&inner.settings.prefix, name),
        _ => LockKeys::semaphore(&inner.settings.prefix, name),
    };
    let waiting = if primitive == Primitive::Mutex {
        &keys.queue
    } else {
        &keys.waiters
    };
    let mut inv = inner.scripts.inspect.prepare_invoke();
    inv.key(&keys.lock)
        .key(&keys.holders)
        .key(waiting)
        .key(&keys.fence);
    let (pttl, fence, fields, shared, queue): (i64, String, Vec<String>, Vec<String>, Vec<String>) =
        inner.invoke(&inv, "inspect").await?;
    let token = (!compat)
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
    let ours = format!("{}:", inner.settings.prefix);
    let tag_prefix = crate::keys::tag(prefix);
    let pattern = format!(
        "{}*{}*",
        glob_escape(&ours),
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
            let (next, keys): (u64, Vec<String>) = scan_page(inner, node.as_ref(), &cmd).await?;
            found.extend(keys.iter().filter_map(|k| entry(k, &ours)));
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(found)
}

/// The lock a native key belongs to, if it is one of the keys that exist only while the lock is
/// held or waited for.
fn entry(key: &str, ours: &str) -> Option<LockEntry> {
    let (kind, rest) = key.strip_prefix(ours)?.split_once(":{")?;
    let tag = rest.strip_suffix('}')?;
    if tag.contains(['{', '}']) {
        return None; // a latch `<unlock>:<owner>` or a foreign key
    }
    let primitive = match kind {
        "lock" | "queue" | "waiters" => Primitive::Mutex,
        "rw-lock" | "rw-holders" | "rw-waiters" => Primitive::RwLock,
        "sem-holders" => Primitive::Semaphore,
        _ => return None,
    };
    Some(LockEntry::new(untag(tag), primitive))
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

/// The nodes to scan: `None` for the one server (single or Sentinel), each primary's address on a
/// cluster.
async fn nodes(inner: &Inner) -> Result<Vec<Option<(String, u16)>>> {
    let Conn::Cluster(c) = &inner.conn else {
        return Ok(vec![None]);
    };
    let mut c = c.clone();
    let routing = redis::cluster_routing::RoutingInfo::SingleNode(
        redis::cluster_routing::SingleNodeRoutingInfo::RandomPrimary,
    );
    let reply = tokio::time::timeout(
        inner.settings.command_timeout,
        c.route_command(redis::cmd("CLUSTER").arg("NODES").clone(), routing),
    )
    .await
    .map_err(|_| crate::error::timeout("list"))?
    .map_err(|e| crate::error::map(e, "list"))?;
    let text: String =
        redis::from_redis_value(reply).map_err(|e| crate::error::map(e.into(), "list"))?;
    Ok(primaries(&text).into_iter().map(Some).collect())
}

/// The primaries of a `CLUSTER NODES` reply that are not failed.
fn primaries(text: &str) -> Vec<(String, u16)> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let (addr, flags) = (f.get(1)?, f.get(2)?);
            if !flags.split(',').any(|x| x == "master") || flags.contains("fail") {
                return None;
            }
            let hostport = addr.split('@').next()?;
            let (host, port) = hostport.rsplit_once(':')?;
            Some((host.to_string(), port.parse().ok()?))
        })
        .collect()
}

async fn scan_page(
    inner: &Inner,
    node: Option<&(String, u16)>,
    cmd: &redis::Cmd,
) -> Result<(u64, Vec<String>)> {
    let (Some((host, port)), Conn::Cluster(c)) = (node, &inner.conn) else {
        return inner.query(cmd, "list").await;
    };
    let routing = redis::cluster_routing::RoutingInfo::SingleNode(
        redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
            host: host.clone(),
            port: *port,
        },
    );
    let mut c = c.clone();
    let reply: Value = tokio::time::timeout(
        inner.settings.command_timeout,
        c.route_command(cmd.clone(), routing),
    )
    .await
    .map_err(|_| crate::error::timeout("list"))?
    .map_err(|e| crate::error::map(e, "list"))?;
    redis::from_redis_value(reply).map_err(|e| crate::error::map(e.into(), "list"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_their_locks() {
        let k = LockKeys::mutex("lockkit", "a{b}%c");
        let m = |key: &str| entry(key, "lockkit:");
        assert_eq!(m(&k.lock), Some(LockEntry::new("a{b}%c", Primitive::Mutex)));
        assert_eq!(
            m(&k.queue),
            Some(LockEntry::new("a{b}%c", Primitive::Mutex))
        );
        assert_eq!(m(&k.fence), None);
        assert_eq!(m(&format!("{}:owner", k.unlock)), None);
        let rw = LockKeys::rwlock("lockkit", "doc");
        assert_eq!(
            m(&rw.holders),
            Some(LockEntry::new("doc", Primitive::RwLock))
        );
        let sem = LockKeys::semaphore("lockkit", "pool");
        assert_eq!(
            m(&sem.holders),
            Some(LockEntry::new("pool", Primitive::Semaphore))
        );
        assert_eq!(m("other:lock:{x}"), None);
    }

    #[test]
    fn cluster_nodes_reply_gives_live_primaries() {
        let text = "a 127.0.0.1:16410@26410 myself,master - 0 0 1 connected 0-5460\n\
                    b 127.0.0.1:16413@26413 slave a 0 0 1 connected\n\
                    c 127.0.0.1:16411@26411 master,fail - 0 0 2 connected\n";
        assert_eq!(primaries(text), [("127.0.0.1".to_string(), 16410)]);
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
