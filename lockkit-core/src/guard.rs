//! Guards: what an acquire returns. The guard is the API: token, state, lost signal, release.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tracing::Instrument;

use crate::error::{Error, ErrorKind, Result};
use crate::fencing::{Fencing, FencingToken};
use crate::options::Lease;
use crate::state::{LockState, Lost, StateCell};

/// The backend's side of one held ownership. Backends implement this; users never see it.
///
/// The core keeps the hold count: [`release`](Held::release) is called once, when the last hold
/// of the ownership is released.
#[async_trait]
pub trait Held: Send + Sync + fmt::Debug + 'static {
    /// Releases the ownership on the backend. Must report `NotHeld` when the backend shows that
    /// someone else owns the lock or nobody does, and must never release another owner's lock.
    async fn release(&self) -> Result<()>;

    /// Releases without waiting, from `Drop`: spawn if a runtime is available, otherwise leave it
    /// to the lease. Must never block or panic.
    fn release_in_background(&self);

    /// Moves a fixed lease's expiry to now + `lease`, only while we still own the lock.
    async fn extend(&self, lease: Duration) -> Result<()> {
        let _ = lease;
        Err(Error::unsupported("this backend cannot extend a lease"))
    }

    /// Records one more hold on the backend, for backends that mirror hold counts server-side.
    async fn reenter(&self) -> Result<()> {
        Ok(())
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
    name: Arc<str>,
    token: FencingToken,
    lease: Lease,
    state: StateCell,
    held: Box<dyn Held>,
    permits: u32,
}

impl GuardParts {
    /// The parts of a fresh ownership of `name`, in state Held.
    pub fn new(
        name: impl Into<Arc<str>>,
        token: FencingToken,
        lease: Lease,
        state: StateCell,
        held: Box<dyn Held>,
    ) -> Self {
        GuardParts {
            name: name.into(),
            token,
            lease,
            state,
            held,
            permits: 1,
        }
    }

    /// Sets the number of permits this ownership holds (semaphores).
    pub fn with_permits(mut self, permits: u32) -> Self {
        self.permits = permits;
        self
    }
}

#[derive(Debug)]
struct Ownership {
    parts: GuardParts,
    holds: AtomicU32,
}

/// The shared body of every guard type.
struct GuardCore {
    own: Arc<Ownership>,
    armed: bool,
}

impl GuardCore {
    fn new(parts: GuardParts) -> Self {
        GuardCore {
            own: Arc::new(Ownership {
                parts,
                holds: AtomicU32::new(1),
            }),
            armed: true,
        }
    }

    fn p(&self) -> &GuardParts {
        &self.own.parts
    }

    fn check_live(&self) -> Result<()> {
        if self.p().state.get().is_live() {
            Ok(())
        } else {
            Err(Error::lost(&self.p().name))
        }
    }

    async fn release(mut self) -> Result<()> {
        self.armed = false;
        let was = self.p().state.get();
        if self.own.holds.fetch_sub(1, Ordering::AcqRel) > 1 {
            return if was.is_live() {
                Ok(())
            } else {
                Err(lost_before_release(&self.p().name))
            };
        }
        let span = tracing::debug_span!("lockkit.release", lock = %self.p().name);
        let result = self.p().held.release().instrument(span).await;
        if matches!(&result, Err(e) if matches!(e.kind(), ErrorKind::NotHeld | ErrorKind::LockLost))
        {
            // The release is how this holder learns that the lock was lost (say, after a pause
            // the backend had not reported yet): tell `lost()` too.
            self.p().state.mark_lost();
        }
        self.p().state.mark_released();
        match result {
            Ok(()) if was == LockState::Lost => Err(lost_before_release(&self.p().name)),
            other => other,
        }
    }

    async fn reenter(&self) -> Result<GuardCore> {
        self.check_live()?;
        self.p().held.reenter().await?;
        self.own.holds.fetch_add(1, Ordering::AcqRel);
        Ok(GuardCore {
            own: self.own.clone(),
            armed: true,
        })
    }

    async fn extend(&self, lease: Duration) -> Result<()> {
        if self.p().lease.is_watchdog() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "this guard's lease is renewed by the watchdog; extend() is for fixed leases",
            ));
        }
        self.check_live()?;
        self.p().held.extend(lease).await
    }

    async fn downgrade(mut self) -> Result<GuardCore> {
        self.check_live()?;
        if self.own.holds.load(Ordering::Acquire) != 1 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "downgrade needs the only hold of the write lock; release the reentered holds first",
            ));
        }
        let parts = self.p().held.downgrade().await?;
        // The write ownership became the read ownership: nothing left to release.
        self.armed = false;
        self.own.holds.store(0, Ordering::Release);
        self.p().state.mark_released();
        Ok(GuardCore::new(parts))
    }
}

fn lost_before_release(name: &str) -> Error {
    Error::new(
        ErrorKind::NotHeld,
        format!("lock {name:?} was lost before release (lease expired, or taken over)"),
    )
}

impl Drop for GuardCore {
    fn drop(&mut self) {
        if self.armed && self.own.holds.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.p().held.release_in_background();
            self.p().state.mark_released();
        }
    }
}

macro_rules! guard_type {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        pub struct $name {
            core: GuardCore,
        }

        impl $name {
            /// Wraps a backend's ownership. Backends call this; users get guards from acquires.
            pub fn new(parts: GuardParts) -> Self {
                $name { core: GuardCore::new(parts) }
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                &self.core.p().name
            }

            /// The fencing token of this ownership: pass it to the resource you protect.
            pub fn token(&self) -> FencingToken {
                self.core.p().token
            }

            /// What this guard knows about its lock right now.
            pub fn state(&self) -> LockState {
                self.core.p().state.get()
            }

            /// A future that resolves when the lock is lost. It does not borrow the guard.
            pub fn lost(&self) -> Lost {
                self.core.p().state.lost()
            }

            /// The lease this guard was acquired with.
            pub fn lease(&self) -> Lease {
                self.core.p().lease
            }

            /// How many holds this ownership has (1 plus one per `reenter`, minus releases).
            pub fn hold_count(&self) -> u32 {
                self.core.own.holds.load(Ordering::Acquire)
            }

            /// Releases this hold and reports errors. The backend lock is released with the last
            /// hold of the ownership. Releasing a guard whose lock was lost gives `NotHeld`.
            ///
            /// # Cancel safety
            /// If the future is dropped before it finishes, the release may or may not have reached
            /// the backend; the lease is the backstop.
            pub async fn release(self) -> Result<()> {
                self.core.release().await
            }

            /// Pushes a fixed lease's expiry to now + `lease`. Fails with `LockLost` or `NotHeld`
            /// when the lock is no longer ours; never re-creates an expired lock. Watchdog leases
            /// give `InvalidArgument`: they are renewed already.
            ///
            /// # Cancel safety
            /// Dropping the future leaves the lease either extended or not.
            pub async fn extend(&self, lease: Duration) -> Result<()> {
                self.core.extend(lease).await
            }
        }

        impl Fencing for $name {
            fn token(&self) -> FencingToken {
                self.core.p().token
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("name", &self.name())
                    .field("token", &self.token())
                    .field("state", &self.state())
                    .field("holds", &self.hold_count())
                    .finish()
            }
        }
    };
}

macro_rules! reentrant {
    ($name:ident) => {
        impl $name {
            /// Adds a hold to this same ownership and returns a guard for it (hold count + 1).
            /// The lock is released when the last hold is released. Fails with `LockLost` when
            /// the lock is no longer ours.
            ///
            /// # Cancel safety
            /// Dropping the future adds no hold.
            pub async fn reenter(&self) -> Result<$name> {
                Ok($name {
                    core: self.core.reenter().await?,
                })
            }
        }
    };
}

guard_type!(
    /// A held mutex. Dropping it releases the lock in the background.
    LockGuard
);
reentrant!(LockGuard);

guard_type!(
    /// A held read lock. Dropping it releases the lock in the background.
    ReadGuard
);
reentrant!(ReadGuard);

guard_type!(
    /// A held write lock. Dropping it releases the lock in the background.
    WriteGuard
);
reentrant!(WriteGuard);

guard_type!(
    /// Held semaphore permits. Dropping it returns them in the background.
    Permit
);

impl Permit {
    /// How many permits this holds.
    pub fn permits(&self) -> u32 {
        self.core.p().permits
    }
}

impl ReadGuard {
    /// Always fails with [`ErrorKind::UpgradeNotSupported`]: two readers upgrading at once would
    /// wait for each other forever. Release the read lock and acquire the write lock instead.
    pub fn upgrade(&self) -> Result<WriteGuard> {
        Err(Error::new(
            ErrorKind::UpgradeNotSupported,
            format!(
                "read lock {:?} cannot be upgraded; release it and acquire the write lock",
                self.name()
            ),
        ))
    }
}

impl WriteGuard {
    /// Turns this write lock into a read lock without letting a writer in between. Needs the
    /// only hold of the write ownership.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the write lock held until the guard's lease backstop.
    pub async fn downgrade(self) -> Result<ReadGuard> {
        Ok(ReadGuard {
            core: self.core.downgrade().await?,
        })
    }
}

/// Tracks the ownerships acquired through one lock handle, for `hold_count()` on the handle.
#[derive(Debug, Default)]
pub struct HoldRegistry {
    owned: Mutex<Vec<Weak<Ownership>>>,
}

impl HoldRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Remembers a guard acquired through the handle.
    pub fn track(&self, guard: &LockGuard) {
        let mut owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        owned.retain(|w| w.strong_count() > 0);
        owned.push(Arc::downgrade(&guard.core.own));
    }

    /// The holds currently held by live ownerships acquired through the handle.
    pub fn hold_count(&self) -> u32 {
        let owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        owned
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|o| o.parts.state.get().is_live())
            .map(|o| o.holds.load(Ordering::Acquire))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend side whose lock vanished behind its back: release finds it gone.
    #[derive(Debug)]
    struct Vanished;

    #[async_trait]
    impl Held for Vanished {
        async fn release(&self) -> Result<()> {
            Err(Error::new(ErrorKind::NotHeld, "gone"))
        }
        fn release_in_background(&self) {}
    }

    #[tokio::test]
    async fn release_that_finds_the_lock_gone_resolves_lost() {
        let state = StateCell::new();
        let parts = GuardParts::new(
            "n",
            FencingToken(1),
            Lease::Watchdog(Duration::from_secs(1)),
            state.clone(),
            Box::new(Vanished),
        );
        let guard = LockGuard::new(parts);
        let lost = guard.lost();
        let err = guard.release().await.unwrap_err();
        assert_eq!(*err.kind(), ErrorKind::NotHeld);
        tokio::time::timeout(Duration::from_secs(1), lost)
            .await
            .expect("lost() resolves when the release finds the lock gone");
        assert_eq!(state.get(), LockState::Lost);
    }
}
