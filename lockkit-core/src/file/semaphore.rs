//! Semaphores: slot files, a permit is an exclusive OS lock on one slot; the size is stored
//! beside them (`size.rs`).

use std::sync::Arc;

use async_trait::async_trait;

use super::inner::{Acquired, Inner};
use super::oslock::{io_error, is_held, poll, LockMode};
use super::paths::LockPaths;
use super::sidecar::Record;
use super::size;
use crate::error::{Error, ErrorKind, Result};
use crate::inspect::{HoldMode, LockInfo};
use crate::spi::{settle_size, GuardParts, RawSemaphore, Request};

#[derive(Debug)]
pub(super) struct FileSemaphore {
    pub(super) inner: Arc<Inner>,
    pub(super) name: Arc<str>,
    pub(super) paths: LockPaths,
    /// The size asked for (`None`: the stored one).
    pub(super) permits: Option<u32>,
}

#[async_trait]
impl RawSemaphore for FileSemaphore {
    async fn acquire(&self, n: u32, req: &Request) -> Result<Option<GuardParts>> {
        let paths = &self.paths;
        let (sync, mut asked) = (self.inner.sync, self.permits);
        let got = poll(req, &paths.waiting(), || {
            size::admit(paths, &self.name, &mut asked, n, sync)
        })
        .await?;
        let Some(got) = got else {
            return Ok(None);
        };
        let (slots, files): (Vec<u32>, Vec<_>) = got.into_iter().unzip();
        let acquired = Acquired {
            name: self.name.clone(),
            files,
            lease: req.lease(),
            mode: HoldMode::Permits(n),
            check_identity: false,
            sidecars: slots.iter().map(|&i| paths.slot_holder(i)).collect(),
            remove_sidecars: false,
            owner: self.inner.owner(),
            downgrade: None,
            value: None,
        };
        let parts = self.inner.finish(paths.counter(), acquired).await?;
        Ok(Some(parts))
    }

    async fn available(&self) -> Result<u32> {
        let p = &self.paths;
        let stored = size::read(&p.size()).map_err(io_error)?;
        let (size, _) = settle_size(&self.name, self.permits, stored)?;
        Ok(size.saturating_sub(size::in_use(p).map_err(io_error)?))
    }

    async fn size(&self) -> Result<Option<u32>> {
        size::read(&self.paths.size()).map_err(io_error)
    }

    async fn set_size(&self, permits: u32) -> Result<Option<u32>> {
        let (paths, sync, within) = (
            self.paths.clone(),
            self.inner.sync,
            self.inner.command_timeout,
        );
        tokio::task::spawn_blocking(move || size::set(&paths, permits, sync, within))
            .await
            .map_err(|e| Error::new(ErrorKind::Backend, format!("set_permits: {e}")))?
            .map_err(io_error)
    }
}

pub(super) fn inspect(p: &LockPaths) -> std::io::Result<LockInfo> {
    let mut holders: Vec<crate::HolderInfo> = Vec::new();
    for i in p.slots_present() {
        if !is_held(&p.slot(i), LockMode::Exclusive)? {
            continue;
        }
        let info = Record::read(&p.slot_holder(i)).map_or_else(
            || crate::HolderInfo::new(format!("unknown holder of slot {i}"), HoldMode::Permits(1)),
            |r| r.info(),
        );
        if !holders.iter().any(|h| h.owner == info.owner) {
            holders.push(info);
        }
    }
    Ok(LockInfo::new(holders, Vec::new()))
}
