//! The mutex: Curator's InterProcessMutex protocol, with the ownership check and rollover-safe
//! order Curator lacks.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::spi::{GuardParts, RawMutex, Request};
use lockkit_core::Result;

use crate::held;
use crate::node::MUTEX_MARKER;
use crate::queue::{self, Rule, Spec, NODE_DATA};
use crate::sessions::Sessions;

pub(crate) const MARKERS: &[&str] = &[MUTEX_MARKER];

#[derive(Debug)]
pub(crate) struct ZkMutex {
    pub sessions: Arc<Sessions>,
    pub name: String,
    pub dir: String,
}

impl ZkMutex {
    fn spec(&self) -> Spec<'_> {
        Spec {
            name: &self.name,
            dir: &self.dir,
            marker: MUTEX_MARKER,
            markers: MARKERS,
            rule: Rule::Exclusive,
            data: NODE_DATA,
        }
    }
}

#[async_trait]
impl RawMutex for ZkMutex {
    async fn acquire(&self, req: &Request) -> Result<Option<GuardParts>> {
        let session = self.sessions.for_lease(req.lease().duration()).await?;
        let spec = self.spec();
        let Some(node) = queue::contend(&session, &spec, req).await? else {
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

    async fn is_locked(&self) -> Result<bool> {
        Ok(
            !queue::participants(self.sessions.default(), &self.dir, MARKERS)
                .await?
                .is_empty(),
        )
    }

    async fn force_unlock(&self) -> Result<bool> {
        queue::force_delete(self.sessions.default(), &self.dir, MARKERS, queue::first).await
    }
}
