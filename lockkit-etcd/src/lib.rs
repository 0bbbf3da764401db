//! The etcd backend of lockkit. Applications reach it through `lockkit::connect`.

use lockkit_core::{Error, LockConfig, Locks, Result};

/// Connects to etcd as described by `cfg`.
pub async fn connect(cfg: &LockConfig) -> Result<Locks> {
    let _ = cfg;
    Err(Error::unsupported(
        "the etcd backend is not implemented yet",
    ))
}
