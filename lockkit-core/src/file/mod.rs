//! The `file://DIR` backend: cross-process locks on one host with no server.

use crate::{Error, LockConfig, Locks, Result};

/// Opens the lock directory named by `cfg`'s `file://` URL.
pub async fn connect(cfg: &LockConfig) -> Result<Locks> {
    let _ = cfg;
    Err(Error::unsupported(
        "the file:// backend is not implemented yet",
    ))
}
