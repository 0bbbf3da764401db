//! The Redis side of the core's [`Watchdog`](lockkit_core::spi::Watchdog): how a watched
//! ownership is renewed (a field of a lock hash, a member of a sorted set), one script call per
//! batch of one kind (and, in a cluster, one slot), counted only once the replicas have it.

use std::time::Duration;

use lockkit_core::async_trait;
use lockkit_core::spi::{Due, Renew, Renewed};
use redis::cluster_routing::Slot;
use std::sync::Arc;

use crate::conn::Conn;
use crate::replicas::Replicas;
use crate::script_set::Scripts;

/// The ownerships one client keeps alive.
pub(crate) type Watchdog = lockkit_core::spi::Watchdog<Renewal>;

/// How a watched ownership is renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RenewKind {
    /// A field of a lock hash whose expiry is the lease (mutex, write lock).
    Hash,
    /// A member of a sorted set scored by its deadline (read lock, semaphore permits).
    Set,
    /// An elected leader: its lock hash field and its leader hash (`scripts/elect.lua`).
    Leader,
}

impl RenewKind {
    /// The batched renewal script of this kind (also what `extend` runs).
    pub(crate) fn script(self, scripts: &Scripts) -> &redis::Script {
        match self {
            RenewKind::Hash => &scripts.renew,
            RenewKind::Set => &scripts.renew_set,
            RenewKind::Leader => &scripts.renew_leader,
        }
    }
}

/// What the watchdog keeps about one ownership: its kind, key and owner field.
#[derive(Clone, Debug)]
pub(crate) struct Renewal {
    pub(crate) kind: RenewKind,
    pub(crate) key: String,
    pub(crate) owner: String,
    /// An elected leader's leader hash, renewed with `key` ([`RenewKind::Leader`]).
    pub(crate) leader: Option<String>,
}

impl Renewal {
    /// The renewal of `owner`'s mutex ownership on `keys`: an election's also keeps its leader
    /// hash.
    pub(crate) fn of_mutex(keys: &crate::keys::LockKeys, owner: &str) -> Renewal {
        Renewal {
            kind: match keys.leader {
                Some(_) => RenewKind::Leader,
                None => RenewKind::Hash,
            },
            key: keys.lock.clone(),
            owner: owner.to_string(),
            leader: keys.leader.clone(),
        }
    }
}

/// One client's renewal round trip.
pub(crate) struct Renewer {
    pub(crate) conn: Conn,
    pub(crate) scripts: Arc<Scripts>,
    pub(crate) replicas: Arc<Replicas>,
    pub(crate) command_timeout: Duration,
    /// Every call must touch one slot.
    pub(crate) cluster: bool,
}

#[async_trait]
impl Renew<Renewal> for Renewer {
    type Group = (RenewKind, Option<Slot>);

    fn group(&self, r: &Renewal) -> Self::Group {
        (r.kind, self.cluster.then(|| Slot::for_key(&r.key)))
    }

    async fn renew(&self, batch: &[Due<Renewal>], limit: Duration) -> Option<Vec<Renewed>> {
        let first = &batch.first()?.entry;
        let mut call = first.kind.script(&self.scripts).prepare_invoke();
        for due in batch {
            call.key(&due.entry.key);
            if let Some(leader) = &due.entry.leader {
                call.key(leader);
            }
            call.arg(&due.entry.owner).arg(due.lease.as_millis() as u64);
        }
        let sent_at = tokio::time::Instant::now();
        let epoch = self.replicas.ticket(&first.key);
        let mut conn = self.conn.clone();
        let answer = tokio::time::timeout(limit, call.invoke_async::<Vec<i64>>(&mut conn)).await;
        let answer = match answer {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::debug!(backend = "redis", error = %e, "lockkit: renewal failed");
                return None;
            }
            Err(_) => return None,
        };
        // A renewal counts once the replicas have it (a failover to a replica that missed it
        // would end the lease early), within the renewal's own bound; a lock found gone is Lost
        // at once either way.
        let mut kept = true;
        if answer.contains(&1) {
            let left = limit.saturating_sub(sent_at.elapsed());
            let acked = tokio::time::timeout(left, self.replicas.kept("renewal", epoch)).await;
            if !matches!(acked, Ok(Ok(()))) {
                tracing::debug!(
                    backend = "redis",
                    "lockkit: a renewal did not reach the replicas"
                );
                kept = false;
            }
        }
        let one = |v: i64| match v {
            1 if kept => Renewed::Yes,
            1 => Renewed::Unsure,
            _ => Renewed::Gone,
        };
        Some(answer.into_iter().map(one).collect())
    }

    fn request_timeout(&self) -> Duration {
        self.command_timeout
    }
}
