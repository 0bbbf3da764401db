//! Guards: what an acquire returns. The guard is the API: token, state, lost signal, release.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::fencing::{Fencing, FencingToken};
use crate::options::Lease;
use crate::ownership::GuardCore;
use crate::reason::LostReason;
use crate::state::{LockState, Lost, StateChanges};

macro_rules! guard_type {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[must_use = "dropping a guard releases the lock at once"]
        pub struct $name {
            pub(crate) core: GuardCore,
        }

        impl $name {
            /// The lock's name.
            pub fn name(&self) -> &str {
                &self.core.own.name
            }

            /// The fencing token of this ownership: pass it to the resource you protect.
            pub fn token(&self) -> FencingToken {
                self.core.own.token
            }

            /// What this guard knows about its lock right now. It reads `Lost` once the lease
            /// deadline (measured from before the last acquire or renewal was sent, minus a
            /// safety margin) has passed, whatever the backend's tasks did.
            pub fn state(&self) -> LockState {
                self.core.own.state.get()
            }

            /// Why the lock was lost, once it was.
            pub fn lost_reason(&self) -> Option<LostReason> {
                self.core.own.state.reason()
            }

            /// A future that resolves with the reason when the lock is lost (at the lease
            /// deadline at the latest). It does not borrow the guard.
            pub fn lost(&self) -> Lost {
                self.core.own.state.lost()
            }

            /// Every state change from now on (`Held`, `Suspect`, `Lost`, `Released`); the first
            /// [`next`](StateChanges::next) returns the current state.
            pub fn state_changes(&self) -> StateChanges {
                self.core.own.state.changes()
            }

            /// The lease this guard holds (an `extend` changes its length).
            pub fn lease(&self) -> Lease {
                self.core.own.lease()
            }

            /// How long until the lease deadline, as this process sees it (`None`: the lock
            /// lives as long as its holder, as on `file://` with a watchdog lease).
            pub fn remaining(&self) -> Option<Duration> {
                self.core.own.state.clock().remaining()
            }

            /// How many holds this ownership has (1 plus one per `reenter`, minus releases).
            pub fn hold_count(&self) -> u32 {
                self.core.own.holds.load(std::sync::atomic::Ordering::Acquire)
            }

            /// Releases this hold and reports errors. The backend lock is released with the last
            /// hold of the ownership. Releasing a guard whose lock was lost gives `LockLost`.
            ///
            /// # Cancel safety
            /// If the future is dropped before it finishes, the release goes on in the
            /// background.
            pub async fn release(self) -> Result<()> {
                self.core.release().await
            }

            /// Moves a fixed lease's expiry to `lease` from now, shorter or longer; the guard's
            /// deadline moves with it. Fails with `LockLost` when the lock is no longer ours;
            /// never re-creates an expired lock. Watchdog leases give `InvalidArgument`: they
            /// are renewed already.
            ///
            /// From the moment the extend is sent, the guard's deadline is the earlier of the
            /// old one and `lease` from then, because the server may apply it whatever becomes
            /// of this call; only a success moves it later. An extend that fails after it may
            /// have reached the server (a timeout, a cut connection, replicas that did not
            /// acknowledge it) keeps that earlier deadline, so the guard never reads `Held`
            /// past the lease the server counts. Concurrent extends of one guard are sent one
            /// after the other, so the guard keeps the deadline the server applied last.
            ///
            /// # Cancel safety
            /// Dropping the future leaves the lease either extended or not; the guard keeps the
            /// earlier of the two deadlines.
            pub async fn extend(&self, lease: Duration) -> Result<()> {
                self.core.extend(lease).await
            }
        }

        impl Fencing for $name {
            fn token(&self) -> FencingToken {
                self.core.own.token
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
    /// Leadership of an election, won by [`Election::campaign`](crate::Election::campaign).
    /// Its token is the leadership's [`term`](Leadership::term). Dropping it resigns in the
    /// background.
    Leadership
);

guard_type!(
    /// Held semaphore permits. Dropping it returns them in the background.
    Permit
);

impl Permit {
    /// How many permits this holds.
    pub fn permits(&self) -> u32 {
        self.core.own.permits
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
    /// only hold of the write ownership. The read lock keeps the write lock's token.
    ///
    /// # Cancel safety
    /// Dropping the future gives the lock up: the write lock is released in the background, and
    /// a read hold the server may still create for it is removed by the backend's cleanup
    /// (ZooKeeper, and Redis, which releases the write hold first so that a downgrade arriving
    /// late finds nothing to turn), goes with the write lock's key (etcd, where both are one
    /// key), or ends with its lease, which nothing renews any more.
    pub async fn downgrade(self) -> Result<ReadGuard> {
        Ok(ReadGuard {
            core: self.core.downgrade().await?,
        })
    }
}
