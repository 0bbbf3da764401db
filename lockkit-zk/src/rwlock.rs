//! The read-write lock: Curator's InterProcessReadWriteLock node names (`__READ__`, `__WRIT__`)
//! in one directory, FIFO, with an in-place downgrade.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::spi::{GuardParts, RawRwLock, Request};
use lockkit_core::Result;

use crate::held::{self, WriteInfo};
use crate::node::{Participant, READ_MARKER, WRITE_MARKER};
use crate::queue::{self, Node, Rule, Spec, NODE_DATA};
use crate::session::Session;
use crate::sessions::Sessions;

pub(crate) const MARKERS: &[&str] = &[READ_MARKER, WRITE_MARKER];

/// How many of the participants (in queue order) hold the lock: a leading writer, or the readers
/// before the first writer.
pub(crate) fn holder_count(all: &[Participant]) -> usize {
    match all.first() {
        Some(p) if p.marker == 1 => 1,
        _ => all.iter().take_while(|p| p.marker == 0).count(),
    }
}

impl ZkRwLock {
    /// Queues a `marker` node and waits until `rule` lets it hold.
    async fn contend(
        &self,
        session: &Arc<Session>,
        req: &Request,
        marker: &'static str,
        rule: Rule,
    ) -> Result<Option<Node>> {
        let spec = Spec {
            name: &self.name,
            dir: &self.dir,
            marker,
            markers: MARKERS,
            rule,
            data: NODE_DATA,
        };
        queue::contend(session, &spec, req).await
    }
}

#[derive(Debug)]
pub(crate) struct ZkRwLock {
    pub sessions: Arc<Sessions>,
    pub name: String,
    pub dir: String,
}

#[async_trait]
impl RawRwLock for ZkRwLock {
    async fn read(&self, req: &Request) -> Result<Option<GuardParts>> {
        let session = self.sessions.for_lease(req.lease().duration()).await?;
        let Some(node) = self
            .contend(&session, req, READ_MARKER, Rule::Shared)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(held::parts(
            &session,
            &self.name,
            vec![node],
            req.lease(),
            None,
        )))
    }

    async fn write(&self, req: &Request) -> Result<Option<GuardParts>> {
        let session = self.sessions.for_lease(req.lease().duration()).await?;
        let Some(node) = self
            .contend(&session, req, WRITE_MARKER, Rule::Exclusive)
            .await?
        else {
            return Ok(None);
        };
        let info = WriteInfo {
            dir: self.dir.clone(),
        };
        Ok(Some(held::parts(
            &session,
            &self.name,
            vec![node],
            req.lease(),
            Some(info),
        )))
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(
            !queue::participants(self.sessions.default(), &self.dir, MARKERS)
                .await?
                .is_empty(),
        )
    }

    async fn force_unlock(&self) -> Result<bool> {
        queue::force_delete(self.sessions.default(), &self.dir, MARKERS, |all| {
            all[..holder_count(all)].to_vec()
        })
        .await
    }
}
