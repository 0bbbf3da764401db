//! Guard state and the lost signal.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::watch;

/// What a guard knows about its lock.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockState {
    /// The lock is ours, as of the last contact with the backend.
    Held,
    /// Contact with the backend failed; the lock may still be ours until the lease deadline.
    Suspect,
    /// The lock is no longer ours: stop touching the protected resource.
    Lost,
    /// The guard was released.
    Released,
}

impl LockState {
    /// Held or Suspect: the lock may still be ours.
    pub fn is_live(self) -> bool {
        matches!(self, LockState::Held | LockState::Suspect)
    }
}

/// The shared, backend-updated state of one ownership. Backends keep a clone and move it between
/// states; guards read it. Lost and Released are final.
#[derive(Clone)]
pub struct StateCell {
    tx: Arc<watch::Sender<LockState>>,
}

impl Default for StateCell {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for StateCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StateCell").field(&self.get()).finish()
    }
}

impl StateCell {
    /// A new cell in state [`LockState::Held`].
    pub fn new() -> Self {
        let (tx, _) = watch::channel(LockState::Held);
        StateCell { tx: Arc::new(tx) }
    }

    /// The current state.
    pub fn get(&self) -> LockState {
        *self.tx.borrow()
    }

    fn transition(&self, allowed: &[LockState], to: LockState) -> bool {
        self.tx.send_if_modified(|s| {
            if allowed.contains(s) {
                *s = to;
                true
            } else {
                false
            }
        })
    }

    /// Suspect -> Held (contact restored). Returns whether the state changed.
    pub fn mark_held(&self) -> bool {
        self.transition(&[LockState::Suspect], LockState::Held)
    }

    /// Held -> Suspect (contact failed). Returns whether the state changed.
    pub fn mark_suspect(&self) -> bool {
        self.transition(&[LockState::Held], LockState::Suspect)
    }

    /// Held or Suspect -> Lost. Returns whether the state changed.
    pub fn mark_lost(&self) -> bool {
        self.transition(&[LockState::Held, LockState::Suspect], LockState::Lost)
    }

    /// Held or Suspect -> Released. Returns whether the state changed.
    pub fn mark_released(&self) -> bool {
        self.transition(&[LockState::Held, LockState::Suspect], LockState::Released)
    }

    /// A future that resolves when the state becomes Lost.
    pub fn lost(&self) -> Lost {
        let mut rx = self.tx.subscribe();
        Lost {
            inner: Box::pin(async move {
                loop {
                    if *rx.borrow_and_update() == LockState::Lost {
                        return;
                    }
                    if rx.changed().await.is_err() {
                        // Every sender is gone without a loss: never resolve.
                        std::future::pending::<()>().await;
                    }
                }
            }),
        }
    }

    /// A receiver that sees every state change.
    pub fn subscribe(&self) -> watch::Receiver<LockState> {
        self.tx.subscribe()
    }
}

/// Resolves when a guard's lock is lost. It owns what it needs, so it can be moved into another
/// task or a `select!`. After a normal release it never resolves.
///
/// # Cancel safety
/// Dropping it has no effect on the lock.
pub struct Lost {
    inner: Pin<Box<dyn Future<Output = ()> + Send + 'static>>,
}

impl fmt::Debug for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Lost")
    }
}

impl Future for Lost {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn transitions_and_lost_future() {
        let cell = StateCell::new();
        assert!(cell.mark_suspect());
        assert!(!cell.mark_suspect());
        assert!(cell.mark_held());
        let lost = cell.lost();
        let c2 = cell.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            c2.mark_lost();
        });
        tokio::time::timeout(Duration::from_secs(5), lost)
            .await
            .unwrap();
        assert!(!cell.mark_held());
        assert!(!cell.mark_released());
        assert_eq!(cell.get(), LockState::Lost);
    }

    #[tokio::test]
    async fn lost_future_after_release_stays_pending() {
        let cell = StateCell::new();
        let lost = cell.lost();
        cell.mark_released();
        drop(cell);
        assert!(tokio::time::timeout(Duration::from_millis(20), lost)
            .await
            .is_err());
    }
}
