//! The `file://` mutex: an exclusive OS lock on one file.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::inner::Inner;
use super::oslock::{force_remove, io_error, is_held, LockMode};
use super::paths::LockPaths;
use super::sidecar::Record;
use crate::error::Result;
use crate::inspect::LockInfo;
use crate::spi::{GuardParts, RawMutex, Request};

#[derive(Debug)]
pub(super) struct FileMutex {
    pub(super) inner: Arc<Inner>,
    pub(super) name: Arc<str>,
    pub(super) paths: LockPaths,
}

#[async_trait]
impl RawMutex for FileMutex {
    async fn acquire(&self, req: &Request) -> Result<Option<GuardParts>> {
        let Some(files) = Inner::lock_exclusive(req, &self.paths).await? else {
            return Ok(None);
        };
        let parts = self
            .inner
            .finish_exclusive(&self.name, &self.paths, files, req.lease(), None, None)
            .await?;
        Ok(Some(parts))
    }

    async fn is_locked(&self) -> Result<bool> {
        is_held(&self.paths.lock(), LockMode::Shared).map_err(io_error)
    }

    async fn force_unlock(&self) -> Result<bool> {
        force_remove(&self.paths.lock()).map_err(io_error)
    }

    async fn remaining_lease(&self) -> Result<Option<Duration>> {
        if !self.is_locked().await? {
            return Ok(None);
        }
        // A watchdog lease counts as renewed for as long as its holder lives: its full length.
        Ok(Record::read(&self.paths.holder()).and_then(|r| r.info().remaining_lease))
    }
}

/// Who holds the mutex at `p`.
pub(super) fn inspect(p: &LockPaths) -> std::io::Result<LockInfo> {
    if !is_held(&p.lock(), LockMode::Shared)? {
        return Ok(LockInfo::default());
    }
    Ok(LockInfo::new(
        vec![Record::holder_info(&p.holder())],
        Vec::new(),
    ))
}
