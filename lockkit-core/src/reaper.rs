//! `Reaper`: cleanup that is never given up after one try.
//!
//! Every key, node or queue entry a backend creates is either owned by a live guard or handed
//! to its handle's reaper, which retries deleting it with the core [`Backoff`] until the delete
//! succeeds or whatever owns the key (a session, a lease) is certainly gone. Background releases
//! of dropped guards, and release futures dropped half-way, run here too, so `Locks::close`
//! can wait for all of it.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Context;
use std::time::Duration;

use tokio::sync::Notify;

use crate::backoff::Backoff;
use crate::error::Error;
use crate::kind::BackendKind;

/// What one try of a cleanup found.
#[derive(Debug)]
pub enum Attempt {
    /// The key, node or entry is gone: done.
    Done,
    /// Nothing is left to do: whatever owned it is certainly gone (its session ended, its lease
    /// expired on the server), and with it the key.
    Moot,
    /// The try failed (the server is away, say): try again after the next pause.
    Retry(Error),
}

impl Attempt {
    /// The one rule for what a try of a cleanup amounts to: done once its work succeeded; a
    /// failure is moot once `gone` (asked only then) says whatever owns the key is certainly
    /// gone (a deadline passed on the server, a session ended, a lease was revoked), else it
    /// is tried again.
    pub async fn of(work: Result<(), Error>, gone: impl Future<Output = bool>) -> Attempt {
        match work {
            Ok(()) => Attempt::Done,
            Err(_) if gone.await => Attempt::Moot,
            Err(e) => Attempt::Retry(e),
        }
    }
}

/// How long a cleanup of something that lapses on the server by itself is worth trying, the one
/// rule for cleanups that have no session or lease to ask whether they are moot: until the
/// longest of what it may have left there (`lives`: a lease an unanswered attempt may have
/// taken, the timeout of a place in a queue) has lapsed, plus the core's [`margin`] for the
/// server's clock running slower than ours, plus a second for a request of the attempt still in
/// flight.
///
/// [`margin`]: crate::clock::margin
pub fn moot_after(lives: &[Duration]) -> Duration {
    let longest = lives.iter().copied().max().unwrap_or_default();
    longest + crate::clock::margin(longest) + Duration::from_secs(1)
}

/// The cleanup work of one handle, in the background.
#[derive(Clone)]
pub struct Reaper {
    shared: Arc<Shared>,
}

struct Shared {
    backoff: Backoff,
    pending: AtomicUsize,
    idle: Notify,
    /// The backend whose cleanup this is, for its events (set by the core once it adopts the
    /// backend).
    backend: OnceLock<&'static str>,
}

impl fmt::Debug for Reaper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reaper")
            .field("pending", &self.pending())
            .finish()
    }
}

impl Default for Reaper {
    /// Retries from 50 ms, doubling, at most every 2 s.
    fn default() -> Self {
        Reaper::new(Backoff::CLEANUP)
    }
}

/// Counts one piece of pending work for as long as it lives.
struct Pending(Arc<Shared>);

impl Pending {
    fn new(shared: &Arc<Shared>) -> Pending {
        shared.pending.fetch_add(1, Ordering::AcqRel);
        Pending(shared.clone())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Reaper {
    /// A reaper retrying on `backoff`.
    pub fn new(backoff: Backoff) -> Self {
        Reaper {
            shared: Arc::new(Shared {
                backoff,
                pending: AtomicUsize::new(0),
                idle: Notify::new(),
                backend: OnceLock::new(),
            }),
        }
    }

    /// Tries `job` now and, until it answers [`Attempt::Done`] or [`Attempt::Moot`], again after
    /// each pause of the backoff, in the background. Outside a tokio runtime nothing runs: the
    /// lease or session that owns the key is the backstop.
    pub fn retry<F, Fut>(&self, what: &'static str, mut job: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Attempt> + Send + 'static,
    {
        let pending = Pending::new(&self.shared);
        let backoff = self.shared.backoff;
        let shared = self.shared.clone();
        self.finish_counted(pending, async move {
            let mut retry = backoff.start();
            loop {
                match job().await {
                    Attempt::Done | Attempt::Moot => return,
                    Attempt::Retry(e) => {
                        tracing::debug!(
                            backend = shared.backend.get().copied().unwrap_or("unknown"),
                            error = %e,
                            attempt = retry.attempts() + 1,
                            "lockkit: {what} failed; trying again"
                        );
                        retry.wait().await;
                    }
                }
            }
        });
    }

    /// [`retry`](Self::retry) for a `job` that is moot once `until` has passed (see
    /// [`moot_after`]): a failed try is tried again until then.
    pub fn retry_until<F, Fut>(&self, what: &'static str, until: tokio::time::Instant, mut job: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), Error>> + Send + 'static,
    {
        self.retry(what, move || {
            let work = job();
            async move { Attempt::of(work.await, async { tokio::time::Instant::now() >= until }).await }
        });
    }

    /// The reaper, its events naming `kind` as their backend (the first kind given stays).
    pub(crate) fn tagged(self, kind: BackendKind) -> Self {
        let _ = self.shared.backend.set(kind.as_str());
        self
    }

    /// Runs `fut` to its end without waiting for it, counted as pending work: it is polled once
    /// right here (so work that needs no I/O, as on the embedded backends, is done before the
    /// caller goes on) and spawned on the current runtime if it is not finished. Outside a
    /// runtime nothing runs.
    pub fn finish(&self, fut: impl Future<Output = ()> + Send + 'static) {
        let pending = Pending::new(&self.shared);
        self.finish_counted(pending, fut);
    }

    fn finish_counted(&self, pending: Pending, fut: impl Future<Output = ()> + Send + 'static) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut fut = Box::pin(async move {
            fut.await;
            drop(pending);
        });
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if fut.as_mut().poll(&mut cx).is_pending() {
            rt.spawn(fut);
        }
    }

    /// How many pieces of work are still running.
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::Acquire)
    }

    /// Waits until no work is pending, at most `within`; returns how many are still pending.
    pub async fn drain(&self, within: Duration) -> usize {
        let until = tokio::time::Instant::now() + within;
        loop {
            let idle = self.shared.idle.notified();
            let left = self.pending();
            if left == 0 {
                return 0;
            }
            if tokio::time::timeout_at(until, idle).await.is_err() {
                return self.pending();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[tokio::test(start_paused = true)]
    async fn retries_until_done_and_drains() {
        let reaper = Reaper::default();
        let tries = Arc::new(AtomicU32::new(0));
        let t = tries.clone();
        reaper.retry("delete", move || {
            let t = t.clone();
            async move {
                if t.fetch_add(1, Ordering::SeqCst) < 4 {
                    Attempt::Retry(Error::new(crate::ErrorKind::Connection, "away"))
                } else {
                    Attempt::Done
                }
            }
        });
        assert_eq!(reaper.pending(), 1);
        assert_eq!(reaper.drain(Duration::from_secs(60)).await, 0);
        assert_eq!(tries.load(Ordering::SeqCst), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn drain_is_bounded() {
        let reaper = Reaper::default();
        reaper.retry("never", || async {
            Attempt::Retry(Error::new(crate::ErrorKind::Connection, "away"))
        });
        assert_eq!(reaper.drain(Duration::from_secs(1)).await, 1);
        reaper.finish(async {});
        assert_eq!(reaper.pending(), 1, "inline work is done at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cleanup_by_the_clock_ends_once_moot() {
        let reaper = Reaper::default();
        let lives = [Duration::from_secs(30), Duration::from_secs(6)];
        let moot = moot_after(&lives);
        assert_eq!(moot, Duration::from_millis(30_000 + 502 + 1_000));
        let until = tokio::time::Instant::now() + moot;
        reaper.retry_until("never", until, || async {
            Err(Error::new(crate::ErrorKind::Connection, "away"))
        });
        assert_eq!(reaper.drain(moot - Duration::from_secs(1)).await, 1);
        assert_eq!(reaper.drain(Duration::from_secs(60)).await, 0);
    }
}
