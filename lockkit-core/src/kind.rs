//! Which backend a handle talks to.

use std::fmt;

/// Which backend a [`Locks`](crate::Locks) handle talks to: the short name it goes by in URLs,
/// logs and metrics (`mem`, `file`, `redis`, `zk`, `etcd`).
///
/// Each backend names itself ([`BackendKind::new`], in its [`BackendInfo`](crate::BackendInfo));
/// the core names only the two backends it holds. Compare with a backend's constant
/// (`lockkit::redis::KIND`) or with [`as_str`](Self::as_str).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackendKind(&'static str);

impl BackendKind {
    /// In-process (`mem://`).
    pub const MEMORY: BackendKind = BackendKind("mem");
    /// Lock files in a directory (`file://`).
    pub const FILE: BackendKind = BackendKind("file");

    /// A backend's kind, from its short name.
    pub const fn new(name: &'static str) -> BackendKind {
        BackendKind(name)
    }

    /// The short name used in URLs, logs and metrics.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}
