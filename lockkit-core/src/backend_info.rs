//! What a backend tells the world about itself: its kind, its URL schemes with their default
//! ports, the cargo feature that compiles it in, and how to connect. The facade routes a URL by
//! these descriptors, so adding a backend edits no enum or match in the core.

use std::fmt;

use futures::future::BoxFuture;

use crate::config::LockConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::kind::BackendKind;
use crate::locks::Locks;

/// One URL scheme of a backend.
#[derive(Debug)]
pub struct SchemeInfo {
    /// The scheme as written in URLs, lower case (`rediss`).
    pub name: &'static str,
    /// Other spellings that mean the same (`zookeeper` for `zk`).
    pub aliases: &'static [&'static str],
    /// The port of a host the URL gives without one; `None` for a scheme with no server, whose
    /// URL may name no host.
    pub default_port: Option<u16>,
    /// Whether the scheme asks for TLS. A backend with a TLS scheme takes TLS options on its
    /// TLS schemes only (they are a `Config` error on the others); a backend with none turns
    /// TLS on whenever a TLS option is given.
    pub tls: bool,
}

impl SchemeInfo {
    /// Whether `s` (any case) is this scheme or one of its aliases.
    pub fn matches(&self, s: &str) -> bool {
        s.eq_ignore_ascii_case(self.name) || self.aliases.iter().any(|a| s.eq_ignore_ascii_case(a))
    }
}

/// How a backend connects: [`BackendInfo::connect`].
pub type ConnectFn = for<'a> fn(&'a LockConfig) -> BoxFuture<'a, Result<Locks>>;

/// A backend's descriptor: each backend crate exports one (`lockkit_redis::INFO`), and the
/// facade routes URLs through the list of those compiled in.
pub struct BackendInfo {
    /// Its kind, as [`Locks::backend`] reports it and as logs and metrics label it.
    pub kind: BackendKind,
    /// Its URL schemes; the first is the plain one.
    pub schemes: &'static [SchemeInfo],
    /// The cargo feature of the `lockkit` crate that compiles it in (`None`: always there).
    pub feature: Option<&'static str>,
    /// Connects with `cfg`, whose URL has one of [`schemes`](Self::schemes).
    pub connect: ConnectFn,
}

impl BackendInfo {
    /// The scheme `name` (any case, or an alias) names, if it is one of this backend's.
    pub fn scheme(&self, name: &str) -> Option<&'static SchemeInfo> {
        self.schemes.iter().find(|s| s.matches(name))
    }
}

impl fmt::Debug for BackendInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendInfo")
            .field("kind", &self.kind)
            .field("schemes", &self.schemes)
            .field("feature", &self.feature)
            .finish_non_exhaustive()
    }
}

/// The backend among `backends` that takes URL scheme `scheme`; `optional` lists, by cargo
/// feature, the schemes of backends that may be compiled out: a scheme none of `backends` takes
/// but `optional` names gives [`ErrorKind::BackendDisabled`] rather than "unknown scheme".
pub fn route(
    scheme: &str,
    backends: &[&'static BackendInfo],
    optional: &[(&'static str, &'static [&'static str])],
) -> Result<&'static BackendInfo> {
    if let Some(b) = backends.iter().find(|b| b.scheme(scheme).is_some()) {
        return Ok(b);
    }
    for (feature, schemes) in optional {
        if let Some(name) = schemes.iter().find(|s| s.eq_ignore_ascii_case(scheme)) {
            return Err(Error::new(
                ErrorKind::BackendDisabled {
                    scheme: name,
                    feature,
                },
                format!(
                    "the {name}:// backend is not compiled in; enable the `{feature}` feature \
                     of lockkit"
                ),
            ));
        }
    }
    let mut known: Vec<&str> = Vec::new();
    let names = backends
        .iter()
        .flat_map(|b| b.schemes.iter().map(|s| s.name))
        .chain(optional.iter().flat_map(|(_, s)| s.iter().copied()));
    for name in names {
        if !known.contains(&name) {
            known.push(name);
        }
    }
    Err(Error::config(format!(
        "unknown URL scheme {scheme:?}; expected {}",
        known.join(", ")
    )))
}
