//! Typed settings of the Redlock backend, read from a `redlock://h1:p1,h2:p2,h3:p3` URL.

use std::time::Duration;

use lockkit_core::settings::Settings as Common;
use lockkit_core::{BackendInfo, BackendKind, Error, LockConfig, Result};
use redis::{ConnectionAddr, ConnectionInfo};

lockkit_core::option_keys! {
    /// The Redlock backend's own options (URL query or `LockConfig::options`).
    pub enum RedlockKey {
        /// `node_timeout`: how long one master may take to answer one request of an acquire
        /// (Redlock's short per-node timeout; a master slower than this counts as failed).
        NodeTimeout = "node_timeout",
        /// `fence_ttl`: how long an idle lock's fencing counter is kept on each master.
        FenceTtl = "fence_ttl",
    }
}

/// The Redlock backend's kind: `locks.backend() == lockkit_redis::REDLOCK_KIND`.
pub const REDLOCK_KIND: BackendKind = BackendKind::new("redlock");

/// The settings of one Redlock client.
#[derive(Clone)]
pub(crate) struct Settings {
    /// One per master, in the URL's order, each with the URL's db and credentials.
    pub(crate) masters: Vec<ConnectionInfo>,
    pub(crate) prefix: String,
    pub(crate) lease: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) node_timeout: Duration,
    pub(crate) fence_ttl: Duration,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // ConnectionInfo carries the password: show the addresses only.
        let masters: Vec<String> = self.masters.iter().map(|m| m.addr().to_string()).collect();
        f.debug_struct("Settings")
            .field("masters", &masters)
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .field("node_timeout", &self.node_timeout)
            .field("fence_ttl", &self.fence_ttl)
            .finish()
    }
}

impl Settings {
    /// How long a release latch lives: a release whose reply was lost is sent again within the
    /// same node timeout, so ten seconds is plenty.
    pub(crate) fn latch_ttl(&self) -> Duration {
        (self.node_timeout * 8).max(Duration::from_secs(10))
    }

    /// Reads `cfg`, whose URL has one of `backend`'s schemes. Two names of one server are
    /// found at connect (`Masters::connect` compares their `run_id`s), not here.
    pub(crate) fn from_config(cfg: &LockConfig, backend: &BackendInfo) -> Result<Settings> {
        let common = Common::<RedlockKey>::parse(cfg, backend)?;
        let url = common.url();
        let path = url.path.trim_matches('/');
        let db: i64 = match path {
            "" => 0,
            p => p.parse::<u16>().map(i64::from).map_err(|_| {
                Error::config(format!(
                    "the db of a redlock:// URL (the same on every master) is a number from 0, \
                     not {p:?}"
                ))
            })?,
        };
        let mut masters = Vec::with_capacity(url.hosts.len());
        for (i, h) in url.hosts.iter().enumerate() {
            if url.hosts[..i]
                .iter()
                .any(|o| o.host.eq_ignore_ascii_case(&h.host) && o.port == h.port)
            {
                return Err(Error::config(format!(
                    "redlock:// names the master {}:{} twice; each must be an independent \
                     server, or one server would count twice towards the quorum",
                    h.host, h.port
                )));
            }
            let addr = ConnectionAddr::Tcp(h.host.clone(), h.port);
            masters.push(crate::config::connection_info(addr, db, url)?);
        }
        let prefix = common.prefix().to_string();
        if prefix.contains(['{', '}']) || prefix.is_empty() {
            return Err(Error::config(format!(
                "key prefix {prefix:?} must be non-empty and hold no '{{' or '}}'"
            )));
        }
        let lease = common.lease();
        let node_timeout = match common.duration(RedlockKey::NodeTimeout)? {
            Some(d) => d,
            // Redlock asks for a timeout small next to the lease: a hundredth of it, within
            // 50 ms (a loaded machine's round trip) and 1 s.
            None => (lease / 100).clamp(Duration::from_millis(50), Duration::from_secs(1)),
        };
        let settings = Settings {
            masters,
            prefix,
            lease,
            connect_timeout: common.connect_timeout(),
            command_timeout: common.command_timeout(),
            node_timeout,
            fence_ttl: common
                .duration(RedlockKey::FenceTtl)?
                .unwrap_or(Duration::from_secs(3600)),
        };
        if settings.node_timeout < Duration::from_millis(1) {
            return Err(Error::config("option node_timeout must be at least 1ms"));
        }
        // Tokens increase after the counter expired because the time floor (whole seconds) has
        // moved on by then, which takes a counter that outlives a second without acquires.
        if settings.fence_ttl < Duration::from_secs(1) {
            return Err(Error::config(
                "option fence_ttl must be at least 1s on redlock:// (tokens after an expired \
                 counter rely on a floor of whole seconds)",
            ));
        }
        if settings.node_timeout >= settings.lease {
            return Err(Error::config(format!(
                "option node_timeout ({:?}) must be shorter than the lease ({:?}): an acquire \
                 that waits that long for a master has no validity left",
                settings.node_timeout, settings.lease
            )));
        }
        Ok(settings)
    }

    /// How many masters make a majority.
    pub(crate) fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Settings> {
        Settings::from_config(&LockConfig::new(url), &crate::REDLOCK)
    }

    #[test]
    fn url_table() {
        let s = parse("redlock://:pw@h1,h2:7001,h3:7002/2?node_timeout=20ms&lease=10s").unwrap();
        assert_eq!(s.masters.len(), 3);
        assert_eq!(s.quorum(), 2);
        assert_eq!(s.masters[0].addr().to_string(), "h1:6379");
        assert_eq!(s.masters[2].addr().to_string(), "h3:7002");
        assert!(s
            .masters
            .iter()
            .all(|m| m.redis_settings().db() == 2 && m.redis_settings().password() == Some("pw")));
        assert_eq!(s.node_timeout, Duration::from_millis(20));
        assert!(!format!("{s:?}").contains("pw"));
        // Defaults: a hundredth of the lease, within 50 ms and 1 s.
        let s = parse("redlock://h1,h2,h3,h4,h5").unwrap();
        assert_eq!(s.quorum(), 3);
        assert_eq!(s.node_timeout, Duration::from_millis(300));
        assert_eq!(s.prefix, "lockkit");
        let s = parse("redlock://h1?lease=1s").unwrap();
        assert_eq!(s.node_timeout, Duration::from_millis(50));
        for bad in [
            "redlock://h1,h2,H1:6379",
            "redlock://h1/x",
            "redlock://h1?wait_replicas=1",
            "redlock://h1?tls_ca=/ca.pem",
            "redlock://h1?node_timeout=0ms",
            "redlock://h1?fence_ttl=500ms",
            "redlock://h1/-1",
            "redlock://h1?lease=1s&node_timeout=2s",
            "redlock://h1?prefix={x}",
        ] {
            let e = parse(bad).err().unwrap_or_else(|| panic!("{bad} parsed"));
            assert_eq!(e.kind(), lockkit_core::ErrorKind::Config, "{bad}");
        }
    }
}
