//! What every `file://` handle shares: the lock directory and its settings, owner ids, and the
//! last step of every acquire (drawing the token and starting the hold).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::held::{self, FileHeld, Parts};
use super::oslock::{io_error, poll, try_lock_path, LockMode, Locked};
use super::paths::LockPaths;
use super::token;
use crate::error::{Error, ErrorKind, Result};
use crate::inspect::HoldMode;
use crate::options::Lease;
use crate::spi::{GuardParts, Reaper, Request};

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) dir: PathBuf,
    pub(super) sync: bool,
    pub(super) lease: Duration,
    /// The longest wait for a token counter's lock.
    pub(super) command_timeout: Duration,
    pub(super) reaper: Reaper,
    pub(super) id: String,
    /// Whether the directory's file system folds case: names that differ only in case are one
    /// file there (macOS and Windows by default).
    pub(super) folds_case: bool,
    pub(super) seq: AtomicU64,
    /// Turns `true` when the handle is closed (election observers end then).
    pub(super) closed: tokio::sync::watch::Sender<bool>,
    /// Tokens being drawn, each holding its acquire's files (see [`Inner::finish`]).
    pub(super) draws: Arc<tokio::sync::watch::Sender<usize>>,
}

/// One token draw in progress; dropped after the files it holds.
struct Drawing(Arc<tokio::sync::watch::Sender<usize>>);

impl Drawing {
    fn start(draws: &Arc<tokio::sync::watch::Sender<usize>>) -> Drawing {
        draws.send_modify(|n| *n += 1);
        Drawing(draws.clone())
    }
}

impl Drop for Drawing {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
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

    /// Waits (at most `limit`) until no token is being drawn: the files of acquires dropped
    /// mid-draw are let go then.
    pub(super) async fn draws_done(&self, limit: Duration) {
        let mut draws = self.draws.subscribe();
        let _ = tokio::time::timeout(limit, draws.wait_for(|n| *n == 0)).await;
    }

    /// Waits as `req` says for the exclusive OS lock of `paths` (a mutex's, or an election's
    /// leader lock): the locked file, `None` when the wait budget ran out.
    pub(super) async fn lock_exclusive(
        req: &Request,
        paths: &LockPaths,
    ) -> Result<Option<Vec<Locked>>> {
        let path = paths.lock();
        poll(req, &paths.waiting(), || {
            Ok(try_lock_path(&path, LockMode::Exclusive)?.map(|l| vec![l]))
        })
        .await
    }

    /// Draws the fencing token and builds the guard parts. The OS locks are held already, and
    /// the token is drawn on a blocking thread that holds them until it is done: if this future
    /// is dropped meanwhile, they are released only after the draw, so no later holder's token
    /// is ever below one drawn after it took the lock (an election's term is the last drawn).
    /// `close` waits for such draws ([`Inner::draws_done`]).
    pub(super) async fn finish(&self, counter: PathBuf, a: Acquired) -> Result<GuardParts> {
        let (sync, within) = (self.sync, self.command_timeout);
        let files = a.files;
        // Counted until the files are let go, by this future or (dropped) by the task's output.
        let drawing = Drawing::start(&self.draws);
        let (files, token, drawing) = tokio::task::spawn_blocking(move || {
            let token = token::next_token(&counter, sync, within);
            (files, token, drawing)
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Backend, format!("token task failed: {e}")))?;
        drop(drawing);
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
