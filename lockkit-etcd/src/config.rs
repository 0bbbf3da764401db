//! The etcd backend's own option keys (the common ones and TLS's are the core's).

use lockkit_core::BackendKind;

/// The etcd backend's kind: `locks.backend() == lockkit_etcd::KIND`.
pub const KIND: BackendKind = BackendKind::new("etcd");

lockkit_core::option_keys! {
    /// The etcd backend's own options (URL query or `LockConfig::options`).
    pub enum EtcdKey {
        /// `lease_ttl`: the session lease's TTL, the handle's default lease under its older
        /// name (whole seconds).
        LeaseTtl = "lease_ttl",
    }
}
