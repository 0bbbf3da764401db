//! Guard state, the lost signal and its reason.
//!
//! A guard's state lives in a [`StateCell`] that the backend moves between states, next to the
//! ownership's [`LeaseClock`]. The state a guard reports is derived from both: once the clock's
//! deadline passes, the guard reads `Lost` even if no backend task got to say so, and `lost()`
//! resolves at the deadline on its own timer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use crate::signal::Signal;
use tokio::time::Instant;

use crate::clock::LeaseClock;
use crate::reason::LostReason;
use crate::telemetry::{self, Change, Identity};

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

    /// Lost or Released: the state will not change again.
    pub fn is_final(self) -> bool {
        !self.is_live()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Snapshot {
    state: LockState,
    reason: Option<LostReason>,
}

#[derive(Debug)]
struct Cell {
    tx: Signal<Snapshot>,
    clock: Arc<LeaseClock>,
    /// Which lock and token this is, once the core adopted the ownership: its state changes
    /// are then reported (events and metrics).
    identity: OnceLock<(Arc<Identity>, u64)>,
}

/// The backend-updated state of one ownership, tied to its lease clock. Backends keep a clone
/// and move it between states; guards read it. Lost and Released are final.
#[derive(Clone)]
pub struct StateCell {
    cell: Arc<Cell>,
}

impl fmt::Debug for StateCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StateCell").field(&self.get()).finish()
    }
}

impl StateCell {
    /// A new cell in state [`LockState::Held`] whose deadline is `clock`'s.
    pub fn new(clock: Arc<LeaseClock>) -> Self {
        let tx = Signal::new(Snapshot {
            state: LockState::Held,
            reason: None,
        });
        StateCell {
            cell: Arc::new(Cell {
                tx,
                clock,
                identity: OnceLock::new(),
            }),
        }
    }

    /// The lease clock this cell's deadline comes from.
    pub fn clock(&self) -> &Arc<LeaseClock> {
        &self.cell.clock
    }

    /// The current state: `Lost` once the clock's deadline has passed.
    pub fn get(&self) -> LockState {
        let state = self.cell.tx.get().state;
        if state.is_live() && self.cell.clock.has_passed(Instant::now()) {
            self.expire();
            return self.cell.tx.get().state;
        }
        state
    }

    /// Why the lock was lost, once it was.
    pub fn reason(&self) -> Option<LostReason> {
        let _ = self.get();
        self.cell.tx.get().reason
    }

    fn expire(&self) {
        self.mark_lost(self.cell.clock.expiry_reason());
    }

    /// Names the lock and token this cell belongs to, so that its state changes are reported.
    pub(crate) fn identify(&self, id: Arc<Identity>, token: u64) {
        let _ = self.cell.identity.set((id, token));
    }

    fn transition(&self, allowed: &[LockState], to: LockState, reason: Option<LostReason>) -> bool {
        let changed = self.cell.tx.send_if_modified(|s| {
            if allowed.contains(&s.state) {
                s.state = to;
                s.reason = reason;
                true
            } else {
                false
            }
        });
        if changed {
            if let Some((id, token)) = self.cell.identity.get() {
                let change = match (to, reason) {
                    (LockState::Suspect, _) => Some(Change::Suspect),
                    (LockState::Held, _) => Some(Change::Restored),
                    (LockState::Lost, r) => Some(Change::Lost(r.unwrap_or(LostReason::Deleted))),
                    _ => None,
                };
                if let Some(change) = change {
                    telemetry::state_changed(id, *token, change);
                }
            }
        }
        changed
    }

    /// Suspect -> Held (contact restored). Returns whether the state changed. A cell whose
    /// deadline has passed turns Lost instead.
    pub fn mark_held(&self) -> bool {
        if self.cell.clock.has_passed(Instant::now()) {
            self.expire();
            return false;
        }
        self.transition(&[LockState::Suspect], LockState::Held, None)
    }

    /// Held -> Suspect (contact failed). Returns whether the state changed.
    pub fn mark_suspect(&self) -> bool {
        if self.cell.clock.has_passed(Instant::now()) {
            self.expire();
            return false;
        }
        self.transition(&[LockState::Held], LockState::Suspect, None)
    }

    /// Held or Suspect -> Lost, for `reason`. Returns whether the state changed.
    pub fn mark_lost(&self, reason: LostReason) -> bool {
        self.transition(
            &[LockState::Held, LockState::Suspect],
            LockState::Lost,
            Some(reason),
        )
    }

    /// Held or Suspect -> Released. Returns whether the state changed.
    pub fn mark_released(&self) -> bool {
        if self.cell.clock.has_passed(Instant::now()) {
            self.expire();
            return false;
        }
        self.transition(
            &[LockState::Held, LockState::Suspect],
            LockState::Released,
            None,
        )
    }

    /// A future that resolves with the reason when the state becomes Lost (at the clock's
    /// deadline at the latest).
    pub fn lost(&self) -> Lost {
        let cell = self.clone();
        Lost {
            inner: Box::pin(async move {
                let mut changes = cell.changes();
                loop {
                    match changes.next().await {
                        Some(LockState::Lost) => {
                            return cell.reason().unwrap_or(LostReason::Deleted);
                        }
                        Some(_) => {}
                        None => std::future::pending::<()>().await,
                    }
                }
            }),
        }
    }

    /// Every change of state from now on, the deadline-derived `Lost` included.
    pub fn changes(&self) -> StateChanges {
        StateChanges {
            cell: self.clone(),
            last: None,
        }
    }
}

/// The state changes of one guard, from [`LockGuard::state_changes`](crate::LockGuard): each
/// call to [`next`](Self::next) waits for the next state; `None` after the final one (Lost or
/// Released) was returned.
///
/// # Cancel safety
/// [`next`](Self::next) is cancel safe: a change seen by a dropped call is returned by the next.
pub struct StateChanges {
    cell: StateCell,
    last: Option<LockState>,
}

impl fmt::Debug for StateChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateChanges")
            .field("last", &self.last)
            .finish()
    }
}

impl StateChanges {
    /// The state now, if it differs from the last one returned; else waits for a change. The
    /// first call returns the current state at once.
    pub async fn next(&mut self) -> Option<LockState> {
        loop {
            let (_, state_seen) = self.cell.cell.tx.seen();
            let (deadline, clock_seen) = self.cell.cell.clock.deadline_seen();
            let now = self.cell.get();
            if self.last != Some(now) {
                if self.last.is_some_and(LockState::is_final) {
                    return None;
                }
                self.last = Some(now);
                return Some(now);
            }
            if now.is_final() {
                return None;
            }
            let (cell, clock) = (&self.cell.cell.tx, &self.cell.cell.clock);
            match deadline {
                Some(at) => {
                    tokio::select! {
                        _ = cell.changed(state_seen) => {}
                        _ = clock.deadline_changed(clock_seen) => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => {
                    tokio::select! {
                        _ = cell.changed(state_seen) => {}
                        _ = clock.deadline_changed(clock_seen) => {}
                    }
                }
            }
        }
    }
}

/// Resolves with the [`LostReason`] when a guard's lock is lost. It owns what it needs, so it
/// can be moved into another task or a `select!`. After a normal release it never resolves.
///
/// # Cancel safety
/// Dropping it has no effect on the lock.
pub struct Lost {
    inner: Pin<Box<dyn Future<Output = LostReason> + Send + 'static>>,
}

impl fmt::Debug for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Lost")
    }
}

impl Lost {
    /// A lost signal that resolves when `fut` does.
    pub(crate) fn new(fut: impl Future<Output = LostReason> + Send + 'static) -> Lost {
        Lost {
            inner: Box::pin(fut),
        }
    }
}

impl Future for Lost {
    type Output = LostReason;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LostReason> {
        self.inner.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cell() -> StateCell {
        StateCell::new(LeaseClock::new(LostReason::LeaseExpired))
    }

    #[tokio::test]
    async fn transitions_and_lost_future() {
        let cell = cell();
        assert!(cell.mark_suspect());
        assert!(!cell.mark_suspect());
        assert!(cell.mark_held());
        let lost = cell.lost();
        let c2 = cell.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            c2.mark_lost(LostReason::Deleted);
        });
        let reason = tokio::time::timeout(Duration::from_secs(5), lost)
            .await
            .unwrap();
        assert_eq!(reason, LostReason::Deleted);
        assert!(!cell.mark_held());
        assert!(!cell.mark_released());
        assert_eq!(cell.get(), LockState::Lost);
    }

    #[tokio::test]
    async fn lost_future_after_release_stays_pending() {
        let cell = cell();
        let lost = cell.lost();
        cell.mark_released();
        drop(cell);
        assert!(tokio::time::timeout(Duration::from_millis(20), lost)
            .await
            .is_err());
    }

    /// Nobody marks the cell: the deadline alone makes it Lost, and lost() fires on its own.
    #[tokio::test(start_paused = true)]
    async fn the_deadline_alone_turns_a_guard_lost() {
        let clock = LeaseClock::new(LostReason::SessionExpired);
        clock.renewed(Instant::now(), Duration::from_secs(2));
        let cell = StateCell::new(clock.clone());
        let lost = cell.lost();
        let mut changes = cell.changes();
        assert_eq!(changes.next().await, Some(LockState::Held));
        tokio::time::sleep(Duration::from_millis(1900)).await;
        assert_eq!(cell.get(), LockState::Held);
        // A renewal moves the deadline; the lost() future follows it.
        clock.renewed(Instant::now(), Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(cell.get(), LockState::Lost);
        assert_eq!(cell.reason(), Some(LostReason::SessionExpired));
        assert_eq!(lost.await, LostReason::SessionExpired);
        assert_eq!(changes.next().await, Some(LockState::Lost));
        assert_eq!(changes.next().await, None);
        assert!(!cell.mark_held());
    }

    #[tokio::test(start_paused = true)]
    async fn suspect_is_seen_by_state_changes() {
        let cell = cell();
        let mut changes = cell.changes();
        assert_eq!(changes.next().await, Some(LockState::Held));
        let c2 = cell.clone();
        tokio::spawn(async move {
            c2.mark_suspect();
        });
        assert_eq!(changes.next().await, Some(LockState::Suspect));
        cell.mark_released();
        assert_eq!(changes.next().await, Some(LockState::Released));
        assert_eq!(changes.next().await, None);
    }
}
