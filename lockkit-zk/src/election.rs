//! Leader election in Curator's `LeaderLatch` layout: candidates are protected ephemeral
//! sequential nodes `_c_<uuid>-latch-<seq>` in `<root>/election/<encoded name>`, whose data is
//! the candidate's participant id (here: its value); the first in sequence order leads. A
//! lockkit candidate campaigns through the same queue as the mutex, so it leads only as the
//! first node *of its own live session* (the check Curator added in 5.7, CURATOR-696), and its
//! leadership turns Lost when its node is deleted or its session ends, which neither Curator
//! nor Go does. The term is the leader node's creation zxid. With `election_layout=selector`
//! the nodes are Curator's `LeaderSelector`'s instead (its `InterProcessMutex`'s
//! `_c_<uuid>-lock-<seq>`, with the participant id as data), in the same directory.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::spi::{GuardParts, LeaderFeed, Look, RawElection, Request};
use lockkit_core::{FencingToken, Leader, LeaderChanges, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::map;
use crate::held;
use crate::node::{self, LATCH_MARKER, MUTEX_MARKER};
use crate::ops::{list_or_empty, within};
use crate::queue::{self, Rule, Spec};
use crate::session::Session;
use crate::sessions::Sessions;

/// The candidates' markers of an election whose nodes carry `marker`.
pub(crate) fn markers(marker: &'static str) -> &'static [&'static str] {
    if marker == MUTEX_MARKER {
        &[MUTEX_MARKER]
    } else {
        &[LATCH_MARKER]
    }
}

#[derive(Debug)]
pub(crate) struct ZkElection {
    sessions: Arc<Sessions>,
    name: String,
    dir: String,
    /// `latch-` (Curator's `LeaderLatch`) or `lock-` (its `LeaderSelector`).
    marker: &'static str,
}

impl ZkElection {
    pub(crate) fn new(
        sessions: Arc<Sessions>,
        name: &str,
        dir: String,
        marker: &'static str,
    ) -> Self {
        ZkElection {
            sessions,
            name: name.to_string(),
            dir,
            marker,
        }
    }
}

#[async_trait]
impl RawElection for ZkElection {
    async fn campaign(&self, value: &[u8], req: &Request) -> Result<Option<GuardParts>> {
        let session = self.sessions.for_lease(req.lease().duration()).await?;
        let spec = Spec {
            name: &self.name,
            dir: &self.dir,
            marker: self.marker,
            markers: markers(self.marker),
            rule: Rule::Exclusive,
            data: value,
        };
        let Some(node) = queue::contend(&session, &spec, req).await? else {
            return Ok(None);
        };
        let parts = held::parts(&session, &self.name, vec![node], req.lease(), None);
        Ok(Some(parts))
    }

    /// A read through the default session, after a `sync`: a campaign that returned on another
    /// session (another lease length), perhaps connected to another member, is seen.
    async fn leader(&self) -> Result<Option<Leader>> {
        let session = self.sessions.default();
        let client = session.client()?;
        let limit = session.cfg.command_timeout;
        synced(&client, &self.dir, limit).await?;
        loop {
            let children = list_or_empty(&client, &self.dir, limit).await?;
            let Some(first) = node::sorted(&children, markers(self.marker), None)
                .into_iter()
                .next()
            else {
                return Ok(None);
            };
            let path = format!("{}/{}", self.dir, first.name);
            match within(Instant::now() + limit, client.get_data(&path)).await {
                Ok((data, stat)) => return Ok(Some(leader_of(data, &stat))),
                // It left between the listing and the read: look again.
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(map(e, "read the election's leader")),
            }
        }
    }

    /// Watches through the default session, after a `sync` (see `leader`), so the first state
    /// is no older than the call.
    async fn observe(&self) -> Result<LeaderChanges> {
        let session = self.sessions.default().clone();
        let limit = session.cfg.command_timeout;
        synced(&session.client()?, &self.dir, limit).await?;
        let (feed, changes) = LeaderFeed::channel();
        let watches = Watches {
            session,
            dir: self.dir.clone(),
            markers: markers(self.marker),
        };
        // A closed handle ends the observer through its next look (`Closed`).
        tokio::spawn(feed.follow(watches, std::future::pending()));
        Ok(changes)
    }

    /// Deletes the first candidate's node, whoever's it is. A Curator leader's too, but Curator
    /// does not watch its own node once it leads: it is not told, and goes on believing it leads.
    async fn force_resign(&self) -> Result<bool> {
        let (session, markers) = (self.sessions.default(), markers(self.marker));
        queue::force_delete(session, &self.dir, markers, queue::first).await
    }
}

/// Brings the member this client talks to up to date with the ensemble's leader, so a read
/// that follows sees every write completed before the call (on any session); at most `limit`.
async fn synced(client: &zk::Client, dir: &str, limit: std::time::Duration) -> Result<()> {
    match within(Instant::now() + limit, client.sync(dir)).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(e) => Err(map(e, "sync the election")),
    }
}

fn leader_of(data: Vec<u8>, stat: &zk::Stat) -> Leader {
    Leader::new(data, FencingToken(u64::try_from(stat.czxid).unwrap_or(0)))
}

/// Follows `dir`'s leader with watches only: the directory's children (a candidate comes or
/// goes) and the leader node's data (a proclamation).
struct Watches {
    session: Arc<Session>,
    dir: String,
    markers: &'static [&'static str],
}

#[async_trait]
impl Look for Watches {
    async fn look(&mut self, feed: &mut LeaderFeed) -> Result<()> {
        look(&self.session, &self.dir, self.markers, feed).await
    }
}

/// One look: sends the leader as it is now, then waits for a watch on it to fire. No client is
/// kept while it waits: a ZooKeeper session lives as long as one of its clients, so a closed
/// handle's session ends, its watches fire, and the next look finds the handle closed.
async fn look(session: &Session, dir: &str, markers: &[&str], feed: &mut LeaderFeed) -> Result<()> {
    let client = session.client()?;
    let (children, children_changed) = match client.list_and_watch_children(dir).await {
        Ok(r) => r,
        Err(zk::Error::NoNode) => {
            // No candidate ever, or the emptied directory was removed: wait for it to appear.
            feed.send(None);
            let (stat, created) = client
                .check_and_watch_stat(dir)
                .await
                .map_err(|e| map(e, "watch the election"))?;
            drop(client);
            if stat.is_none() {
                created.changed().await;
            }
            // Created meanwhile (its watch would fire only when it goes): look again now.
            return Ok(());
        }
        Err(e) => return Err(map(e, "watch the election")),
    };
    let Some(first) = node::sorted(&children, markers, None).into_iter().next() else {
        drop(client);
        feed.send(None);
        children_changed.changed().await;
        return Ok(());
    };
    let path = format!("{dir}/{}", first.name);
    let read = client.get_and_watch_data(&path).await;
    drop(client);
    match read {
        Ok((data, stat, data_changed)) => {
            feed.send(Some(leader_of(data, &stat)));
            tokio::select! {
                _ = children_changed.changed() => {}
                _ = data_changed.changed() => {}
            }
        }
        // It left between the listing and the read: its deletion fired the children watch.
        Err(zk::Error::NoNode) => {}
        Err(e) => return Err(map(e, "watch the election's leader")),
    }
    Ok(())
}
