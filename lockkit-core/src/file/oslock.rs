//! OS file locks, polled without blocking the runtime.
//!
//! `flock`-style locks belong to an open file description, so every acquire opens its own
//! `File`: two acquires in one process exclude each other exactly like two processes do. A
//! holder that dies has its descriptors closed by the OS, which releases its locks.
//!
//! `force_unlock` cannot take an OS lock away from another process, so it unlinks the lock file
//! instead: new acquirers create a fresh file and lock that, and the old holder notices that the
//! path no longer names the file it locked (see [`Locked::is_current`]) and turns Lost. An
//! acquirer checks the same thing right after locking, so it never settles on an unlinked file.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use rand::Rng;

use crate::driver::{drive, Exit, Queue, Standing, Woken};
use crate::error::{Error, ErrorKind, Result};
use crate::spi::Request;

/// Exclusive or shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockMode {
    Exclusive,
    Shared,
}

/// An OS lock held on one file. Dropping it closes the file, which releases the lock.
#[derive(Debug)]
pub(crate) struct Locked {
    pub(crate) path: PathBuf,
    pub(crate) file: File,
}

impl Locked {
    /// Whether the path still names the file we locked (false after a force-unlock).
    pub(crate) fn is_current(&self) -> bool {
        same_file(&self.path, &self.file)
    }

    /// Releases the OS lock now (closing the file would, too).
    pub(crate) fn unlock(self) {
        let _ = self.file.unlock();
    }
}

#[cfg(unix)]
fn same_file(path: &Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(p), Ok(f)) => p.dev() == f.dev() && p.ino() == f.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(path: &Path, _file: &File) -> bool {
    // Open files cannot be unlinked on Windows, so the path keeps naming the locked file.
    path.exists()
}

fn try_lock_file(file: &File, mode: LockMode) -> io::Result<bool> {
    let r = match mode {
        LockMode::Exclusive => file.try_lock(),
        LockMode::Shared => file.try_lock_shared(),
    };
    match r {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

fn open(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
}

/// One non-blocking attempt to lock `path` (created if missing). `Ok(None)` when it is busy.
pub(crate) fn try_lock_path(path: &Path, mode: LockMode) -> io::Result<Option<Locked>> {
    // A force-unlock between our open and our lock leaves us on an unlinked file: try again.
    for _ in 0..16 {
        let file = open(path, true)?;
        if !try_lock_file(&file, mode)? {
            return Ok(None);
        }
        let locked = Locked {
            path: path.to_path_buf(),
            file,
        };
        if locked.is_current() {
            return Ok(Some(locked));
        }
    }
    Ok(None)
}

/// Takes the exclusive lock of `f` (the file at `path`), blocking the thread: polls every
/// millisecond, growing to 4 ms, and gives up with a `TimedOut` error once `within`
/// (`command_timeout`) has passed with no progress. `progressed` tells whether the holders moved
/// on since the last poll (a token counter that changed), which starts the wait over, so only a
/// holder that stopped (a process stopped mid-draw) makes it fail. A `within` too long to add
/// to now waits with no bound.
pub(crate) fn lock_within(
    f: &File,
    path: &Path,
    within: Duration,
    mut progressed: impl FnMut() -> bool,
) -> io::Result<()> {
    let Some(mut until) = std::time::Instant::now().checked_add(within) else {
        return f.lock();
    };
    let mut pause = Duration::from_millis(1);
    loop {
        if try_lock_file(f, LockMode::Exclusive)? {
            return Ok(());
        }
        let now = std::time::Instant::now();
        if progressed() {
            until = now.checked_add(within).unwrap_or(until);
        } else if now >= until {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{} stayed locked, with no progress, for {within:?} (command_timeout): a \
                     process holding it has stopped",
                    path.display()
                ),
            ));
        }
        std::thread::sleep(pause.min(until.saturating_duration_since(now)));
        pause = (pause * 2).min(Duration::from_millis(4));
    }
}

/// Whether someone holds `path` in a mode that conflicts with `mode`, without creating it.
/// The probe holds the lock for an instant when it is free.
pub(crate) fn is_held(path: &Path, mode: LockMode) -> io::Result<bool> {
    let file = match open(path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let free = try_lock_file(&file, mode)?;
    if free {
        let _ = file.unlock();
    }
    Ok(!free)
}

/// Removes `path`, ignoring a file that is already gone.
pub(crate) fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Admin: removes the lock file at `path` if someone holds it exclusively (the holder's
/// watcher sees it gone and turns Lost; the next locker makes a new file). Returns whether it
/// was held.
pub(crate) fn force_remove(path: &Path) -> io::Result<bool> {
    if !is_held(path, LockMode::Exclusive)? {
        return Ok(false);
    }
    remove(path)?;
    Ok(true)
}

/// A newcomer's first pause when others wait: it sits out their next tries.
const NEWCOMER: Duration = Duration::from_millis(3);
/// Every later pause.
const POLL: Duration = Duration::from_millis(2);

/// `step` jittered by up to a fifth either way, so that waiters do not try in step.
fn jittered(step: Duration) -> Duration {
    let fifth = u64::try_from((step / 5).as_nanos()).unwrap_or(0);
    let jitter = rand::thread_rng().gen_range(0..=2 * fifth);
    step - step / 5 + Duration::from_nanos(jitter)
}

/// Repeats `attempt` until it yields a value or `req`'s wait budget runs out, through the
/// acquire driver. `attempt` never blocks; whatever it holds is dropped, and so released, when
/// this future is.
///
/// Every waiter holds a shared lock on `waiting` (the lock's waiting file) while it waits, so a
/// newcomer can tell with one exclusive probe whether anyone waits. A newcomer tries at once only
/// when nobody does (a try that may not wait tries once either way); otherwise it joins the
/// waiters and sits out [`NEWCOMER`] before its first try, while they try every [`POLL`], so the
/// lock goes to one of those that were there first.
/// A holder that releases and acquires again therefore queues behind the others instead of
/// taking the lock back before they wake (which let one of four clients take every acquisition).
pub(crate) async fn poll<T: Send>(
    req: &Request,
    waiting: &Path,
    attempt: impl FnMut() -> io::Result<Option<T>> + Send,
) -> Result<Option<T>> {
    let queue = Polled {
        waiting,
        attempt: Mutex::new(attempt),
    };
    drive(&queue, req).await
}

/// OS locks as a queue: the waiters' file is the queue, a poll is the wait.
struct Polled<'a, F> {
    waiting: &'a Path,
    attempt: Mutex<F>,
}

/// One poller: its registration among the waiters, its next pause, what it took.
struct Poller<T> {
    /// The shared lock on the waiting file (`Some(None)`: waits unregistered).
    joined: Option<Option<File>>,
    step: Duration,
    got: Option<T>,
}

impl<T, F: FnMut() -> io::Result<Option<T>>> Polled<'_, F> {
    fn try_once(&self, poller: &mut Poller<T>) -> Result<Standing> {
        let mut attempt = self.attempt.lock().unwrap_or_else(|e| e.into_inner());
        Ok(match attempt().map_err(io_error)? {
            Some(v) => {
                poller.got = Some(v);
                Standing::Owner
            }
            None => Standing::Waiting,
        })
    }
}

#[async_trait]
impl<T: Send, F: FnMut() -> io::Result<Option<T>> + Send> Queue for Polled<'_, F> {
    type Claim = Poller<T>;
    type Output = T;

    async fn claim(&self, _req: &Request) -> Result<Poller<T>> {
        Ok(Poller {
            joined: None,
            step: NEWCOMER,
            got: None,
        })
    }

    async fn enqueue(&self, poller: &mut Poller<T>, req: &Request) -> Result<Standing> {
        // A try (no wait) tries once, whoever waits.
        if !req.waits() || !is_held(self.waiting, LockMode::Exclusive).map_err(io_error)? {
            let standing = self.try_once(poller)?;
            if standing == Standing::Owner || !req.waits() {
                return Ok(standing);
            }
        }
        poller.joined = Some(join(self.waiting).map_err(io_error)?);
        Ok(Standing::Waiting)
    }

    async fn wait(&self, poller: &mut Poller<T>, req: &Request) -> Result<Woken> {
        let pause = Instant::now() + jittered(poller.step);
        poller.step = POLL;
        tokio::time::sleep_until(req.bound(pause)).await;
        Ok(Woken::Look)
    }

    async fn standing(&self, poller: &mut Poller<T>, _req: &Request) -> Result<Standing> {
        if poller.got.is_some() {
            return Ok(Standing::Owner);
        }
        self.try_once(poller)
    }

    async fn hold(&self, poller: &mut Poller<T>, _req: &Request) -> Result<Option<T>> {
        Ok(poller.got.take())
    }

    async fn leave(&self, poller: &mut Poller<T>, _exit: Exit) -> Result<()> {
        // Closing the waiting file leaves the waiters; a lock taken closes with its file.
        poller.joined = None;
        poller.got = None;
        Ok(())
    }

    fn abandon(&self, poller: Poller<T>) {
        drop(poller);
    }
}

/// Joins the waiters of a lock: a shared lock on its waiting file, held by the returned file.
/// `None` when a newcomer's probe kept the file locked through every try (the waiter then
/// waits unregistered, which only lets newcomers try once before it).
fn join(waiting: &Path) -> io::Result<Option<File>> {
    for _ in 0..8 {
        let file = open(waiting, true)?;
        if try_lock_file(&file, LockMode::Shared)? {
            return Ok(Some(file));
        }
        std::thread::yield_now();
    }
    Ok(None)
}

/// An I/O error of the lock directory as a lockkit error; one that carries a lockkit error
/// ([`refusal`]) is that error.
pub(crate) fn io_error(e: io::Error) -> Error {
    let e = match e.downcast::<Error>() {
        Ok(refused) => return refused,
        Err(e) => e,
    };
    let kind = match e.kind() {
        io::ErrorKind::TimedOut => ErrorKind::Timeout,
        _ => ErrorKind::Backend,
    };
    Error::new(kind, format!("lock directory: {e}")).with_source(e)
}

/// A lockkit error (a refusal: no I/O failed) through an attempt that returns `io::Result`;
/// [`io_error`] gives it back as it was.
pub(crate) fn refusal(e: Error) -> io::Error {
    io::Error::other(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder that keeps making progress is waited for past `within`; one that stopped is
    /// given up on `within` after its last progress; a free lock is taken.
    #[test]
    fn lock_within_waits_while_the_holder_moves_on() {
        let dir = std::env::temp_dir().join(format!("lockkit-within-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.token");
        let holder = open(&path, true).unwrap();
        holder.lock().unwrap();
        let f = open(&path, false).unwrap();
        let started = std::time::Instant::now();
        let moving = Duration::from_millis(300);
        let within = Duration::from_millis(50);
        let e = lock_within(&f, &path, within, || started.elapsed() < moving).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= moving);
        assert!(lock_within(&f, &path, Duration::ZERO, || false).is_err());
        holder.unlock().unwrap();
        lock_within(&f, &path, within, || false).unwrap();
        drop(f);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
