#![doc = include_str!("../README.md")]

mod armed;
mod backend_info;
mod backoff;
mod capabilities;
mod clock;
mod config;
mod driver;
mod election;
mod error;
mod fencing;
pub mod file;
mod guard;
mod inspect;
mod kernel;
mod kind;
mod leader;
mod lease;
mod locks;
pub mod mem;
mod member;
mod multi;
mod mutex;
mod name;
pub mod option_key;
mod options;
mod ownership;
mod reaper;
mod reason;
mod redact;
mod rwlock;
mod secret;
mod semaphore;
pub mod settings;
mod signal;
pub mod spi;
mod state;
pub mod telemetry;
mod tls;
mod url;
mod watchdog;

#[cfg(feature = "tls-probe")]
pub mod tls_probe;

pub use backend_info::{route, BackendInfo, ConnectFn, SchemeInfo};
pub use backoff::{Backoff, Budget, Retry};
pub use capabilities::{Capabilities, Support};
pub use config::LockConfig;
pub use election::Election;
pub use error::{find_source, Error, ErrorKind, Result};
pub use fencing::{Fencing, FencingToken};
pub use guard::{Leadership, LockGuard, Permit, ReadGuard, WriteGuard};
pub use inspect::{HoldMode, HolderInfo, LockEntry, LockInfo, Primitive, WaiterInfo};
pub use kind::BackendKind;
pub use leader::{Leader, LeaderChanges};
pub use locks::Locks;
pub use member::Member;
pub use multi::{MultiGuard, MultiLock};
pub use mutex::Mutex;
pub use name::{decode_name, encode_name, validate_name, MAX_NAME_LEN};
pub use options::{AcquireOptions, Lease, Wait, DEFAULT_LEASE, MAX_LEASE, MIN_LEASE};
pub use reason::LostReason;
pub use rwlock::RwLock;
pub use secret::Secret;
pub use semaphore::Semaphore;
pub use state::{LockState, Lost, StateChanges};
pub use tls::{Tls, TlsKey, TlsRules};
pub use url::{redact, HostPort, ServerUrl};

/// Re-exported so backends implement the SPI traits with the same macro version.
pub use async_trait::async_trait;
