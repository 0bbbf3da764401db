//! The ZooKeeper backend's option keys.

lockkit_core::option_keys! {
    /// The ZooKeeper backend's own options (URL query or `LockConfig::options`).
    pub enum ZkKey {
        /// `session_timeout`: the handle's default lease under its ZooKeeper name: how long
        /// ZooKeeper keeps our ephemeral nodes after it last heard from us.
        SessionTimeout = "session_timeout",
        /// `acl`: `open`, `creator` or `creator_read` (the default with credentials).
        Acl = "acl",
    }
}
