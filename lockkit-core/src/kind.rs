//! Which backend a handle talks to.

use std::fmt;

/// Which backend a [`Locks`](crate::Locks) handle talks to.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// In-process (`mem://`).
    Memory,
    /// Lock files in a directory (`file://`).
    File,
    /// Redis (`redis://`, `rediss://`).
    Redis,
    /// ZooKeeper (`zk://`).
    ZooKeeper,
    /// etcd (`etcd://`, `etcds://`).
    Etcd,
}

impl BackendKind {
    /// The short name used in URLs, logs and metrics: `mem`, `file`, `redis`, `zk`, `etcd`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Memory => "mem",
            BackendKind::File => "file",
            BackendKind::Redis => "redis",
            BackendKind::ZooKeeper => "zk",
            BackendKind::Etcd => "etcd",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
