//! What a guard holds on the server: our node(s) (their record and deletion watch are in
//! `owned.rs`), the release, proclaim and downgrade.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::spi::{GuardParts, Held, StateCell};
use lockkit_core::{Error, ErrorKind, FencingToken, Lease, LostReason, Result};
use zookeeper_client as zk;

use crate::error::map;
use crate::ops::delete_node;
use crate::owned::Nodes;
use crate::queue::{Node, Unclaimed, NODE_DATA};
use crate::session::Session;

/// For write locks: what a downgrade needs.
#[derive(Debug, Clone)]
pub(crate) struct WriteInfo {
    pub dir: String,
}

/// One ownership: our nodes in a directory.
#[derive(Debug)]
pub(crate) struct ZkHeld {
    session: Arc<Session>,
    nodes: Arc<Nodes>,
    name: Arc<str>,
    token: FencingToken,
    lease: Lease,
    state: StateCell,
    track_id: u64,
    write: Option<WriteInfo>,
}

/// Builds the guard parts for `nodes` (the first one gives the token) and starts watching them.
pub(crate) fn parts(
    session: &Arc<Session>,
    name: &str,
    nodes: Vec<Node>,
    lease: Lease,
    write: Option<WriteInfo>,
) -> GuardParts {
    let id = nodes[0].client.session_id();
    let token = FencingToken(u64::try_from(nodes[0].czxid).unwrap_or(0));
    // A boxed slice: exactly as long as the paths (collecting in place would keep the room of
    // the `Node`s).
    let paths: Box<[String]> = nodes.into_iter().map(|n| n.path).collect();
    parts_for_paths(session, name, id, paths, token, lease, write)
}

fn parts_for_paths(
    session: &Arc<Session>,
    name: &str,
    id: zk::SessionId,
    paths: Box<[String]>,
    token: FencingToken,
    lease: Lease,
    write: Option<WriteInfo>,
) -> GuardParts {
    // The guard's deadline is the session's: the clock of the session that made our nodes.
    let clock = match session.current() {
        Ok(cur) => cur.clock.clone(),
        Err(_) => lockkit_core::spi::LeaseClock::new(LostReason::Closed),
    };
    let state = StateCell::new(clock);
    let nodes = Arc::new(Nodes {
        session: id,
        paths,
        released: AtomicBool::new(false),
    });
    let track_id = session.track(&state, nodes.clone());
    // Looked at once session events reach the guard: a session that ended between our create
    // and here took our ephemeral nodes with it, and one that ended (or a handle that closed)
    // before `track` told only the guards it tracked; so did a connection that dropped or came
    // back (a state read before `track` could leave the guard Suspect on a live connection).
    match session.current() {
        Err(_) => {
            state.mark_lost(LostReason::Closed);
        }
        Ok(cur) if cur.client.session_id() != id || cur.client.state().is_terminated() => {
            state.mark_lost(LostReason::SessionExpired);
        }
        Ok(cur) if cur.client.state() == zk::SessionState::Disconnected => {
            state.mark_suspect();
        }
        Ok(_) => {}
    }
    for i in 0..nodes.paths.len() {
        session.watch_loss(nodes.clone(), i, state.clone());
    }
    let held = ZkHeld {
        session: session.clone(),
        nodes,
        name: Arc::from(name),
        token,
        lease,
        state: state.clone(),
        track_id,
        write,
    };
    GuardParts::new(token, lease, state, Box::new(held))
}

impl ZkHeld {
    /// A downgrade that did not happen: the write node is ours to watch again (the watch may
    /// have ended while the deletion was expected, and the node may be gone meanwhile).
    fn rearm_loss_watch(&self) {
        self.nodes.released.store(false, Ordering::Release);
        self.session
            .watch_loss(self.nodes.clone(), 0, self.state.clone());
    }

    /// The client of the session that made our nodes, while it lasts; `when` says what the
    /// error's message is about (our nodes went with the session, or with the closed handle).
    fn client(&self, when: &str) -> Result<zk::Client> {
        self.session.client_of(self.nodes.session).ok_or_else(|| {
            let with = if self.session.current().is_err() {
                "the closed handle"
            } else {
                "its session"
            };
            Error::new(
                ErrorKind::LockLost,
                format!("lock {:?} was lost with {with}{when}", self.name),
            )
        })
    }

    /// Deletes `paths` in the reaper: retried until they are gone or the session has ended.
    fn reap_paths(&self, paths: Vec<String>) {
        let (paths, limit) = (Arc::new(paths), self.session.cfg.command_timeout);
        self.session
            .reap("delete a lock node", self.nodes.session, move |client| {
                let paths = paths.clone();
                async move { delete_all(&client, &paths, limit).await.map(drop) }
            });
    }

    fn finish(&self) {
        self.nodes.released.store(true, Ordering::Release);
        self.session.untrack(self.track_id);
    }
}

async fn delete_all(client: &zk::Client, paths: &[String], limit: Duration) -> Result<bool> {
    let mut all = true;
    for path in paths {
        all &= delete_node(client, path, limit).await?;
    }
    Ok(all)
}

#[async_trait]
impl Held for ZkHeld {
    async fn release(&self) -> Result<()> {
        self.finish();
        let limit = self.session.cfg.command_timeout;
        // Without its session (ended, or the handle closed), our nodes are gone.
        let client = self.client(" before release")?;
        match delete_all(&client, &self.nodes.paths, limit).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::new(
                ErrorKind::LockLost,
                format!(
                    "lock {:?} was not held: its node had been deleted",
                    self.name
                ),
            )),
            Err(_) if client.state().is_terminated() => {
                // The session is gone, and with it our ephemeral nodes.
                Err(Error::new(
                    ErrorKind::LockLost,
                    format!(
                        "lock {:?} was lost with its session before release",
                        self.name
                    ),
                ))
            }
            Err(e) => {
                // The node must not outlive the guard while the session lives, whatever the
                // error: a refusal (`NoAuth` after an ACL change) can be lifted as well as a
                // connection can come back, and the reaper tries until then.
                self.reap_paths(self.nodes.paths.to_vec());
                Err(e)
            }
        }
    }

    /// A leader's new value: the data of its node, only while the node is there.
    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        let limit = self.session.cfg.command_timeout;
        let path = &self.nodes.paths[0];
        let client = self.client("")?;
        let set = crate::ops::retry(limit, "set data", || async {
            match client.set_data(path, value, None).await {
                Err(zk::Error::NoNode) => Ok(None),
                other => other.map(Some),
            }
        })
        .await?;
        if set.is_none() {
            self.state.mark_lost(LostReason::Deleted);
            return Err(Error::lost(&self.name));
        }
        Ok(())
    }

    async fn downgrade(&self) -> Result<GuardParts> {
        let Some(write) = &self.write else {
            return Err(Error::unsupported("only a write lock can be downgraded"));
        };
        let client = self.client("")?;
        let path = &self.nodes.paths[0];
        let name = path.rsplit('/').next().unwrap_or_default();
        let Some(at) = name.rfind(crate::node::WRITE_MARKER) else {
            return Err(Error::new(
                ErrorKind::WrongType,
                format!("{path} is not a write node"),
            ));
        };
        let seq = &name[at + crate::node::WRITE_MARKER.len()..];
        // A read node with the write node's sequence takes its place in the queue in the same
        // transaction, so a writer waiting behind us stays behind us.
        let prefix = format!(
            "{}{}",
            crate::node::protected_prefix(&uuid::Uuid::new_v4()),
            crate::node::READ_MARKER
        );
        let read_path = format!("{}/{prefix}{seq}", write.dir);
        // The read node is owned by this call until a guard takes it: if the call is dropped or
        // fails not knowing whether the multi committed (a frozen server may commit it when it
        // resumes), the reaper deletes whatever node of ours carries its protected prefix. The
        // write node is the write guard's, which the core releases if the downgrade fails.
        let mut cleanup = Unclaimed::armed(&self.session, client.clone());
        cleanup.push_prefix(&write.dir, &prefix);
        let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&self.session.acls));
        let mut multi = client.new_multi_writer();
        multi
            .add_delete(path, None)
            .and_then(|_| multi.add_create(&read_path, NODE_DATA, &options))
            .map_err(|e| map(e, "downgrade"))?;
        // The deletion of our write node is ours: its watch must not report it as a loss (the
        // notification comes before the multi's reply).
        self.nodes.released.store(true, Ordering::Release);
        // Bounded: a frozen server answers nothing, and the client notices it only later.
        let limit = self.session.cfg.command_timeout;
        let failed = match tokio::time::timeout(limit, multi.commit()).await {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => match zk::Error::from(e) {
                zk::Error::NoNode => {
                    // The multi failed as a whole: no read node.
                    cleanup.disarm();
                    self.state.mark_lost(LostReason::Deleted);
                    return Err(Error::lost(&self.name));
                }
                e => Some(map(e, "downgrade")),
            },
            Err(_) => Some(Error::new(
                ErrorKind::Timeout,
                format!("downgrade: no reply within {limit:?}"),
            )),
        };
        if let Some(e) = failed {
            // The reply was lost: the multi may have committed, or may still commit when a
            // frozen server resumes. If our read node is there, it did; otherwise (or if we
            // cannot tell) the armed cleanup deletes the read node should it exist (or appear).
            let lookup = async {
                crate::ops::retry(limit, "sync", || client.sync(&write.dir)).await?;
                crate::ops::retry(limit, "stat", || client.check_stat(&read_path)).await
            };
            match tokio::time::timeout(limit, lookup).await {
                Ok(Ok(Some(stat))) if stat.ephemeral_owner == client.session_id().0 => {}
                _ => {
                    self.rearm_loss_watch();
                    return Err(e);
                }
            }
        }
        cleanup.disarm();
        self.finish();
        Ok(parts_for_paths(
            &self.session,
            &self.name,
            self.nodes.session,
            Box::new([read_path]),
            self.token,
            self.lease,
            None,
        ))
    }
}
