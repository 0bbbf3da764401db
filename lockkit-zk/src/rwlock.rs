//! The read-write lock: Curator's InterProcessReadWriteLock node names (`__READ__`, `__WRIT__`)
//! in one directory, FIFO, with an in-place downgrade.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::{AcquireOptions, ReadGuard, ReadWriteLock, Result, WriteGuard};
use tracing::Instrument;

use crate::held::{self, WriteInfo};
use crate::mutex::{check_opts, force_delete};
use crate::node::{READ_MARKER, WRITE_MARKER};
use crate::queue::{self, Rule, Spec};
use crate::session::Session;

pub(crate) const MARKERS: &[&str] = &[READ_MARKER, WRITE_MARKER];

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
        let deadline = check_opts(opts)?;
        let spec = Spec {
            dir: &self.dir,
            marker: READ_MARKER,
            markers: MARKERS,
            rule: Rule::Shared,
        };
        let span = tracing::debug_span!("lockkit.acquire", lock = %self.name, backend = "zk", mode = spec.marker);
        let Some(node) = queue::contend(&self.session, &spec, deadline)
            .instrument(span)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(ReadGuard::new(held::parts(
            &self.session,
            &self.name,
            vec![node],
            opts.lease,
            None,
        ))))
    }

    async fn write(&self, opts: &AcquireOptions) -> Result<Option<WriteGuard>> {
        let deadline = check_opts(opts)?;
        let spec = Spec {
            dir: &self.dir,
            marker: WRITE_MARKER,
            markers: MARKERS,
            rule: Rule::Exclusive,
        };
        let span = tracing::debug_span!("lockkit.acquire", lock = %self.name, backend = "zk", mode = spec.marker);
        let Some(node) = queue::contend(&self.session, &spec, deadline)
            .instrument(span)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(WriteGuard::new(held::parts(
            &self.session,
            &self.name,
            vec![node],
            opts.lease,
            Some(WriteInfo {
                dir: self.dir.clone(),
            }),
        ))))
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(!queue::participants(&self.session, &self.dir, MARKERS)
            .await?
            .is_empty())
    }

    async fn force_unlock(&self) -> Result<bool> {
        force_delete(&self.session, &self.dir, MARKERS, |all| {
            // The holders: a leading writer, or the readers before the first writer.
            match all.first() {
                Some(p) if p.marker == 1 => vec![p.clone()],
                _ => all.iter().take_while(|p| p.marker == 0).cloned().collect(),
            }
        })
        .await
    }
}
