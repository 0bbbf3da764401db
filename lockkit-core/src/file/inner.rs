//! What every `file://` handle shares: the lock directory and its settings, owner ids, and the
//! last step of every acquire (drawing the token and starting the hold).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::held::{self, FileHeld, Parts};
use super::oslock::{io_error, Locked};
use super::paths::LockPaths;
use super::token;
use crate::error::{Error, ErrorKind, Result};
use crate::inspect::HoldMode;
use crate::options::Lease;
use crate::spi::{GuardParts, Reaper};

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) dir: PathBuf,
    pub(super) sync: bool,
    pub(super) lease: Duration,
    pub(super) reaper: Reaper,
    pub(super) id: String,
    pub(super) seq: AtomicU64,
    /// Turns `true` when the handle is closed (election observers end then).
    pub(super) closed: tokio::sync::watch::Sender<bool>,
}

/// What an acquire hands to [`Inner::finish`].
pub(super) struct Acquired {
    pub(super) name: Arc<str>,
    pub(super) files: Vec<Locked>,
    pub(super) lease: Lease,
    pub(super) mode: HoldMode,
    pub(super) check_identity: bool,
    pub(super) sidecars: Vec<PathBuf>,
    pub(super) remove_sidecars: bool,
    pub(super) owner: String,
    pub(super) downgrade: Option<held::Downgrade>,
    /// An elected leader's value, for its holder record.
    pub(super) value: Option<Vec<u8>>,
}

impl Inner {
    pub(super) fn owner(&self) -> String {
        format!("{}-{}", self.id, self.seq.fetch_add(1, Ordering::Relaxed))
    }

    pub(super) fn paths(&self, kind: &str, name: &str) -> LockPaths {
        LockPaths::new(&self.dir, kind, name)
    }

    /// Draws the fencing token and builds the guard parts. The OS locks are held already, and
    /// the token is drawn on a blocking thread that holds them until it is done: if this future
    /// is dropped meanwhile, they are released only after the draw, so no later holder's token
    /// is ever below one drawn after it took the lock (an election's term is the last drawn).
    pub(super) async fn finish(&self, counter: PathBuf, a: Acquired) -> Result<GuardParts> {
        let sync = self.sync;
        let files = a.files;
        let (files, token) = tokio::task::spawn_blocking(move || {
            let token = token::next_token(&counter, sync);
            (files, token)
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Backend, format!("token task failed: {e}")))?;
        let token = token.map_err(io_error)?;
        let mut record = held::record(a.owner, token, a.mode, a.lease);
        record.value = a.value;
        let held = FileHeld::start(Parts {
            name: a.name,
            files,
            lease: a.lease,
            check_identity: a.check_identity,
            sidecars: a.sidecars,
            remove_sidecars: a.remove_sidecars,
            record,
            clock: None,
            downgrade: a.downgrade,
        });
        Ok(held.into_parts(token))
    }

    /// Finishes an exclusive hold of a mutex, RW lock or election (with the leader's `value`):
    /// one holder sidecar, kept on release except an election's.
    pub(super) async fn finish_exclusive(
        &self,
        name: &Arc<str>,
        paths: &LockPaths,
        files: Vec<Locked>,
        lease: Lease,
        downgrade: Option<held::Downgrade>,
        value: Option<Vec<u8>>,
    ) -> Result<GuardParts> {
        let acquired = Acquired {
            name: name.clone(),
            files,
            lease,
            mode: HoldMode::Exclusive,
            check_identity: true,
            sidecars: vec![paths.holder()],
            // A leader's record names the leader: it goes before the lock does.
            remove_sidecars: value.is_some(),
            owner: self.owner(),
            downgrade,
            value,
        };
        self.finish(paths.counter(), acquired).await
    }
}
