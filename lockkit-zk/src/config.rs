//! Typed configuration of the ZooKeeper backend, read from a [`LockConfig`].

use std::fmt;
use std::time::Duration;

use lockkit_core::settings::Settings;
use lockkit_core::{BackendInfo, BackendKind, Error, LockConfig, Result, Secret};
use zookeeper_client as zk;

lockkit_core::option_keys! {
    /// The ZooKeeper backend's own options (URL query or `LockConfig::options`).
    pub enum ZkKey {
        /// `session_timeout`: the handle's default lease under its ZooKeeper name: how long
        /// ZooKeeper keeps our ephemeral nodes after it last heard from us.
        SessionTimeout = "session_timeout",
        /// `acl`: `open`, `creator` or `creator_read` (the default with credentials).
        Acl = "acl",
        /// `election_layout`: `latch` (Curator's `LeaderLatch`, the default) or `selector`
        /// (Curator's `LeaderSelector`: its `InterProcessMutex` nodes).
        ElectionLayout = "election_layout",
    }
}

/// Which Curator recipe an election's nodes follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ElectionLayout {
    /// `LeaderLatch`: `_c_<uuid>-latch-<seq>`.
    Latch,
    /// `LeaderSelector`: the mutex's `_c_<uuid>-lock-<seq>`.
    Selector,
}

impl ElectionLayout {
    fn parse(s: &str) -> Result<ElectionLayout> {
        match s {
            "latch" => Ok(ElectionLayout::Latch),
            "selector" => Ok(ElectionLayout::Selector),
            other => Err(Error::config(format!(
                "election_layout={other:?}: expected latch or selector"
            ))),
        }
    }

    /// The marker of its candidates' node names.
    pub(crate) fn marker(self) -> &'static str {
        match self {
            ElectionLayout::Latch => crate::node::LATCH_MARKER,
            ElectionLayout::Selector => crate::node::MUTEX_MARKER,
        }
    }
}

/// Which ACL the nodes we create carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AclMode {
    /// `world:anyone` may do everything (ZooKeeper's open ACL).
    Open,
    /// Only identities with the creator's credentials may do anything.
    Creator,
    /// The creator may do everything; everyone may read (list waiters, inspect).
    CreatorRead,
}

impl AclMode {
    fn parse(s: &str) -> Result<AclMode> {
        Ok(match s {
            "open" => AclMode::Open,
            "creator" => AclMode::Creator,
            "creator_read" => AclMode::CreatorRead,
            other => {
                return Err(Error::config(format!(
                    "acl={other:?}: expected open, creator or creator_read"
                )))
            }
        })
    }

    pub(crate) fn acls(self) -> Vec<zk::Acl> {
        use zk::{Acl, AuthId, Permission};
        match self {
            AclMode::Open => vec![Acl::new(Permission::ALL, AuthId::anyone())],
            AclMode::Creator => vec![Acl::new(Permission::ALL, AuthId::authed())],
            AclMode::CreatorRead => vec![
                Acl::new(Permission::ALL, AuthId::authed()),
                Acl::new(Permission::READ, AuthId::anyone()),
            ],
        }
    }
}

/// Everything needed to open a session and lay out nodes.
#[derive(Clone)]
pub(crate) struct ZkConfig {
    /// `host:port,host:port` for the client.
    pub hosts: String,
    /// Absolute path under which every node lives: `/<chroot>/<prefix>`.
    pub root: String,
    /// The session timeout asked for: the lease of every lock of the session.
    pub session_timeout: Duration,
    /// The bound on opening a session (all hosts together).
    pub connect_timeout: Duration,
    pub command_timeout: Duration,
    /// Digest credentials, `user:password`.
    pub digest: Option<(String, Secret)>,
    pub acl: AclMode,
    /// The layout of elections' nodes.
    pub election_layout: ElectionLayout,
    /// TLS to the secure client port, when any `tls_*` option is given.
    pub tls: Option<lockkit_core::Tls>,
    /// The hosts, one by one (for the TLS probe).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub addrs: Vec<lockkit_core::HostPort>,
}

impl fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkConfig")
            .field("hosts", &self.hosts)
            .field("root", &self.root)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("user", &self.digest.as_ref().map(|(u, _)| u))
            .field("acl", &self.acl)
            .field("election_layout", &self.election_layout)
            .field("tls", &self.tls)
            .finish()
    }
}

fn join_path(parts: &[&str]) -> String {
    let mut out = String::new();
    for part in parts {
        for seg in part.split('/').filter(|s| !s.is_empty()) {
            out.push('/');
            out.push_str(seg);
        }
    }
    out
}

/// The ZooKeeper backend's kind: `locks.backend() == lockkit_zk::KIND`.
pub const KIND: BackendKind = BackendKind::new("zk");

impl ZkConfig {
    /// Reads `cfg`, whose URL has `backend`'s scheme.
    pub(crate) fn from_lock_config(cfg: &LockConfig, backend: &BackendInfo) -> Result<ZkConfig> {
        let settings = Settings::<ZkKey>::parse_with_tls(cfg, backend, crate::tls::RULES)?;
        let url = settings.url();
        let session_timeout = settings.lease_or_alias(ZkKey::SessionTimeout)?;
        let connect_timeout = settings.connect_timeout();
        let command_timeout = settings.command_timeout();
        let digest = match (url.username.clone(), url.password.clone()) {
            (Some(u), Some(p)) => Some((u, p)),
            (Some(u), None) => Some((u, Secret::new(""))),
            (None, Some(_)) => {
                return Err(Error::config(
                    "a ZooKeeper digest identity needs a user name, not only a password",
                ))
            }
            (None, None) => None,
        };
        let acl = match settings.get(ZkKey::Acl) {
            Some(a) => AclMode::parse(a)?,
            None if digest.is_some() => AclMode::CreatorRead,
            None => AclMode::Open,
        };
        if acl != AclMode::Open && digest.is_none() {
            return Err(Error::config(
                "acl=creator and acl=creator_read need credentials (zk://user:password@…)",
            ));
        }
        let election_layout = match settings.get(ZkKey::ElectionLayout) {
            Some(l) => ElectionLayout::parse(l)?,
            None => ElectionLayout::Latch,
        };
        let tls = settings.tls().cloned();
        if let Some(tls) = &tls {
            crate::tls::check(tls)?;
        }
        let root = join_path(&[&url.path, settings.prefix()]);
        if root.is_empty() {
            return Err(Error::config(
                "the ZooKeeper backend needs a non-empty chroot or key prefix",
            ));
        }
        Ok(ZkConfig {
            hosts: url.host_list(),
            root,
            session_timeout,
            connect_timeout,
            command_timeout,
            digest,
            acl,
            election_layout,
            addrs: url.hosts.clone(),
            tls,
        })
    }

    /// The same config for a session of timeout `lease`.
    pub(crate) fn with_session_timeout(&self, lease: Duration) -> ZkConfig {
        ZkConfig {
            session_timeout: lease,
            ..self.clone()
        }
    }

    /// Opens a new session.
    pub(crate) async fn connect(&self) -> Result<zk::Client> {
        let deadline = tokio::time::Instant::now() + self.connect_timeout;
        let mut attempt = 1;
        loop {
            let connector = self.connector()?;
            let tls = self.tls.is_some();
            let connecting = async move {
                #[cfg(feature = "tls")]
                if tls {
                    return connector.secure_connect(&self.hosts).await;
                }
                let _ = tls;
                connector.connect(&self.hosts).await
            };
            let failed = match tokio::time::timeout_at(deadline, connecting).await {
                Ok(Ok(client)) => return Ok(client),
                Ok(Err(e)) => e,
                Err(_) => {
                    return Err(Error::new(
                        lockkit_core::ErrorKind::Connection,
                        format!(
                            "no ZooKeeper session with {} within {:?}",
                            self.hosts, self.connect_timeout
                        ),
                    ))
                }
            };
            #[cfg(feature = "tls")]
            if let (zk::Error::NoHosts, Some(tls)) = (&failed, &self.tls) {
                let limit = self.connect_timeout;
                if let Some(why) = tls.refusal(&self.addrs, limit).await {
                    return Err(Error::new(
                        lockkit_core::ErrorKind::Auth,
                        format!("zookeeper: TLS with {} refused: {why}", self.hosts),
                    )
                    .with_retryable(false));
                }
                // The handshake works, yet zookeeper-client 0.11 now and then cannot parse the
                // connect response over TLS ("insufficient buf", about 1 connect in 50 against
                // ZooKeeper 3.8): a transient failure, so try again while time is left.
                if attempt < CONNECT_ATTEMPTS && tokio::time::Instant::now() < deadline {
                    attempt += 1;
                    tracing::debug!(backend = "zk", hosts = %self.hosts, "lockkit: TLS connect failed; retrying");
                    continue;
                }
            }
            // A plain connect that failed although a server accepts connections (a connect
            // answer the client could not read, a connection reset on a loaded server): after
            // one pass over the hosts zookeeper-client reports `NoHosts` at once, so try again
            // while time is left. A server that is down refuses the probe, and the error is
            // reported at once.
            if matches!(failed, zk::Error::NoHosts)
                && self.tls.is_none()
                && attempt < CONNECT_ATTEMPTS
                && accepts(&self.addrs, deadline).await
            {
                attempt += 1;
                tracing::debug!(backend = "zk", hosts = %self.hosts, "lockkit: connect failed; retrying");
                continue;
            }
            return Err(crate::error::map(
                failed,
                &format!("cannot open a session with {}", self.hosts),
            ));
        }
    }

    /// The timeout of one connection: how long the client waits for a server to answer a
    /// connect, and how long a silent connection may stay silent before the client gives up on
    /// it (zookeeper-client uses one setting for both). A quarter of the session timeout at most,
    /// so that after a server hangs the client can notice, try that same server again (it
    /// reshuffles the hosts and may pick it first), and still resume the session through another
    /// one well before the guards' deadline (see `session.rs`); with the whole
    /// `connect_timeout` (5 s) one retry of a hung server alone outlasted a 2 s or even a 10 s
    /// session.
    pub(crate) fn connection_timeout(&self) -> Duration {
        self.connect_timeout.min(self.session_timeout / 4)
    }

    fn connector(&self) -> Result<zk::Connector> {
        let mut connector = zk::Client::connector()
            .with_session_timeout(self.session_timeout)
            .with_connection_timeout(self.connection_timeout())
            .with_fail_eagerly();
        if let Some((user, pass)) = &self.digest {
            connector =
                connector.with_auth("digest", format!("{user}:{}", pass.expose()).as_bytes());
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            connector = connector.with_tls(crate::tls::options(tls)?);
        }
        Ok(connector)
    }
}

/// Connects tried before a transient failure is reported (see [`ZkConfig::connect`]).
const CONNECT_ATTEMPTS: u32 = 3;

/// Whether one of `addrs` accepts a TCP connection before `deadline`.
async fn accepts(addrs: &[lockkit_core::HostPort], deadline: tokio::time::Instant) -> bool {
    for a in addrs {
        let addr = (a.host.as_str(), a.port);
        let probe = tokio::time::timeout_at(deadline, tokio::net::TcpStream::connect(addr));
        if matches!(probe.await, Ok(Ok(_))) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockkit_core::ErrorKind;

    fn parse(url: &str) -> Result<ZkConfig> {
        ZkConfig::from_lock_config(&LockConfig::new(url), &crate::INFO)
    }

    #[test]
    fn url_table() {
        let c = parse("zk://h1:1,h2:2/app/x?session_timeout=3s").unwrap();
        assert_eq!(c.hosts, "h1:1,h2:2");
        assert_eq!(c.root, "/app/x/lockkit");
        assert_eq!(c.session_timeout, Duration::from_secs(3));
        assert_eq!(c.acl, AclMode::Open);
        let c = parse("zk://u:p@h1?prefix=a/b&acl=creator").unwrap();
        assert_eq!(c.root, "/a/b");
        assert_eq!(c.acl, AclMode::Creator);
        assert_eq!(c.digest.as_ref().unwrap().1.expose(), "p");
        assert!(!format!("{c:?}").contains("\"p\""));
        let c = parse("zk://u:p@h1").unwrap();
        assert_eq!(c.acl, AclMode::CreatorRead);
        assert_eq!(c.session_timeout, lockkit_core::DEFAULT_LEASE);
        let c = parse("zk://h1?lease=4s").unwrap();
        assert_eq!(c.session_timeout, Duration::from_secs(4));
        assert_eq!(c.election_layout, ElectionLayout::Latch);
        let c = parse("zk://h1?election_layout=selector").unwrap();
        assert_eq!(c.election_layout.marker(), crate::node::MUTEX_MARKER);
        for bad in [
            "zk://h1?session_timeout=soon",
            "zk://h1?acl=creator",
            "zk://h1?acl=weird",
            "zk://:p@h1",
            "redis://h1",
            "zk://h1?session_timout=2s",
            "zk://h1?lease=2s&session_timeout=3s",
            "zk://h1?election_layout=Latch",
        ] {
            assert_eq!(parse(bad).unwrap_err().kind(), ErrorKind::Config, "{bad}");
        }
    }
}
