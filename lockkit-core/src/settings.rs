//! The settings every backend shares, read once from a [`LockConfig`], and its typed option keys.
//!
//! Each backend names its options in an enum made by [`option_keys!`](crate::option_keys) (object_store's
//! `AmazonS3ConfigKey: FromStr` is the model), and reads them through [`Settings::parse`]. A key
//! that is neither one of the [`CommonKey`]s nor one of the backend's is a
//! [`Config`](crate::ErrorKind::Config) error naming the key and every known one, so a
//! misspelt option is never silently ignored.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::backend_info::{BackendInfo, SchemeInfo};
use crate::config::LockConfig;
use crate::error::{Error, Result};
use crate::options::{lease_problem, DEFAULT_LEASE};
use crate::tls::{Tls, TlsKey, TlsRules};

pub use crate::option_key::{unknown_key, unknown_key_among, CommonKey, NoKey, OptionKey};
use crate::url::ServerUrl;

/// The default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default command timeout.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// One setting given under two names (`a` and `b`): the value, refused when they disagree.
fn agreeing(
    a_name: &str,
    a: Option<Duration>,
    b_name: &str,
    b: Option<Duration>,
) -> Result<Option<Duration>> {
    match (a, b) {
        (Some(a), Some(b)) if a != b => Err(Error::config(format!(
            "{a_name} {a:?} and {b_name} {b:?} disagree; they are the same setting here: give one"
        ))),
        (a, b) => Ok(a.or(b)),
    }
}

/// Refuses a configured lease that is too short, as a `Config` error.
fn check_lease(lease: Duration) -> Result<()> {
    lease_problem(lease).map_or(Ok(()), |why| Err(Error::config(why)))
}

/// [`unknown_key`] for a backend that also takes the TLS options `tls`.
fn unknown_key_of<K: OptionKey>(key: &str, tls: &[TlsKey]) -> Error {
    let tls: Vec<&str> = tls.iter().map(|k| k.as_str()).collect();
    unknown_key_among::<K>(key, &tls)
}

/// A backend's settings: the common ones resolved, its own ones checked and typed.
#[derive(Clone)]
pub struct Settings<K: OptionKey> {
    url: ServerUrl,
    scheme: &'static SchemeInfo,
    prefix: Option<String>,
    lease: Option<Duration>,
    connect_timeout: Duration,
    command_timeout: Duration,
    /// The backend's own options: `LockConfig::options` first, then the URL's.
    own: Vec<(K, String)>,
    /// TLS as the options and the URL's scheme ask (`None`: plain TCP).
    tls: Option<Tls>,
}

impl<K: OptionKey> fmt::Debug for Settings<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let own: Vec<(&str, &str)> = self
            .own
            .iter()
            .map(|(k, v)| {
                let shown = if crate::redact::is_secret_param(k.as_str()) {
                    "***"
                } else {
                    v.as_str()
                };
                (k.as_str(), shown)
            })
            .collect();
        f.debug_struct("Settings")
            .field("url", &self.url)
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("options", &own)
            .field("tls", &self.tls)
            .finish()
    }
}

impl<K: OptionKey> Settings<K> {
    /// Reads `cfg` for `backend`: its URL (with the config's credentials applied,
    /// [resolved](ServerUrl::resolve) against the backend's schemes), the common options and the
    /// backend's own `K`s. Any other key, in the URL or in `cfg.options`, is an error.
    pub fn parse(cfg: &LockConfig, backend: &BackendInfo) -> Result<Self> {
        Self::parse_taking(cfg, backend, None)
    }

    /// Like [`parse`](Self::parse), for a backend that also takes the TLS options `rules`
    /// names: their PEM files are read now, and TLS options the URL cannot use are an error.
    /// The result is [`tls`](Self::tls).
    pub fn parse_with_tls(
        cfg: &LockConfig,
        backend: &BackendInfo,
        rules: TlsRules,
    ) -> Result<Self> {
        Self::parse_taking(cfg, backend, Some(rules))
    }

    fn parse_taking(
        cfg: &LockConfig,
        backend: &BackendInfo,
        rules: Option<TlsRules>,
    ) -> Result<Self> {
        let mut url = cfg.server_url()?;
        let scheme = url.resolve(backend)?;
        let tls_keys = rules.map_or(&[][..], |r| r.keys());
        let mut common: Vec<(CommonKey, String)> = Vec::new();
        let mut own: Vec<(K, String)> = Vec::new();
        let mut tls: Vec<(TlsKey, String)> = Vec::new();
        // A key given twice in the URL would have one of its values never read, not even checked.
        for (i, (k, _)) in url.params.iter().enumerate() {
            if url.params[..i].iter().any(|(seen, _)| seen == k) {
                return Err(Error::config(format!(
                    "option {k:?} is given twice in the URL; give it once"
                )));
            }
        }
        // Config options first: they win over the URL's.
        let pairs = cfg
            .options
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(
                url.params
                    .iter()
                    .rev()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            );
        for (k, v) in pairs {
            if let Some(c) = CommonKey::lookup(k) {
                common.push((c, v.to_string()));
            } else if let Some(o) = K::lookup(k) {
                own.push((o, v.to_string()));
            } else if let Some(t) = TlsKey::lookup(k).filter(|t| tls_keys.contains(t)) {
                if !tls.iter().any(|(seen, _)| *seen == t) {
                    tls.push((t, v.to_string()));
                }
            } else {
                return Err(unknown_key_of::<K>(k, tls_keys));
            }
        }
        let first = |key: CommonKey| common.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
        let duration = |key: CommonKey| -> Result<Option<Duration>> {
            first(key)
                .map(|v| parse_duration(key.as_str(), v))
                .transpose()
        };
        let lease = match cfg.lease {
            Some(l) => Some(l),
            None => duration(CommonKey::Lease)?,
        };
        if let Some(l) = lease {
            check_lease(l)?;
        }
        // A timeout no longer than the longest lease: a larger one is a typo, and it would
        // overflow what the servers take (Redis's latch TTL is a multiple of it, in ms).
        let positive = |what: &str, d: Duration| {
            if d.is_zero() {
                Err(Error::config(format!("{what} must be longer than zero")))
            } else if d > crate::MAX_LEASE {
                Err(Error::config(format!(
                    "{what} {d:?} is longer than {} days",
                    crate::MAX_LEASE.as_secs() / 86_400
                )))
            } else {
                Ok(d)
            }
        };
        let connect_timeout = positive(
            "connect_timeout",
            cfg.connect_timeout
                .or(duration(CommonKey::ConnectTimeout)?)
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT),
        )?;
        let command_timeout = positive(
            "command_timeout",
            cfg.command_timeout
                .or(duration(CommonKey::CommandTimeout)?)
                .unwrap_or(DEFAULT_COMMAND_TIMEOUT),
        )?;
        let prefix = cfg
            .key_prefix
            .clone()
            .or_else(|| first(CommonKey::Prefix).cloned());
        let tls = match rules {
            Some(rules) => rules.resolve(backend.schemes, url.scheme.as_str(), &tls)?,
            None => None,
        };
        Ok(Settings {
            url,
            scheme,
            prefix,
            lease,
            connect_timeout,
            command_timeout,
            own,
            tls,
        })
    }

    /// The parsed URL, resolved: its scheme the backend's name for it, every host with a port.
    pub fn url(&self) -> &ServerUrl {
        &self.url
    }

    /// The URL's scheme, as the backend describes it.
    pub fn scheme(&self) -> &'static SchemeInfo {
        self.scheme
    }

    /// Refuses a user name or password (in the URL or the config) for a backend with nobody to
    /// show them to, so a credential is never silently dropped.
    pub fn refuse_credentials(&self, scheme: &str) -> Result<()> {
        if self.url.username.is_some() || self.url.password.is_some() {
            return Err(Error::config(format!(
                "{scheme}:// takes no user name or password: there is no server to check them"
            )));
        }
        Ok(())
    }

    /// The key prefix, `lockkit` unless set.
    pub fn prefix(&self) -> &str {
        self.prefix.as_deref().unwrap_or("lockkit")
    }

    /// The key prefix if one was set explicitly.
    pub fn explicit_prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }

    /// The handle's default lease: `LockConfig::lease`, else the `lease` option, else 30 s.
    pub fn lease(&self) -> Duration {
        self.lease.unwrap_or(DEFAULT_LEASE)
    }

    /// The handle's default lease where the backend also takes an older name for it
    /// (`session_timeout` on ZooKeeper, `lease_ttl` on etcd): the two must agree when both
    /// are given.
    pub fn lease_or_alias(&self, alias: K) -> Result<Duration> {
        let aliased = self.duration(alias)?;
        match agreeing("lease", self.lease, alias.as_str(), aliased)? {
            Some(l) => {
                check_lease(l)?;
                Ok(l)
            }
            None => Ok(DEFAULT_LEASE),
        }
    }

    /// The backend duration option `key`, which also goes by an older name `alias`: the two
    /// must agree when both are given.
    pub fn duration_or_alias(&self, key: K, alias: K) -> Result<Option<Duration>> {
        let (a, b) = (self.duration(key)?, self.duration(alias)?);
        agreeing(key.as_str(), a, alias.as_str(), b)
    }

    /// How long to wait for a connection.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// How long one server command may take.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// The TLS to connect with (`None`: plain TCP), as [`parse_with_tls`](Self::parse_with_tls)
    /// found it.
    pub fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    /// The raw value of the backend option `key`, if given.
    pub fn get(&self, key: K) -> Option<&str> {
        self.own
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the backend option `key` was given.
    pub fn is_set(&self, key: K) -> bool {
        self.get(key).is_some()
    }

    /// The backend option `key` as a duration (`10s`, `500ms`).
    pub fn duration(&self, key: K) -> Result<Option<Duration>> {
        self.get(key)
            .map(|v| parse_duration(key.as_str(), v))
            .transpose()
    }

    /// The backend option `key` as a flag (`true`/`false`, `1`/`0`, `yes`/`no`).
    pub fn flag(&self, key: K) -> Result<Option<bool>> {
        self.get(key)
            .map(|v| match v {
                "true" | "1" | "yes" => Ok(true),
                "false" | "0" | "no" => Ok(false),
                other => Err(Error::config(format!(
                    "option {}={other:?} is not true or false",
                    key.as_str()
                ))),
            })
            .transpose()
    }

    /// The backend option `key` parsed as a `T` (a number, say).
    pub fn value<T: FromStr>(&self, key: K, what: &str) -> Result<Option<T>> {
        self.get(key)
            .map(|v| {
                v.parse::<T>().map_err(|_| {
                    Error::config(format!("option {}={v:?} is not {what}", key.as_str()))
                })
            })
            .transpose()
    }
}

fn parse_duration(key: &str, v: &str) -> Result<Duration> {
    humantime::parse_duration(v)
        .map_err(|e| Error::config(format!("option {key}={v:?} is not a duration: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    crate::option_keys! {
        enum TestKey {
            SessionTimeout = "session_timeout",
            Acl = "acl",
        }
    }

    static ZK: BackendInfo = BackendInfo {
        kind: crate::BackendKind::new("zk"),
        schemes: &[SchemeInfo {
            name: "zk",
            aliases: &[],
            default_port: Some(2181),
            tls: false,
        }],
        feature: None,
        connect: |_| Box::pin(async { Err(Error::config("not here")) }),
    };

    fn parse(url: &str) -> Result<Settings<TestKey>> {
        Settings::parse(&LockConfig::new(url), &ZK)
    }

    #[test]
    fn common_and_own_keys() {
        let s =
            parse("zk://h/app?session_timeout=3s&prefix=p1&acl=open&command_timeout=2s").unwrap();
        assert_eq!(s.prefix(), "p1");
        assert_eq!(
            s.duration(TestKey::SessionTimeout).unwrap(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(s.get(TestKey::Acl), Some("open"));
        assert_eq!(s.command_timeout(), Duration::from_secs(2));
        assert_eq!(s.connect_timeout(), DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(s.lease(), DEFAULT_LEASE);
        assert_eq!(
            s.lease_or_alias(TestKey::SessionTimeout).unwrap(),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn timeouts_out_of_range_are_config_errors() {
        for url in [
            "zk://h?command_timeout=0s",
            "zk://h?connect_timeout=0s",
            "zk://h?command_timeout=500000000y",
            "zk://h?connect_timeout=366days",
        ] {
            let e = parse(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config, "{url}: {e}");
        }
        assert!(parse("zk://h?command_timeout=365days").is_ok());
    }

    #[test]
    fn unknown_keys_name_themselves_and_the_known_ones() {
        for url in ["zk://h?session_timout=2s", "zk://h?lease_tll=5s"] {
            let e = parse(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config);
            let msg = e.to_string();
            assert!(
                msg.contains("session_timeout") && msg.contains("prefix"),
                "{msg}"
            );
        }
        let cfg = LockConfig::new("zk://h").with_option("bogus", "1");
        let e = Settings::<TestKey>::parse(&cfg, &ZK).unwrap_err();
        assert!(e.to_string().contains("\"bogus\""), "{e}");
        assert!("bogus".parse::<TestKey>().is_err());
    }

    #[test]
    fn config_wins_over_url() {
        let mut cfg = LockConfig::new("zk://h?prefix=url&lease=9s&acl=open");
        cfg.key_prefix = Some("cfg".into());
        cfg.lease = Some(Duration::from_secs(4));
        cfg.options.insert("acl".into(), "creator".into());
        let s = Settings::<TestKey>::parse(&cfg, &ZK).unwrap();
        assert_eq!(s.prefix(), "cfg");
        assert_eq!(s.lease(), Duration::from_secs(4));
        assert_eq!(s.get(TestKey::Acl), Some("creator"));
    }

    #[test]
    fn lease_and_alias_must_agree() {
        let s = parse("zk://h?lease=2s&session_timeout=3s").unwrap();
        assert_eq!(
            s.lease_or_alias(TestKey::SessionTimeout)
                .unwrap_err()
                .kind(),
            ErrorKind::Config
        );
        let s = parse("zk://h?lease=3s&session_timeout=3s").unwrap();
        assert_eq!(
            s.lease_or_alias(TestKey::SessionTimeout).unwrap(),
            Duration::from_secs(3)
        );
        assert!(parse("zk://h?lease=1ms").is_err());
        assert!(parse("zk://h?command_timeout=0s").is_err());
    }

    /// Only one of a key's values was ever read: `soon` was not even parsed.
    #[test]
    fn a_key_given_twice_in_the_url_is_refused() {
        for url in [
            "zk://h?session_timeout=soon&session_timeout=10s",
            "zk://h?lease=3s&lease=3s",
            "zk://h?acl=open&prefix=p&acl=creator",
        ] {
            let e = parse(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config, "{url}");
            assert!(e.to_string().contains("given twice"), "{url}: {e}");
        }
    }
}
