//! The `file://DIR` backend: cross-process locks on one host with no server.
//!
//! Each lock is a file in `DIR` locked with the OS's advisory file locks (`flock` on Unix, through
//! `std::fs::File::try_lock`). A process that dies has its files closed by the OS, which releases
//! its locks at once; nothing needs to expire.
//!
//! | feature | how |
//! | --- | --- |
//! | mutex | an exclusive lock on `mutex.<name>.lock` |
//! | RW lock | shared / exclusive locks on `rw.<name>.lock`; a writer first takes `rw.<name>.gate`, which keeps new readers out while it waits (writers are not starved) and makes downgrade atomic |
//! | semaphore | `N` slot files `sem.<name>.slot.<i>.lock`; a permit is an exclusive lock on one slot |
//! | leader election | an exclusive lock on `elect.<name>.lock` held by the leader, whose holder record `elect.<name>.holder` carries its value and term (its token); observers look every 50 ms (an OS lock freed by a dead process sends no event) |
//! | fencing tokens | a counter file per lock, read-incremented-written under an exclusive lock on it and synced (`fdatasync`), strictly increasing across processes and restarts |
//! | watchdog leases | nothing to renew: the lock lives exactly as long as its holder's process (or guard) |
//! | fixed leases | a timer in the holder's process releases the OS lock at the deadline and marks the guard Lost. A holder process that is frozen (SIGSTOP, a debugger) keeps its lock past the deadline |
//! | fairness | roughly first come, first served, not strict FIFO, so `fair(true)` answers `Unsupported`: waiters register on `<lock>.waiting`, a newcomer finding waiters queues behind them (see below) |
//! | `prefix` | the locks live in the subdirectory `DIR/<prefix>` |
//! | `force_unlock` | unlinks the lock file; new acquirers lock a fresh file, and the old holder sees within 100 ms that the path no longer names its file and turns Lost. The old holder's OS lock lingers on the unlinked file, harming nobody |
//! | `is_locked`, `available`, `inspect` | try-lock probes (they hold a free lock for an instant) plus the holder sidecar files (owner, pid, token, lease deadline) |
//!
//! Waiting is polling, so no thread is ever blocked on a lock. OS file locks keep no queue, so a
//! holder that let go and asked again would take the lock back before the waiters' next poll
//! (one of four contending clients used to take every acquisition). Instead each waiter holds a
//! shared lock on the lock's `waiting` file while it waits; a newcomer that finds it held (one
//! exclusive probe) does not try at once but first sits out 3 ms, and every waiter then tries
//! every 2 ms (jittered), so the lock goes to one of those that were there first. A waiter costs
//! about 500 tries a second.
//!
//! # Cancel safety
//! A dropped acquire leaves nothing behind: the files it locked are owned by the future and
//! closed with it. Only the token counter is updated on a blocking thread (it takes the counter
//! file's own lock and syncs); if the acquire is dropped meanwhile, that update finishes and
//! leaves a gap in the token sequence, which fencing allows.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lockkit_core::Result<()> {
//! use lockkit_core::LockConfig;
//! let dir = std::env::temp_dir().join(format!("lockkit-doc-{}", std::process::id()));
//! let cfg = LockConfig::new(format!("file://{}", dir.display()));
//! let locks = lockkit_core::file::connect(&cfg).await?;
//! let guard = locks.mutex("reports/nightly")?.lock().await?;
//! println!("token {}", guard.token()); // survives restarts: it comes from a file
//! guard.release().await?;
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(()) }
//! ```
//!
//! URL: `file:///var/lock/myapp` (the directory is created if missing). Option `sync=false`
//! skips the `fdatasync` of the token counter (faster; tokens may go back after a power loss).
//! `command_timeout` (5 s) bounds the wait for a token counter that another process is drawing
//! from and that stays unchanged (one stopped mid-draw keeps it locked: the acquire fails with
//! `Timeout` then; draws that go on only make it wait), and `set_permits`' wait for acquirers
//! admitting themselves against the size.
//!
//! Files are never deleted (except by `force_unlock`): the token counter must outlive every
//! holder, or tokens would start again from 1. A directory holds about three small files per
//! lock name.
//!
//! Caveats: OS file locks are advisory, and unreliable on some network file systems; keep the
//! directory on a local file system. Lock names map to file names injectively, but a
//! case-insensitive file system folds names that differ only in case (a multi-lock, which
//! probes the directory, takes them as one lock). A semaphore's size is one more file,
//! `sem.<name>.size`, kept with the token counter.

mod election;
mod held;
mod inner;
mod mutex;
mod oslock;
mod paths;
mod rwlock;
mod semaphore;
mod sidecar;
mod size;
mod token;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend_info::{BackendInfo, SchemeInfo};
use crate::capabilities::{Capabilities, Support};
use crate::error::{Error, ErrorKind, Result};
use crate::inspect::{LockEntry, LockInfo, Primitive};
use crate::kind::BackendKind;
use crate::options::DEFAULT_LEASE;
use crate::settings::{Settings, DEFAULT_COMMAND_TIMEOUT};
use crate::spi::{Backend, RawElection, RawMutex, RawRwLock, RawSemaphore, Reaper};
use crate::{LockConfig, Locks};
use inner::Inner;
use oslock::io_error;

crate::option_keys! {
    /// The `file://` backend's own options.
    pub enum FileKey {
        /// `sync`: `fdatasync` the token counter on every acquire (default true).
        Sync = "sync",
    }
}

/// The lock-file backend's descriptor: `file://`, always compiled in.
pub static INFO: BackendInfo = BackendInfo {
    kind: BackendKind::FILE,
    schemes: &[SchemeInfo {
        name: "file",
        aliases: &[],
        default_port: None,
        tls: false,
    }],
    feature: None,
    connect: |cfg| Box::pin(connect(cfg)),
};

/// Opens the lock directory named by `cfg`'s `file://` URL, creating it if missing. With an
/// explicit `prefix`, the locks live in the subdirectory of that name. `lease` sets the default
/// lease; `command_timeout` bounds the wait for a token counter that another process is
/// drawing from (see [`FileBackend::with_command_timeout`]); `connect_timeout` is accepted and
/// has nothing to bound.
pub async fn connect(cfg: &LockConfig) -> Result<Locks> {
    let settings = Settings::<FileKey>::parse(cfg, &INFO)?;
    settings.refuse_credentials("file")?;
    let sync = settings.flag(FileKey::Sync)?.unwrap_or(true);
    let mut dir = PathBuf::from(&settings.url().path);
    if let Some(p) = settings.explicit_prefix() {
        if p.split('/').any(|seg| seg == "..") {
            return Err(Error::config(format!(
                "prefix {p:?} may not leave the lock directory"
            )));
        }
        dir.push(p.trim_start_matches('/'));
    }
    let backend = FileBackend::open(&dir)?
        .with_sync(sync)
        .with_lease(settings.lease())
        .with_command_timeout(settings.command_timeout());
    Ok(Locks::new(backend))
}

/// A backend handle's id, the stem of its owner ids (which name readers' and leaders' record
/// files): the process, the time, and a count of the handles this process made, so that two
/// handles opened in the same clock tick, or one rebuilt from another, never share one.
fn fresh_id() -> String {
    static HANDLES: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = HANDLES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("p{}-{:x}-{n}", std::process::id(), nanos & 0xffff_ffff)
}

/// The `file://` backend over one lock directory. Every acquire, even through one handle in one
/// process, contends with every other.
#[derive(Debug, Clone)]
pub struct FileBackend {
    inner: Arc<Inner>,
}

impl FileBackend {
    /// Uses `dir` as the lock directory, creating it if missing.
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::new(
                ErrorKind::Config,
                format!("cannot create lock directory {}: {e}", dir.display()),
            )
            .with_source(e)
        })?;
        let id = fresh_id();
        Ok(FileBackend {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                sync: true,
                lease: DEFAULT_LEASE,
                command_timeout: DEFAULT_COMMAND_TIMEOUT,
                reaper: Reaper::default(),
                folds_case: paths::folds_case(dir, &id),
                id,
                seq: AtomicU64::new(0),
                closed: tokio::sync::watch::Sender::new(false),
                draws: Arc::new(tokio::sync::watch::Sender::new(0)),
            }),
        })
    }

    fn rebuild(self, f: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Inner {
            dir: self.inner.dir.clone(),
            sync: self.inner.sync,
            lease: self.inner.lease,
            command_timeout: self.inner.command_timeout,
            reaper: self.inner.reaper.clone(),
            id: fresh_id(),
            folds_case: self.inner.folds_case,
            seq: AtomicU64::new(0),
            closed: tokio::sync::watch::Sender::new(false),
            draws: Arc::new(tokio::sync::watch::Sender::new(0)),
        };
        f(&mut inner);
        FileBackend {
            inner: Arc::new(inner),
        }
    }

    /// Whether token counters are synced to disk on every acquire (default true).
    pub fn with_sync(self, sync: bool) -> Self {
        self.rebuild(|i| i.sync = sync)
    }

    /// The default lease (30 s unless set).
    pub fn with_lease(self, lease: Duration) -> Self {
        self.rebuild(|i| i.lease = lease)
    }

    /// How long an acquire waits for a token counter that another process is drawing from
    /// while the counter does not change (5 s unless set): a process stopped mid-draw keeps it
    /// locked. Past it, the acquire fails with [`ErrorKind::Timeout`] and lets go of what it
    /// took. It also bounds `set_permits`' wait for acquirers admitting themselves.
    pub fn with_command_timeout(self, within: Duration) -> Self {
        self.rebuild(|i| i.command_timeout = within)
    }

    /// The lock directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }
}

#[async_trait]
impl Backend for FileBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::FILE
    }

    fn capabilities(&self) -> Capabilities {
        // OS file locks keep no FIFO order: no fair mode.
        let basic = Support::all().fair(false);
        Capabilities::new(basic)
            .with_rwlock(basic.remaining_lease(false))
            .with_semaphore(basic.remaining_lease(false))
            .with_election(basic.remaining_lease(false))
            .list(true)
            .semaphore_size(true)
    }

    fn default_lease(&self) -> Duration {
        self.inner.lease
    }

    fn reaper(&self) -> Reaper {
        self.inner.reaper.clone()
    }

    fn mutex(&self, name: &str) -> Result<Box<dyn RawMutex>> {
        Ok(Box::new(mutex::FileMutex {
            inner: self.inner.clone(),
            name: name.into(),
            paths: self.inner.paths("mutex", name),
        }))
    }

    /// The files' common prefix: names that differ only in case are one lock where the
    /// directory folds case.
    fn resource(&self, primitive: Primitive, name: &str) -> String {
        let kind = match primitive {
            Primitive::Mutex => "mutex",
            Primitive::RwLock => "rw",
            Primitive::Semaphore => "sem",
            Primitive::Election => "elect",
        };
        self.inner.paths(kind, name).resource(self.inner.folds_case)
    }

    fn rwlock(&self, name: &str) -> Result<Box<dyn RawRwLock>> {
        Ok(Box::new(rwlock::FileRwLock {
            inner: self.inner.clone(),
            name: name.into(),
            paths: self.inner.paths("rw", name),
        }))
    }

    fn semaphore(&self, name: &str, permits: Option<u32>) -> Result<Box<dyn RawSemaphore>> {
        Ok(Box::new(semaphore::FileSemaphore {
            inner: self.inner.clone(),
            name: name.into(),
            paths: self.inner.paths("sem", name),
            permits,
        }))
    }

    fn election(&self, name: &str) -> Result<Box<dyn RawElection>> {
        Ok(Box::new(election::FileElection {
            inner: self.inner.clone(),
            name: name.into(),
            paths: self.inner.paths("elect", name),
        }))
    }

    async fn close(&self) -> Result<()> {
        // Guards were marked Lost by the core; their OS locks go with their files. An acquire
        // cancelled while its token was drawn lets its files go when the draw is done.
        self.inner.closed.send_replace(true);
        self.inner.draws_done(Duration::from_secs(5)).await;
        Ok(())
    }

    /// Names come from the lock files' names; a name too long for a file name (kept as a
    /// truncated stem and a hash) cannot be told back and is not listed.
    async fn list(&self, prefix: &str) -> Result<Vec<LockEntry>> {
        let candidates = paths::named_in(&self.inner.dir).map_err(io_error)?;
        let mut found = Vec::new();
        for entry in candidates {
            if !entry.name.starts_with(prefix) {
                continue;
            }
            let info = self.inspect(&entry.name, entry.primitive).await?;
            if !info.holders.is_empty() || !info.waiters.is_empty() {
                found.push(entry);
            }
        }
        Ok(found)
    }

    async fn inspect(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        match primitive {
            Primitive::Mutex => mutex::inspect(&self.inner.paths("mutex", name)),
            Primitive::RwLock => rwlock::inspect(&self.inner.paths("rw", name)),
            Primitive::Semaphore => semaphore::inspect(&self.inner.paths("sem", name)),
            Primitive::Election => mutex::inspect(&self.inner.paths("elect", name)),
        }
        .map_err(io_error)
    }
}
