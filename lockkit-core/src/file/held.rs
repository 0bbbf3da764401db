//! One held ownership of lock files, and the task that watches it.
//!
//! The watcher turns the guard Lost when a force-unlock unlinked the lock file under us. A fixed
//! lease's end is this process's to enforce (only it can let go of its OS locks): the core
//! releases the ownership at the guard's deadline.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::oslock::Locked;
use super::sidecar::{now_ms, Record};
use crate::clock::LeaseClock;
use crate::error::{Error, Result};
use crate::inspect::HoldMode;
use crate::options::Lease;
use crate::reason::LostReason;
use crate::spi::{GuardParts, Held, StateCell};

/// How often a holder checks that its lock file was not force-unlocked.
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(100);

/// The shared body of one ownership.
#[derive(Debug)]
pub(crate) struct Ownership {
    pub(crate) name: Arc<str>,
    files: Mutex<Option<Vec<Locked>>>,
    pub(crate) state: StateCell,
    lease: Lease,
    /// Whether a force-unlock can take the files away (checked by inode).
    check_identity: bool,
    /// Sidecars: where each was written, and whether to delete it on release.
    sidecars: Vec<PathBuf>,
    remove_sidecars: bool,
    record: Mutex<Record>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a fresh ownership is made of.
pub(crate) struct Parts {
    pub(crate) name: Arc<str>,
    pub(crate) files: Vec<Locked>,
    pub(crate) lease: Lease,
    pub(crate) check_identity: bool,
    pub(crate) sidecars: Vec<PathBuf>,
    pub(crate) remove_sidecars: bool,
    pub(crate) record: Record,
    /// The clock of the ownership this one continues (a downgrade), else a fresh one.
    pub(crate) clock: Option<Arc<LeaseClock>>,
    /// How a write ownership turns into a read one (RW locks only).
    pub(crate) downgrade: Option<Downgrade>,
}

/// Turns a write ownership into a read ownership.
pub(crate) type Downgrade = fn(&FileHeld) -> Result<GuardParts>;

impl Ownership {
    fn take(&self) -> Option<Vec<Locked>> {
        lock(&self.files).take()
    }

    fn still_ours(files: &[Locked]) -> bool {
        files.iter().all(Locked::is_current)
    }

    /// Gives the OS locks up and marks the guard Lost (it already reads Lost when its lease
    /// ran out: its clock's deadline comes first).
    fn lose(&self, files: Option<Vec<Locked>>, reason: LostReason) {
        self.state.mark_lost(reason);
        // While the files are still ours, so no next holder's sidecar can be there yet.
        self.drop_sidecars();
        drop(files);
    }

    /// Removes the sidecars that are to go on release, each only while it is still ours (a
    /// force-unlock may have let a next holder write its own at the same path).
    fn drop_sidecars(&self) {
        if self.remove_sidecars {
            let owner = lock(&self.record).owner.clone();
            for p in &self.sidecars {
                if Record::read(p).is_none_or(|r| r.owner == owner) {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
    }

    /// Releases now; `LockLost` when the lease ran out or a force-unlock took the lock.
    pub(crate) fn release_now(&self) -> Result<()> {
        let Some(files) = self.take() else {
            return Err(Error::lost(&self.name));
        };
        let ours = !self.check_identity || Self::still_ours(&files);
        self.drop_sidecars();
        for f in files {
            f.unlock();
        }
        if ours {
            Ok(())
        } else {
            Err(Error::lost(&self.name))
        }
    }

    /// One look: `Some(next look)` while held, `None` once gone.
    fn watch_step(&self) -> Option<Instant> {
        let now = Instant::now();
        // Decide and take under the files lock, so an `extend` cannot slip in between.
        let gone = {
            let mut files = lock(&self.files);
            let held = files.as_ref()?;
            if Self::still_ours(held) {
                return Some(now + WATCH_EVERY);
            }
            files.take()
        };
        self.lose(gone, LostReason::Deleted);
        None
    }
}

/// The backend side of a guard.
#[derive(Debug)]
pub(crate) struct FileHeld {
    own: Arc<Ownership>,
    watcher: Option<AbortHandle>,
    downgrade: Option<Downgrade>,
}

impl Drop for FileHeld {
    fn drop(&mut self) {
        self.stop_watcher();
    }
}

impl FileHeld {
    /// Builds the ownership, writes its sidecars and starts its watcher when it needs one.
    pub(crate) fn start(p: Parts) -> FileHeld {
        let now = Instant::now();
        let clock = p.clock.unwrap_or_else(|| match p.lease {
            Lease::Fixed(d) => LeaseClock::starting(now, d),
            // A watchdog lease lives exactly as long as the holder process: no deadline.
            Lease::Watchdog(_) => LeaseClock::new(LostReason::LeaseExpired),
        });
        for s in &p.sidecars {
            let _ = p.record.write(s);
        }
        let own = Arc::new(Ownership {
            name: p.name,
            files: Mutex::new(Some(p.files)),
            state: StateCell::new(clock),
            lease: p.lease,
            check_identity: p.check_identity,
            sidecars: p.sidecars,
            remove_sidecars: p.remove_sidecars,
            record: Mutex::new(p.record),
        });
        let watcher = own
            .check_identity
            .then(|| tokio::spawn(watch(Arc::downgrade(&own))).abort_handle());
        FileHeld {
            own,
            watcher,
            downgrade: p.downgrade,
        }
    }

    fn stop_watcher(&self) {
        if let Some(w) = &self.watcher {
            w.abort();
        }
    }

    /// The guard parts for this ownership.
    pub(crate) fn into_parts(self, token: u64) -> GuardParts {
        let own = self.own.clone();
        GuardParts::new(
            crate::FencingToken(token),
            own.lease,
            own.state.clone(),
            Box::new(self),
        )
    }

    /// Takes the held files away for a downgrade; the old ownership is then finished.
    pub(crate) fn take_for_downgrade(&self) -> Result<(Vec<Locked>, Record)> {
        self.stop_watcher();
        let files = self.own.take().ok_or_else(|| Error::lost(&self.own.name))?;
        if self.own.check_identity && !Ownership::still_ours(&files) {
            return Err(Error::lost(&self.own.name));
        }
        Ok((files, lock(&self.own.record).clone()))
    }

    pub(crate) fn name(&self) -> Arc<str> {
        self.own.name.clone()
    }

    pub(crate) fn lease(&self) -> Lease {
        self.own.lease
    }

    pub(crate) fn clock(&self) -> Arc<LeaseClock> {
        self.own.state.clock().clone()
    }
}

async fn watch(own: Weak<Ownership>) {
    loop {
        let next = match own.upgrade() {
            Some(o) => o.watch_step(),
            None => return,
        };
        match next {
            Some(at) => tokio::time::sleep_until(at).await,
            None => return,
        }
    }
}

#[async_trait]
impl Held for FileHeld {
    async fn release(&self) -> Result<()> {
        self.stop_watcher();
        self.own.release_now()
    }

    async fn extend(&self, lease: Duration) -> Result<()> {
        self.rewrite(|r| r.deadline_ms = Some(now_ms() + lease.as_millis() as u64))
    }

    /// Elections: the leader's value is in its holder record.
    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        self.rewrite(|r| r.value = Some(value.to_vec()))
    }

    async fn downgrade(&self) -> Result<GuardParts> {
        match self.downgrade {
            Some(downgrade) => downgrade(self),
            None => Err(Error::unsupported("only a write lock can be downgraded")),
        }
    }
}

impl FileHeld {
    /// Changes the holder record with `change` and writes it again, only while this ownership
    /// still holds (else `LockLost`). The files stay locked meanwhile, so the write lands before
    /// any release and the next holder's record.
    fn rewrite(&self, change: impl FnOnce(&mut Record)) -> Result<()> {
        let mut files = lock(&self.own.files);
        let expired = self.own.state.clock().has_passed(Instant::now());
        match files.as_ref() {
            Some(f) if !expired && (!self.own.check_identity || Ownership::still_ours(f)) => {}
            Some(_) => {
                // Ran out (or was taken) and the watcher has not noticed yet: never revive it.
                let gone = files.take();
                drop(files);
                self.own.lose(gone, LostReason::LeaseExpired);
                return Err(Error::lost(&self.own.name));
            }
            None => return Err(Error::lost(&self.own.name)),
        }
        let mut record = lock(&self.own.record);
        let before = record.clone();
        change(&mut record);
        for s in &self.own.sidecars {
            if let Err(e) = record.write(s) {
                // Left as it was, here and (the write being whole or nothing) on disk.
                *record = before;
                return Err(super::oslock::io_error(e));
            }
        }
        drop(files);
        Ok(())
    }
}

/// The record of a new holder.
pub(crate) fn record(owner: String, token: u64, mode: HoldMode, lease: Lease) -> Record {
    Record {
        owner,
        pid: std::process::id(),
        token,
        mode,
        deadline_ms: match lease {
            Lease::Fixed(d) => Some(now_ms() + d.as_millis() as u64),
            _ => None,
        },
        watchdog_ms: match lease {
            Lease::Watchdog(d) => Some(d.as_millis() as u64),
            _ => None,
        },
        value: None,
        pidns: super::sidecar::pid_namespace(),
    }
}
