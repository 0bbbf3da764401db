//! Typed settings of the Redis backend, read from a [`LockConfig`].

use std::time::Duration;

use lockkit_core::settings::Settings as Common;
use lockkit_core::{BackendInfo, BackendKind, Error, LockConfig, Result, Tls, TlsRules};
use redis::aio::ConnectionManagerConfig;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

lockkit_core::option_keys! {
    /// The Redis backend's own options (URL query or `LockConfig::options`).
    pub enum RedisKey {
        /// `wait_replicas`: `auto` (the replicas connected now), a count, or `0`: replicas that
        /// must acknowledge an acquire, a renewal or a release (`WAIT`).
        WaitReplicas = "wait_replicas",
        /// `wait_timeout`: how long a write waits for them.
        WaitTimeout = "wait_timeout",
        /// `fence_ttl`: how long an idle lock's fencing counter is kept.
        FenceTtl = "fence_ttl",
        /// `waiter_heartbeat`: how often a queued waiter refreshes its place.
        WaiterHeartbeat = "waiter_heartbeat",
        /// `fair_heartbeat`: the older name of `waiter_heartbeat`.
        FairHeartbeat = "fair_heartbeat",
        /// `redisson_compat`: Redisson's key layouts and channels.
        RedissonCompat = "redisson_compat",
        /// `fair_lock_wait_timeout`: with `redisson_compat`, how long a fair waiter keeps its
        /// place in Redisson's fair queue after the one before it (Redisson's
        /// `fairLockWaitTimeout`).
        FairLockWaitTimeout = "fair_lock_wait_timeout",
        /// `sentinel_username`: the Sentinels' own user.
        SentinelUsername = "sentinel_username",
        /// `sentinel_password`: the Sentinels' own password.
        SentinelPassword = "sentinel_password",
    }
}

/// How many replicas a write must reach (`wait_replicas`; see `replicas.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitReplicas {
    /// Never wait (`0`).
    Off,
    /// The replicas connected now; at least one of them (`auto`, the default).
    Auto,
    /// At least this many.
    AtLeast(u32),
}

/// Redisson's default `fairLockWaitTimeout`: 5 minutes.
const REDISSON_FAIR_LOCK_WAIT: Duration = Duration::from_secs(300);

/// Which Redis deployment the URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Topology {
    /// `redis://` or `rediss://`: one server (`Settings::info`).
    Single,
    /// `redis+sentinel://`: the primary named `master` by these Sentinels; `Settings::info`
    /// holds the db and credentials for it (its address is replaced by the resolved one).
    Sentinel {
        sentinels: Vec<(String, u16)>,
        master: String,
    },
    /// `redis+cluster://`: a Redis Cluster reached through these seed nodes.
    Cluster { nodes: Vec<(String, u16)> },
}

impl Topology {
    /// The topology and the db number of `url`.
    fn from_url(url: &lockkit_core::ServerUrl) -> Result<(Topology, i64)> {
        let hosts = || {
            url.hosts
                .iter()
                .map(|h| (h.host.clone(), h.port))
                .collect::<Vec<_>>()
        };
        let db = |p: &str| -> Result<i64> {
            match p {
                "" => Ok(0),
                p => p.parse().map_err(|_| {
                    Error::config(format!(
                        "the db of a {}:// URL is a number, not {p:?}",
                        url.scheme
                    ))
                }),
            }
        };
        let path = url.path.trim_matches('/');
        match url.scheme.as_str() {
            "redis+sentinel" => {
                let (master, rest) = path.split_once('/').unwrap_or((path, ""));
                if master.is_empty() {
                    return Err(Error::config(
                        "a redis+sentinel:// URL names the master after the hosts: \
                         redis+sentinel://s1:26379,s2:26379/<master-name>[/db]",
                    ));
                }
                let topology = Topology::Sentinel {
                    sentinels: hosts(),
                    master: master.to_string(),
                };
                Ok((topology, db(rest)?))
            }
            "redis+cluster" => {
                if !path.is_empty() {
                    return Err(Error::config(format!(
                        "a redis+cluster:// URL takes no path (a cluster has only db 0), got {path:?}"
                    )));
                }
                Ok((Topology::Cluster { nodes: hosts() }, 0))
            }
            _ => {
                if url.hosts.len() != 1 {
                    return Err(Error::config(format!(
                        "a {}:// URL takes exactly one host, got {}; use redis+sentinel:// or \
                         redis+cluster:// for several",
                        url.scheme,
                        url.host_list()
                    )));
                }
                Ok((Topology::Single, db(path)?))
            }
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Topology::Cluster { .. })
    }
}

/// The settings of one [`crate::connect`].
#[derive(Clone)]
pub(crate) struct Settings {
    /// Single server, Sentinel or Cluster.
    pub(crate) topology: Topology,
    /// For the command connection (RESP2).
    pub(crate) info: ConnectionInfo,
    /// For the pub/sub connection (RESP3, so pushes arrive on a managed connection).
    pub(crate) pubsub_info: ConnectionInfo,
    pub(crate) prefix: String,
    pub(crate) lease: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) wait_replicas: WaitReplicas,
    pub(crate) wait_timeout: Duration,
    pub(crate) fence_ttl: Duration,
    /// How often a waiter refreshes its place in a queue (mutex waiters, waiting writers,
    /// semaphore waiters in compat mode); it is dropped after 3 missed beats, and a lock handed
    /// to it expires after 3 beats unless it takes it up.
    pub(crate) waiter_heartbeat: Duration,
    /// Mutexes use Redisson's `RLock` key layout and channel.
    pub(crate) redisson_compat: bool,
    /// With `redisson_compat`: how long a fair waiter that waits without a deadline keeps its
    /// place after the one before it (one with a deadline: its wait), as Redisson's are.
    pub(crate) fair_lock_wait: Duration,
    /// For rediss://: the CA to trust and the client certificate to present (`None`: plain
    /// TCP).
    pub(crate) tls: Option<Tls>,
    /// redis+sentinel://: credentials for the Sentinels themselves (`requirepass` / ACL in
    /// sentinel.conf); the URL's credentials are for the data nodes.
    pub(crate) sentinel_auth: Option<(Option<String>, lockkit_core::Secret)>,
}

impl Settings {
    /// How long a waiter's place lasts without a heartbeat (3 beats), and how long a lock handed
    /// to a waiter lasts until it takes it up.
    pub(crate) fn waiter_timeout(&self) -> Duration {
        self.waiter_heartbeat * 3
    }
}

/// The Redis backend's kind: `locks.backend() == lockkit_redis::KIND`.
pub const KIND: BackendKind = BackendKind::new("redis");

/// The TLS options of `rediss://` (Redis checks no other name than the host: no `tls_domain`).
pub(crate) const TLS: TlsRules = TlsRules {
    backend: "Redis",
    domain: false,
    needs_ca: false,
};

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // ConnectionInfo carries the password: show the address only.
        f.debug_struct("Settings")
            .field("topology", &self.topology)
            .field("addr", &self.info.addr().to_string())
            .field("db", &self.info.redis_settings().db())
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .field("command_timeout", &self.command_timeout)
            .field("wait_replicas", &self.wait_replicas)
            .field("fence_ttl", &self.fence_ttl)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Settings {
    /// Reads `cfg`, whose URL has one of `backend`'s schemes.
    pub(crate) fn from_config(cfg: &LockConfig, backend: &BackendInfo) -> Result<Settings> {
        let common = Common::<RedisKey>::parse_with_tls(cfg, backend, TLS)?;
        let url = common.url();
        let (topology, db) = Topology::from_url(url)?;
        let host = &url.hosts[0];
        let addr = if common.scheme().tls {
            tls_addr(&host.host, host.port)?
        } else {
            ConnectionAddr::Tcp(host.host.clone(), host.port)
        };
        let info = connection_info(addr, db, url)?;
        let redis = info.redis_settings().clone();
        let pubsub_info = info
            .clone()
            .set_redis_settings(redis.set_protocol(ProtocolVersion::RESP3));

        let prefix = common.prefix().to_string();
        if prefix.contains(['{', '}']) || prefix.is_empty() {
            return Err(Error::config(format!(
                "key prefix {prefix:?} must be non-empty and hold no '{{' or '}}' (they would \
                 change the cluster hash tag)"
            )));
        }
        let lease = common.lease();
        let wait_replicas = match common.get(RedisKey::WaitReplicas) {
            // On a cluster too: each round runs on the primary that owns the write's slot.
            None | Some("auto") => WaitReplicas::Auto,
            Some(_) => {
                match common.value::<u32>(RedisKey::WaitReplicas, "auto or a replica count")? {
                    Some(0) | None => WaitReplicas::Off,
                    Some(n) => WaitReplicas::AtLeast(n),
                }
            }
        };
        let sentinel_auth =
            match (
                common.get(RedisKey::SentinelUsername).map(str::to_string),
                common.get(RedisKey::SentinelPassword),
            ) {
                (None, None) => None,
                _ if !matches!(topology, Topology::Sentinel { .. }) => return Err(Error::config(
                    "options sentinel_username and sentinel_password need a redis+sentinel:// URL",
                )),
                (Some(_), None) => {
                    return Err(Error::config(
                        "option sentinel_username needs sentinel_password",
                    ))
                }
                (user, Some(pass)) => Some((user, lockkit_core::Secret::new(pass))),
            };
        let settings = Settings {
            sentinel_auth,
            topology,
            info,
            pubsub_info,
            prefix,
            lease,
            connect_timeout: common.connect_timeout(),
            command_timeout: common.command_timeout(),
            wait_replicas,
            wait_timeout: common
                .duration(RedisKey::WaitTimeout)?
                .unwrap_or(Duration::from_secs(1)),
            fence_ttl: common
                .duration(RedisKey::FenceTtl)?
                .unwrap_or(Duration::from_secs(3600)),
            // `fair_heartbeat`: its name from when only fair waiters had one.
            waiter_heartbeat: common
                .duration_or_alias(RedisKey::WaiterHeartbeat, RedisKey::FairHeartbeat)?
                .unwrap_or(Duration::from_secs(1)),
            tls: common.tls().cloned(),
            redisson_compat: common.flag(RedisKey::RedissonCompat)?.unwrap_or(false),
            fair_lock_wait: common
                .duration(RedisKey::FairLockWaitTimeout)?
                .unwrap_or(REDISSON_FAIR_LOCK_WAIT),
        };
        if settings.wait_replicas == WaitReplicas::Off
            && common.get(RedisKey::WaitTimeout).is_some()
        {
            return Err(Error::config(
                "option wait_timeout bounds the WAIT for replicas: it needs wait_replicas \
                 (auto or a count), which is off here",
            ));
        }
        if settings.wait_timeout.is_zero() {
            return Err(Error::config(
                "option wait_timeout must be positive (WAIT 0 would wait forever)",
            ));
        }
        if !settings.redisson_compat && common.get(RedisKey::FairLockWaitTimeout).is_some() {
            return Err(Error::config(
                "option fair_lock_wait_timeout is for Redisson's fair queue: it needs \
                 redisson_compat=true (native fair waiters keep their place by waiter_heartbeat)",
            ));
        }
        for (what, d) in [
            ("lease", settings.lease),
            ("command_timeout", settings.command_timeout),
            ("connect_timeout", settings.connect_timeout),
            ("fence_ttl", settings.fence_ttl),
            ("waiter_heartbeat", settings.waiter_heartbeat),
            ("fair_lock_wait_timeout", settings.fair_lock_wait),
        ] {
            if d < Duration::from_millis(1) {
                return Err(Error::config(format!("option {what} must be at least 1ms")));
            }
        }
        Ok(settings)
    }
}

#[cfg(feature = "tls")]
fn tls_addr(host: &str, port: u16) -> Result<ConnectionAddr> {
    Ok(ConnectionAddr::TcpTls {
        host: host.to_string(),
        port,
        insecure: false,
        tls_params: None,
    })
}

#[cfg(not(feature = "tls"))]
fn tls_addr(_: &str, _: u16) -> Result<ConnectionAddr> {
    Err(Error::config(
        "rediss:// needs TLS support: enable the `tls` feature of lockkit-redis",
    ))
}

/// The command connection's settings for one server at `addr`: db `db`, the URL's credentials,
/// and [`tcp_settings`].
pub(crate) fn connection_info(
    addr: ConnectionAddr,
    db: i64,
    url: &lockkit_core::ServerUrl,
) -> Result<ConnectionInfo> {
    let base = addr
        .into_connection_info()
        .map_err(|e| Error::config(format!("bad Redis address: {e}")))?
        .set_tcp_settings(tcp_settings());
    let mut redis = base.redis_settings().clone().set_db(db);
    if let Some(u) = &url.username {
        redis = redis.set_username(u);
    }
    if let Some(p) = &url.password {
        redis = redis.set_password(p.expose());
    }
    Ok(base.set_redis_settings(redis))
}

/// The sockets' settings: `TCP_NODELAY`, as Redisson, Lettuce and Jedis set it. redis-rs leaves
/// Nagle's algorithm on, which holds a request back while another is unanswered on the same
/// connection. Measured with 8 tasks sharing one connection, each running `try_lock`'s and
/// `release`'s scripts on a lock of its own (6 runs each way, alternating): p50 740-1330 µs per
/// cycle with Nagle, 590-810 µs without, and 6-77 % more cycles a second. A lone request, as in
/// `benches/redis.rs`, is not held back either way.
pub(crate) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// The reconnect policy of a managed connection.
pub(crate) fn manager_config(settings: &Settings) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(settings.connect_timeout))
        .set_response_timeout(Some(settings.command_timeout))
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(500))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Settings> {
        Settings::from_config(&LockConfig::new(url), &crate::INFO)
    }

    /// `fair_heartbeat` is `waiter_heartbeat`'s older name: given both, one was never read.
    #[test]
    fn the_heartbeat_and_its_old_name_must_agree() {
        let e = parse("redis://h?waiter_heartbeat=2s&fair_heartbeat=banana").unwrap_err();
        assert_eq!(e.kind(), lockkit_core::ErrorKind::Config, "{e}");
        let e = parse("redis://h?waiter_heartbeat=2s&fair_heartbeat=3s").unwrap_err();
        assert!(e.to_string().contains("disagree"), "{e}");
        let s = parse("redis://h?waiter_heartbeat=2s&fair_heartbeat=2s").unwrap();
        assert_eq!(s.waiter_heartbeat, Duration::from_secs(2));
        let s = parse("redis://h?fair_heartbeat=3s").unwrap();
        assert_eq!(s.waiter_heartbeat, Duration::from_secs(3));
    }

    #[test]
    fn url_table() {
        let s = parse("redis://alice:pw@127.0.0.1:7000/3?prefix=app&lease=10s&command_timeout=2s")
            .unwrap();
        assert_eq!(s.info.redis_settings().db(), 3);
        assert_eq!(s.info.redis_settings().username(), Some("alice"));
        assert_eq!(s.info.redis_settings().password(), Some("pw"));
        assert_eq!(
            s.pubsub_info.redis_settings().protocol(),
            ProtocolVersion::RESP3
        );
        // Nagle's algorithm off on both connections.
        assert!(s.info.tcp_settings().nodelay());
        assert!(s.pubsub_info.tcp_settings().nodelay());
        assert_eq!(s.prefix, "app");
        assert_eq!(s.lease, Duration::from_secs(10));
        assert_eq!(s.command_timeout, Duration::from_secs(2));
        assert_eq!(s.wait_replicas, WaitReplicas::Auto);
        assert!(!format!("{s:?}").contains("pw"));
        // A cluster waits for each slot's replicas, by default too.
        let s = parse("redis+cluster://h1").unwrap();
        assert_eq!(s.wait_replicas, WaitReplicas::Auto);
        let s = parse("redis+cluster://h1?wait_replicas=1&wait_timeout=50ms").unwrap();
        assert_eq!(s.wait_replicas, WaitReplicas::AtLeast(1));
        let s = parse("redis+cluster://h1?wait_replicas=0").unwrap();
        assert_eq!(s.wait_replicas, WaitReplicas::Off);
        let s = parse("redis://h1?wait_replicas=0").unwrap();
        assert_eq!(s.wait_replicas, WaitReplicas::Off);
        let s = parse("redis://h1?wait_replicas=auto").unwrap();
        assert_eq!(s.wait_replicas, WaitReplicas::Auto);

        let s = parse("redis://127.0.0.1?wait_replicas=2&wait_timeout=50ms&fence_ttl=1m").unwrap();
        assert_eq!(s.wait_replicas, WaitReplicas::AtLeast(2));
        assert_eq!(s.wait_timeout, Duration::from_millis(50));
        assert_eq!(s.fence_ttl, Duration::from_secs(60));
        assert_eq!(s.prefix, "lockkit");
        assert_eq!(s.lease, lockkit_core::DEFAULT_LEASE);

        for bad in [
            "redis://127.0.0.1/notadb",
            "redis://127.0.0.1?bogus=1",
            "redis://127.0.0.1?wait_replicas=x",
            "redis://127.0.0.1?prefix={x}",
            "redis://h1,h2",
            "redis://127.0.0.1?lease=soon",
            "redis+sentinel://s1,s2",
            "redis+sentinel://s1/lockkit/x",
            "redis+cluster://h1,h2/1",
            "redis://h1?sentinel_password=x",
            "redis+sentinel://s1/m?sentinel_username=u",
        ] {
            let e = parse(bad).err().unwrap_or_else(|| panic!("{bad} parsed"));
            assert_eq!(e.kind(), lockkit_core::ErrorKind::Config, "{bad}");
        }
    }

    #[test]
    fn sentinel_and_cluster_urls() {
        let s = parse("redis+sentinel://:pw@s1,s2:26380/lockkit/2?prefix=x").unwrap();
        assert_eq!(
            s.topology,
            Topology::Sentinel {
                sentinels: vec![("s1".into(), 26379), ("s2".into(), 26380)],
                master: "lockkit".into()
            }
        );
        assert_eq!(s.info.redis_settings().db(), 2);
        assert_eq!(s.info.redis_settings().password(), Some("pw"));
        assert!(!format!("{s:?}").contains("pw"));
        let s = parse("redis+sentinel://s1/lockkit").unwrap();
        assert_eq!(s.info.redis_settings().db(), 0);
        assert!(s.sentinel_auth.is_none());
        let s = parse("redis+sentinel://s1/lockkit?sentinel_password=s3cret").unwrap();
        let (user, pass) = s.sentinel_auth.as_ref().unwrap();
        assert_eq!((user.as_deref(), pass.expose()), (None, "s3cret"));
        assert!(!format!("{s:?}").contains("s3cret"));
        let s = parse("redis+cluster://h1:7000,h2").unwrap();
        assert_eq!(
            s.topology,
            Topology::Cluster {
                nodes: vec![("h1".into(), 7000), ("h2".into(), 6379)]
            }
        );
        assert!(s.topology.is_cluster());
    }

    #[test]
    fn tls_options() {
        let e = parse("redis://127.0.0.1?tls_ca=/ca.pem").err().unwrap();
        assert!(e.to_string().contains("rediss://"), "{e}");
        #[cfg(feature = "tls")]
        {
            let e = parse("rediss://127.0.0.1?tls_cert=/c.pem").err().unwrap();
            assert!(e.to_string().contains("together"), "{e}");
            let e = parse("rediss://127.0.0.1?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/secret.pem")
                .err()
                .unwrap();
            assert!(e.to_string().contains("cannot read tls_ca"), "{e}");
            assert!(parse("rediss://127.0.0.1").unwrap().tls.is_some());
            assert!(parse("redis://127.0.0.1").unwrap().tls.is_none());
        }
    }

    #[test]
    fn config_options_win() {
        let mut cfg = LockConfig::new("redis://127.0.0.1?prefix=url");
        cfg.key_prefix = Some("cfg".into());
        cfg.options.insert("wait_replicas".into(), "1".into());
        let s = Settings::from_config(&cfg, &crate::INFO).unwrap();
        assert_eq!(s.prefix, "cfg");
        assert_eq!(s.wait_replicas, WaitReplicas::AtLeast(1));
    }
}
