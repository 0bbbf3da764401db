#![doc = include_str!("../README.md")]

mod backend;
mod config;
mod error;
mod fencing;
pub mod file;
mod guard;
mod inspect;
mod lock;
pub mod mem;
mod name;
mod options;
mod rwlock;
mod semaphore;
mod state;
mod url;

#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "tls-probe")]
pub mod tls_probe;

pub use backend::{Backend, BackendKind, Capabilities, Locks};
pub use config::{LockConfig, Secret};
pub use error::{Error, ErrorKind, Result};
pub use fencing::{Fencing, FencingToken};
pub use guard::{GuardParts, Held, HoldRegistry, LockGuard, Permit, ReadGuard, WriteGuard};
pub use inspect::{HoldMode, HolderInfo, LockInfo, Primitive, WaiterInfo};
pub use lock::{DistLock, DistLockExt};
pub use name::{encode_name, validate_name, MAX_NAME_LEN};
pub use options::{AcquireOptions, Lease, Wait, DEFAULT_LEASE};
pub use rwlock::{ReadWriteLock, ReadWriteLockExt};
pub use semaphore::{check_permits, Semaphore, SemaphoreExt};
pub use state::{LockState, Lost, StateCell};
pub use url::{redact, HostPort, Scheme, ServerUrl};

/// Re-exported so backends implement the traits with the same macro version.
pub use async_trait::async_trait;
