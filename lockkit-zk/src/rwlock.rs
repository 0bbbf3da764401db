//! The read-write lock: Curator's InterProcessReadWriteLock node names (`__READ__`, `__WRIT__`)
//! in one directory, FIFO, with an in-place downgrade.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::{AcquireOptions, ReadGuard, ReadWriteLock, Result, WriteGuard};
use tracing::Instrument;

use crate::held::{self, WriteInfo};
use crate::mutex::{check_opts, force_delete};
use crate::node::{Participant, READ_MARKER, WRITE_MARKER};
use crate::queue::{self, Node, Rule, Spec};
use crate::session::Session;

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
        opts: &AcquireOptions,
        marker: &'static str,
        rule: Rule,
    ) -> Result<Option<Node>> {
        let deadline = check_opts(opts)?;
        let spec = Spec {
            dir: &self.dir,
            marker,
            markers: MARKERS,
            rule,
        };
        let span = tracing::debug_span!("lockkit.acquire", lock = %self.name, backend = "zk", mode = marker);
        queue::contend(&self.session, &spec, deadline)
            .instrument(span)
            .await
    }
}

#[derive(Debug)]
pub(crate) struct ZkRwLock {
    pub session: Arc<Session>,
    pub name: String,
    pub dir: String,
}

#[async_trait]
impl ReadWriteLock for ZkRwLock {
    fn name(&self) -> &str {
        &self.name
    }

    async fn read(&self, opts: &AcquireOptions) -> Result<Option<ReadGuard>> {
        let Some(node) = self.contend(opts, READ_MARKER, Rule::Shared).await? else {
            return Ok(None);
        };
        let parts = held::parts(&self.session, &self.name, vec![node], opts.lease, None);
        Ok(Some(ReadGuard::new(parts)))
    }

    async fn write(&self, opts: &AcquireOptions) -> Result<Option<WriteGuard>> {
        let Some(node) = self.contend(opts, WRITE_MARKER, Rule::Exclusive).await? else {
            return Ok(None);
        };
        let info = WriteInfo {
            dir: self.dir.clone(),
        };
        let parts = held::parts(
            &self.session,
            &self.name,
            vec![node],
            opts.lease,
            Some(info),
        );
        Ok(Some(WriteGuard::new(parts)))
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(!queue::participants(&self.session, &self.dir, MARKERS)
            .await?
            .is_empty())
    }

    async fn force_unlock(&self) -> Result<bool> {
        force_delete(&self.session, &self.dir, MARKERS, |all| {
            all[..holder_count(all)].to_vec()
        })
        .await
    }
}
