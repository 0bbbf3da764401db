//! RW locks: shared / exclusive OS locks on one file, plus a writer gate.
//!
//! A writer takes the gate (exclusive) and then the lock file (exclusive), and holds both while
//! it writes. A reader passes the gate (shared, for an instant) and then takes the lock file
//! shared. So a writer waiting for readers to leave holds the gate and keeps new readers out,
//! and a downgrade (converting the write lock to shared) happens while the gate still keeps
//! every other writer away, so no writer can come in between.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;

use super::held::{FileHeld, Parts};
use super::inner::{Acquired, Inner};
use super::oslock::{io_error, is_held, poll, remove, try_lock_path, LockMode, Locked};
use super::paths::LockPaths;
use super::sidecar::Record;
use crate::error::{Error, ErrorKind, Result};
use crate::inspect::{HoldMode, LockInfo, WaiterInfo};
use crate::spi::{GuardParts, RawRwLock, Request};

#[derive(Debug)]
pub(super) struct FileRwLock {
    pub(super) inner: Arc<Inner>,
    pub(super) name: Arc<str>,
    pub(super) paths: LockPaths,
}

#[async_trait]
impl RawRwLock for FileRwLock {
    async fn read(&self, req: &Request) -> Result<Option<GuardParts>> {
        let (gate, main) = (self.paths.gate(), self.paths.lock());
        let files = poll(req, &self.paths.waiting(), || {
            let Some(pass) = try_lock_path(&gate, LockMode::Shared)? else {
                return Ok(None);
            };
            let got = try_lock_path(&main, LockMode::Shared)?;
            drop(pass);
            Ok(got.map(|l| vec![l]))
        })
        .await?;
        let Some(files) = files else {
            return Ok(None);
        };
        let owner = self.inner.owner();
        let acquired = Acquired {
            name: self.name.clone(),
            files,
            lease: req.lease(),
            mode: HoldMode::Shared,
            check_identity: true,
            sidecars: vec![self.paths.reader(&owner)],
            remove_sidecars: true,
            owner,
            downgrade: None,
            value: None,
        };
        let parts = self.inner.finish(self.paths.counter(), acquired).await?;
        Ok(Some(parts))
    }

    async fn write(&self, req: &Request) -> Result<Option<GuardParts>> {
        let (gate, main) = (self.paths.gate(), self.paths.lock());
        let mut gate_held: Option<Locked> = None;
        let files = poll(req, &self.paths.waiting(), move || {
            if gate_held.as_ref().is_some_and(|g| !g.is_current()) {
                gate_held = None;
            }
            if gate_held.is_none() {
                gate_held = try_lock_path(&gate, LockMode::Exclusive)?;
                if gate_held.is_none() {
                    return Ok(None);
                }
            }
            match try_lock_path(&main, LockMode::Exclusive)? {
                Some(m) => Ok(gate_held.take().map(|g| vec![g, m])),
                None => Ok(None),
            }
        })
        .await?;
        let Some(files) = files else {
            return Ok(None);
        };
        let parts = self
            .inner
            .finish_exclusive(
                &self.name,
                &self.paths,
                files,
                req.lease(),
                Some(downgrade),
                None,
            )
            .await?;
        Ok(Some(parts))
    }

    async fn is_locked(&self) -> Result<bool> {
        is_held(&self.paths.lock(), LockMode::Exclusive).map_err(io_error)
    }

    async fn force_unlock(&self) -> Result<bool> {
        let main = self.paths.lock();
        if !is_held(&main, LockMode::Exclusive).map_err(io_error)? {
            return Ok(false);
        }
        remove(&main).map_err(io_error)?;
        remove(&self.paths.gate()).map_err(io_error)?;
        Ok(true)
    }
}

/// Turns a write ownership (gate + lock file, both exclusive) into a read ownership.
fn downgrade(held: &FileHeld) -> Result<GuardParts> {
    let (files, record) = held.take_for_downgrade()?;
    let mut files = files.into_iter();
    let (Some(gate), Some(main)) = (files.next(), files.next()) else {
        return Err(Error::unsupported("only a write lock can be downgraded"));
    };
    // The gate keeps every other writer out, so converting the OS lock in place is safe even
    // where the conversion is not atomic.
    main.file.try_lock_shared().map_err(|e| {
        Error::new(
            ErrorKind::Backend,
            format!("cannot downgrade the OS lock: {e}"),
        )
    })?;
    gate.unlock();
    let reader_sidecar = reader_path_for(&main.path, &record.owner);
    // The read ownership keeps the write ownership's lease and deadline.
    let lease = match (held.lease(), held.clock().remaining()) {
        (crate::Lease::Fixed(_), Some(left)) => crate::Lease::Fixed(left),
        (lease, _) => lease,
    };
    let record = Record {
        mode: HoldMode::Shared,
        ..record
    };
    let token = record.token;
    let held = FileHeld::start(Parts {
        name: held.name(),
        files: vec![main],
        lease,
        check_identity: true,
        sidecars: vec![reader_sidecar],
        remove_sidecars: true,
        record,
        clock: Some(held.clock()),
        downgrade: None,
    });
    Ok(held.into_parts(token))
}

fn reader_path_for(lock_file: &std::path::Path, owner: &str) -> PathBuf {
    let s = lock_file.to_string_lossy();
    let base = s.strip_suffix(".lock").unwrap_or(&s);
    PathBuf::from(format!("{base}.reader.{owner}"))
}

pub(super) fn inspect(p: &LockPaths) -> std::io::Result<LockInfo> {
    let main = p.lock();
    if !is_held(&main, LockMode::Exclusive)? {
        return Ok(LockInfo::default());
    }
    if is_held(&main, LockMode::Shared)? {
        return Ok(LockInfo::new(
            vec![Record::holder_info(&p.holder())],
            Vec::new(),
        ));
    }
    let holders = p
        .readers_present()
        .iter()
        .filter_map(|r| Record::read(r))
        .filter(Record::process_alive)
        .map(|r| r.info())
        .collect();
    let waiters = if is_held(&p.gate(), LockMode::Shared)? {
        vec![waiting_writer()]
    } else {
        Vec::new()
    };
    Ok(LockInfo::new(holders, waiters))
}

fn waiting_writer() -> WaiterInfo {
    WaiterInfo::new("a writer (file locks keep no queue)", HoldMode::Exclusive)
}
