//! The table of URL schemes lockkit knows, and which backend and cargo feature each selects.

use std::fmt;

use crate::error::{Error, ErrorKind, Result};
use crate::kind::BackendKind;

/// A URL scheme lockkit knows. Every scheme is known whatever features are compiled, so a
/// disabled backend gives `BackendDisabled` rather than "unknown scheme".
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `mem://`
    Mem,
    /// `file:///path/to/dir`: cross-process locks on one host, no server.
    File,
    /// `redis://`
    Redis,
    /// `rediss://` (TLS)
    Rediss,
    /// `redis+sentinel://s1:26379,s2:26379/<master-name>[/db]`: the primary a group of Redis
    /// Sentinels names, followed across failovers.
    RedisSentinel,
    /// `redis+cluster://h1:6379,h2:6379`: a Redis Cluster, reached through any of its nodes.
    RedisCluster,
    /// `zk://`
    Zk,
    /// `etcd://`
    Etcd,
    /// `etcds://` (TLS)
    Etcds,
}

impl Scheme {
    /// Parses a scheme name.
    pub fn parse(s: &str) -> Result<Scheme> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "mem" | "memory" => Scheme::Mem,
            "file" => Scheme::File,
            "redis" => Scheme::Redis,
            "rediss" => Scheme::Rediss,
            "redis+sentinel" => Scheme::RedisSentinel,
            "redis+cluster" => Scheme::RedisCluster,
            "zk" | "zookeeper" => Scheme::Zk,
            "etcd" => Scheme::Etcd,
            "etcds" => Scheme::Etcds,
            other => {
                return Err(Error::config(format!(
                    "unknown URL scheme {other:?}; expected mem, file, redis, rediss, \
                     redis+sentinel, redis+cluster, zk, etcd or etcds"
                )))
            }
        })
    }

    /// The scheme as written in URLs.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Mem => "mem",
            Scheme::File => "file",
            Scheme::Redis => "redis",
            Scheme::Rediss => "rediss",
            Scheme::RedisSentinel => "redis+sentinel",
            Scheme::RedisCluster => "redis+cluster",
            Scheme::Zk => "zk",
            Scheme::Etcd => "etcd",
            Scheme::Etcds => "etcds",
        }
    }

    /// The backend it selects.
    pub fn backend(self) -> BackendKind {
        match self {
            Scheme::Mem => BackendKind::Memory,
            Scheme::File => BackendKind::File,
            Scheme::Redis | Scheme::Rediss | Scheme::RedisSentinel | Scheme::RedisCluster => {
                BackendKind::Redis
            }
            Scheme::Zk => BackendKind::ZooKeeper,
            Scheme::Etcd | Scheme::Etcds => BackendKind::Etcd,
        }
    }

    /// The `lockkit` cargo feature that compiles its backend in (`None`: always there).
    pub fn feature(self) -> Option<&'static str> {
        match self.backend() {
            BackendKind::Memory | BackendKind::File => None,
            BackendKind::Redis => Some("redis"),
            BackendKind::ZooKeeper => Some("zk"),
            BackendKind::Etcd => Some("etcd"),
        }
    }

    /// Whether the scheme asks for TLS.
    pub fn is_tls(self) -> bool {
        matches!(self, Scheme::Rediss | Scheme::Etcds)
    }

    pub(crate) fn default_port(self) -> u16 {
        match self {
            Scheme::Mem | Scheme::File => 0,
            Scheme::Redis | Scheme::Rediss | Scheme::RedisCluster => 6379,
            Scheme::RedisSentinel => 26379,
            Scheme::Zk => 2181,
            Scheme::Etcd | Scheme::Etcds => 2379,
        }
    }

    /// The error for a URL whose backend is compiled out.
    pub fn disabled_error(self) -> Error {
        let feature = self.feature().unwrap_or("default");
        Error::new(
            ErrorKind::BackendDisabled {
                scheme: self.as_str(),
                feature,
            },
            format!(
                "the {} backend is not compiled in; enable the `{feature}` feature of lockkit",
                self.backend()
            ),
        )
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
