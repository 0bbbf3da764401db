//! A multi-lock's mutexes in one step: one `multi` creates our node in every member's
//! directory, all or none, and the directories are listed in the same round trip (ZooKeeper
//! answers one session's requests in order). Where every node of ours is first, the set is
//! held, in one round trip where the core would otherwise take one per member.
//!
//! Once a take found its set busy, the handle's next take looks first: every member's directory
//! listed in one round trip of reads, and the multi only when all are empty, so that under
//! contention a busy set costs one read instead of two writes (a multi of creates and one of
//! deletes). Measured both ways (benches/multi.rs), each is the faster where it is used.
//!
//! A look that finds anyone, or a node of ours that is not first, makes the set busy, the nodes
//! deleted again at once: the core then queues
//! member by member, in its global order (nodes kept in several queues at once, each behind
//! someone, could deadlock with a set taken in order). Only mutexes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lockkit_core::spi::{GuardParts, Request, Taken};
use lockkit_core::{Error, ErrorKind, Member, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::map;
use crate::held;
use crate::mutex::MARKERS;
use crate::node::{self, MUTEX_MARKER};
use crate::ops::within;
use crate::queue::{decide, delete_now, Cleanup, Node, Rule, Spec, Turn, Unclaimed, NODE_DATA};
use crate::session::Session;
use crate::sessions::Sessions;

/// Takes every member of `members` at once, when one `multi` can (`dir`: a mutex's directory).
pub(crate) async fn take_all(
    sessions: &Arc<Sessions>,
    members: &[Member<'_>],
    req: &Request,
    dir: impl Fn(&str) -> String,
    contended: &AtomicBool,
) -> Result<Taken<Vec<GuardParts>>> {
    let Some(names) = Member::mutex_names(members) else {
        return Ok(Taken::NotHere);
    };
    let session = sessions.for_lease(req.lease().duration()).await?;
    let client = session.client()?;
    let dirs: Vec<String> = names.iter().map(|n| dir(n)).collect();
    let until = Instant::now() + session.cfg.command_timeout;
    if contended.load(Ordering::Relaxed) && !all_empty(&client, &dirs, until).await? {
        return Ok(Taken::Busy);
    }
    let taken = take(&session, &client, &names, &dirs, req).await;
    contended.store(matches!(taken, Ok(Taken::Busy)), Ordering::Relaxed);
    taken
}

/// Whether no one of `dirs` holds a lock node (or exists), in one round trip of reads (by
/// `until`).
async fn all_empty(client: &zk::Client, dirs: &[String], until: Instant) -> Result<bool> {
    let looks: Vec<_> = dirs.iter().map(|d| client.list_children(d)).collect();
    let mut empty = true;
    for look in looks {
        match within(until, look).await {
            // Only lock nodes count, as in `decide` (which skips anything else in the dir).
            Ok(children) => empty &= !children.iter().any(|c| node::parse(c, MARKERS).is_some()),
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(map(e, "cannot list a multi-lock member")),
        }
    }
    Ok(empty)
}

/// The multi of creates and its listings: the set, or busy.
async fn take(
    session: &Arc<Session>,
    client: &zk::Client,
    names: &[&str],
    dirs: &[String],
    req: &Request,
) -> Result<Taken<Vec<GuardParts>>> {
    let prefixes: Vec<String> = dirs
        .iter()
        .map(|_| {
            let uuid = uuid::Uuid::new_v4();
            format!("{}{MUTEX_MARKER}", node::protected_prefix(&uuid))
        })
        .collect();
    // Armed before the multi is sent: one whose answer never comes may still be applied.
    let mut cleanup: Cleanup = Unclaimed::armed(session, client.clone());
    for (d, p) in dirs.iter().zip(&prefixes) {
        cleanup.push_prefix(d, p);
    }
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&session.acls));
    let mut made_dirs = false;
    let me = client.session_id().0;
    // Every request below gives up at the command timeout (`ops::within`).
    let until = Instant::now() + session.cfg.command_timeout;
    let created = loop {
        let mut multi = client.new_multi_writer();
        for (d, p) in dirs.iter().zip(&prefixes) {
            multi
                .add_create(&format!("{d}/{p}"), NODE_DATA, &options)
                .map_err(|e| map(e, "cannot build a multi-lock's creates"))?;
        }
        let committed = multi.commit();
        // Sent after the multi on the same session, so they see its nodes.
        let listed: Vec<_> = dirs.iter().map(|d| client.list_children(d)).collect();
        let timed_out = zk::MultiWriteError::RequestFailed {
            source: zk::Error::Timeout,
        };
        match tokio::time::timeout_at(until, committed)
            .await
            .unwrap_or(Err(timed_out))
        {
            Ok(results) => {
                for p in &prefixes {
                    cleanup.answered(p);
                }
                break (results, listed);
            }
            Err(zk::MultiWriteError::OperationFailed {
                source: zk::Error::NoNode,
                ..
            }) => {
                // A directory does not exist yet (or its container was reaped): make them all
                // and try once more; the ordered acquire that follows a second miss rides out
                // containers reaped again. Nothing was created.
                drop(listed);
                if made_dirs {
                    cleanup.disarm();
                    return Ok(Taken::NotHere);
                }
                for d in dirs {
                    session.ensure_dir(client, d).await?;
                }
                made_dirs = true;
            }
            // Nothing was created; a connection loss leaves the cleanup armed.
            Err(zk::MultiWriteError::OperationFailed { source, .. }) => {
                cleanup.disarm();
                return Err(map(source, "cannot take a multi-lock"));
            }
            Err(zk::MultiWriteError::RequestFailed { source }) => {
                return Err(map(source, "cannot take a multi-lock"));
            }
        }
    };
    let (results, listed) = created;
    let mut nodes = Vec::with_capacity(dirs.len());
    for (result, prefix) in results.into_iter().zip(&prefixes) {
        let zk::MultiWriteResult::Create { path, stat } = result else {
            return Err(Error::new(
                ErrorKind::Backend,
                "a multi-lock's multi answered with something else than its creates",
            ));
        };
        nodes.push((path, stat, prefix.clone()));
    }
    let mut first_everywhere = true;
    for (((path, _, _), list), d) in nodes.iter().zip(listed).zip(dirs) {
        let children = within(until, list)
            .await
            .map_err(|e| map(e, "cannot list a multi-lock member"))?;
        let ours = path.rsplit('/').next().unwrap_or_default();
        let spec = Spec {
            name: "",
            dir: d,
            marker: MUTEX_MARKER,
            markers: MARKERS,
            rule: Rule::Exclusive,
            data: NODE_DATA,
        };
        first_everywhere &= decide(&spec, &children, ours) == Turn::Ours;
    }
    if !first_everywhere {
        give_back(
            client,
            cleanup,
            nodes.iter().map(|(path, ..)| path.as_str()),
            until,
        )
        .await;
        return Ok(Taken::Busy);
    }
    // Some servers answer a multi's create with an empty stat (ZOOKEEPER-4026): then the token
    // is read from the node.
    let mut parts = Vec::with_capacity(nodes.len());
    for ((path, stat, prefix), name) in nodes.into_iter().zip(names) {
        let stat = if stat.czxid > 0 {
            stat
        } else {
            match within(until, client.check_stat(&path)).await {
                Ok(Some(stat)) => stat,
                Ok(None) => {
                    delete_now(cleanup).await;
                    return Err(Error::new(
                        ErrorKind::LockLost,
                        format!("our new node {path} vanished at once"),
                    ));
                }
                Err(e) => return Err(map(e, "cannot read a multi-lock member")),
            }
        };
        if stat.ephemeral_owner != me {
            return Err(Error::new(
                ErrorKind::WrongType,
                format!("node {path} of a multi-lock is not owned by our session"),
            ));
        }
        let czxid = stat.czxid;
        let node = Node {
            client: client.clone(),
            path,
            czxid,
            prefix,
        };
        parts.push((node, name));
    }
    cleanup.disarm();
    Ok(Taken::All(
        parts
            .into_iter()
            .map(|(node, name)| held::parts(session, name, vec![node], req.lease(), None))
            .collect(),
    ))
}

/// Deletes our nodes `paths` in one `multi` (by `until`); what it does not delete goes to the
/// reaper (by their protected prefixes, as `cleanup` holds them).
async fn give_back<'p>(
    client: &zk::Client,
    cleanup: Cleanup,
    paths: impl Iterator<Item = &'p str>,
    until: Instant,
) {
    let mut multi = client.new_multi_writer();
    for path in paths {
        if multi.add_delete(path, None).is_err() {
            return; // the drop hands them to the reaper
        }
    }
    if let Ok(Ok(_)) = tokio::time::timeout_at(until, multi.commit()).await {
        cleanup.disarm();
    }
}
