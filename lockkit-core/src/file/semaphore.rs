//! Semaphores: `N` slot files, a permit is an exclusive OS lock on one slot.

use std::sync::Arc;

use async_trait::async_trait;

use super::inner::{Acquired, Inner};
use super::oslock::{io_error, is_held, poll, try_lock_path, LockMode};
use super::paths::LockPaths;
use super::sidecar::Record;
use crate::error::Result;
use crate::inspect::{HoldMode, LockInfo};
use crate::spi::{GuardParts, RawSemaphore, Request};

#[derive(Debug)]
pub(super) struct FileSemaphore {
    pub(super) inner: Arc<Inner>,
    pub(super) name: Arc<str>,
    pub(super) paths: LockPaths,
    pub(super) permits: u32,
}

#[async_trait]
impl RawSemaphore for FileSemaphore {
    async fn acquire(&self, n: u32, req: &Request) -> Result<Option<GuardParts>> {
        let paths = &self.paths;
        let got = poll(req, &paths.waiting(), || {
            let mut got = Vec::new();
            for i in 0..self.permits {
                if got.len() == n as usize {
                    break;
                }
                if let Some(l) = try_lock_path(&paths.slot(i), LockMode::Exclusive)? {
                    got.push((i, l));
                }
            }
            // All or nothing: a partial set is dropped, and so released, here.
            Ok((got.len() == n as usize).then_some(got))
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
        let mut free = 0;
        for i in 0..self.permits {
            if !is_held(&self.paths.slot(i), LockMode::Exclusive).map_err(io_error)? {
                free += 1;
            }
        }
        Ok(free)
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
