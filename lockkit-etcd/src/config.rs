//! The etcd backend's own option keys (the common ones and TLS's are the core's).

lockkit_core::option_keys! {
    /// The etcd backend's own options (URL query or `LockConfig::options`).
    pub enum EtcdKey {
        /// `lease_ttl`: the session lease's TTL, the handle's default lease under its older
        /// name (whole seconds).
        LeaseTtl = "lease_ttl",
    }
}
