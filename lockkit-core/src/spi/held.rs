//! `Held` and `GuardParts`: one ownership as the backend hands it to the core.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::options::Lease;
use crate::state::StateCell;

/// The backend's side of one held ownership.
///
/// The core keeps the hold count and calls [`release`](Held::release) once, when the last hold
/// is released, or in the background when the last guard is dropped (a release future dropped
/// half-way is finished in the background too). It checks liveness and the lease kind before
/// [`extend`](Held::extend), [`reenter`](Held::reenter) and [`downgrade`](Held::downgrade), and
/// moves the guard's deadline after a successful `extend`.
#[async_trait]
pub trait Held: Send + Sync + fmt::Debug + 'static {
    /// Releases the ownership on the backend. Must answer
    /// [`LockLost`](crate::ErrorKind::LockLost) when the backend shows that someone else owns
    /// the lock or nobody does, and must never release another owner's lock.
    async fn release(&self) -> Result<()>;

    /// Moves a fixed lease's expiry on the server to `lease` from now, only while we still own
    /// the lock (the value or weight stays as it is).
    async fn extend(&self, lease: Duration) -> Result<()> {
        let _ = lease;
        Err(Error::unsupported("this backend cannot extend a lease"))
    }

    /// Records one more hold on the backend, for backends that mirror hold counts server-side.
    async fn reenter(&self) -> Result<()> {
        Ok(())
    }

    /// For an elected leader: replaces its value, only while it still leads (else
    /// [`LockLost`](crate::ErrorKind::LockLost)).
    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        let _ = value;
        Err(Error::unsupported("this backend has no election"))
    }

    /// For write ownerships: atomically turns the write hold into a read hold and returns the
    /// read ownership. The write ownership is then gone without a separate release.
    async fn downgrade(&self) -> Result<GuardParts> {
        Err(Error::unsupported(
            "this backend cannot downgrade a write lock",
        ))
    }
}

/// Everything a backend hands over to build a guard.
#[derive(Debug)]
pub struct GuardParts {
    pub(crate) token: FencingToken,
    pub(crate) lease: Lease,
    pub(crate) state: StateCell,
    pub(crate) held: Box<dyn Held>,
}

impl GuardParts {
    /// The parts of a fresh ownership with fencing token `token` and the lease it actually got,
    /// in the state `state` (whose clock holds the lease deadline).
    pub fn new(token: FencingToken, lease: Lease, state: StateCell, held: Box<dyn Held>) -> Self {
        GuardParts {
            token,
            lease,
            state,
            held,
        }
    }

    /// The ownership's state.
    pub fn state(&self) -> &StateCell {
        &self.state
    }
}
