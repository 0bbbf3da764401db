//! `LockConfig`: a URL plus options, from code, TOML or the environment.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::options::DEFAULT_LEASE;
use crate::url::{is_secret_param, redact, ServerUrl};

/// A secret string (password, token). `Debug` and `Display` print `***`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The secret itself: pass it to the client, never to a log.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// How to connect: a URL plus options. Options given here win over the URL's own.
///
/// ```
/// let cfg = lockkit_core::LockConfig::from_toml_str(r#"
///     url = "redis://:secret@127.0.0.1:6379"
///     key_prefix = "billing"
///     lease = "10s"
/// "#).unwrap();
/// assert_eq!(cfg.lease, std::time::Duration::from_secs(10));
/// assert!(!format!("{cfg:?}").contains("secret"));
/// ```
#[non_exhaustive]
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LockConfig {
    /// `mem://`, `redis://…`, `rediss://…`, `zk://…`, `etcd://…` or `etcds://…`.
    pub url: String,
    /// A prefix for every key, node or path lockkit writes (default `lockkit`).
    pub key_prefix: Option<String>,
    /// The default watchdog lease (30 s).
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// How long to wait for a connection (default 5 s).
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// How long one server command may take (default 5 s).
    #[serde(with = "humantime_serde")]
    pub command_timeout: Duration,
    /// User name, overriding the URL's.
    pub username: Option<String>,
    /// Password, overriding the URL's.
    pub password: Option<Secret>,
    /// Backend-specific options (the same keys the URL's query string takes).
    pub options: BTreeMap<String, String>,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            url: "mem://".into(),
            key_prefix: None,
            lease: DEFAULT_LEASE,
            connect_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(5),
            username: None,
            password: None,
            options: BTreeMap::new(),
        }
    }
}

impl fmt::Debug for LockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let options: BTreeMap<&str, &str> = self
            .options
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_secret_param(k) {
                        "***"
                    } else {
                        v.as_str()
                    },
                )
            })
            .collect();
        f.debug_struct("LockConfig")
            .field("url", &redact(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("lease", &self.lease)
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("username", &self.username)
            .field("password", &self.password)
            .field("options", &options)
            .finish()
    }
}

impl LockConfig {
    /// A config for `url` with default options.
    pub fn new(url: impl Into<String>) -> Self {
        LockConfig {
            url: url.into(),
            ..Default::default()
        }
    }

    /// Reads a TOML document (the fields of this struct).
    pub fn from_toml_str(s: &str) -> Result<Self> {
        let cfg: LockConfig = toml::from_str(s)
            .map_err(|e| Error::config(format!("bad lockkit TOML config: {e}")))?;
        cfg.check()?;
        Ok(cfg)
    }

    /// Reads `LOCKKIT_URL` (required) and `LOCKKIT_KEY_PREFIX`, `LOCKKIT_LEASE`,
    /// `LOCKKIT_CONNECT_TIMEOUT`, `LOCKKIT_COMMAND_TIMEOUT` (durations such as `10s`),
    /// `LOCKKIT_USERNAME`, `LOCKKIT_PASSWORD`, and `LOCKKIT_OPT_<KEY>` for backend options.
    pub fn from_env() -> Result<Self> {
        Self::from_vars(std::env::vars())
    }

    /// [`from_env`](Self::from_env) over any set of variables.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Result<Self> {
        let mut cfg = LockConfig::default();
        let mut url = None;
        for (k, v) in vars {
            let Some(key) = k.strip_prefix("LOCKKIT_") else {
                continue;
            };
            let dur = |v: &str| {
                humantime::parse_duration(v).map_err(|e| {
                    Error::config(format!("{k}={v:?} is not a duration (like 10s): {e}"))
                })
            };
            match key {
                "URL" => url = Some(v),
                "KEY_PREFIX" => cfg.key_prefix = Some(v),
                "LEASE" => cfg.lease = dur(&v)?,
                "CONNECT_TIMEOUT" => cfg.connect_timeout = dur(&v)?,
                "COMMAND_TIMEOUT" => cfg.command_timeout = dur(&v)?,
                "USERNAME" => cfg.username = Some(v),
                "PASSWORD" => cfg.password = Some(Secret::new(v)),
                _ => {
                    if let Some(opt) = key.strip_prefix("OPT_") {
                        cfg.options.insert(opt.to_ascii_lowercase(), v);
                    }
                }
            }
        }
        cfg.url = url.ok_or_else(|| Error::config("LOCKKIT_URL is not set"))?;
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<()> {
        if self.lease < Duration::from_millis(100) {
            return Err(Error::config(format!(
                "lease {:?} is too short (minimum 100ms)",
                self.lease
            )));
        }
        ServerUrl::parse(&self.url).map(drop)
    }

    /// The parsed URL, with this config's user name and password applied over the URL's.
    pub fn server_url(&self) -> Result<ServerUrl> {
        let mut url = ServerUrl::parse(&self.url)?;
        if let Some(u) = &self.username {
            url.username = Some(u.clone());
        }
        if let Some(p) = &self.password {
            url.password = Some(p.clone());
        }
        Ok(url)
    }

    /// A backend option: this config's `options` first, then the URL's query string.
    pub fn option(&self, key: &str) -> Option<String> {
        if let Some(v) = self.options.get(key) {
            return Some(v.clone());
        }
        ServerUrl::parse(&self.url)
            .ok()?
            .param(key)
            .map(str::to_string)
    }

    /// A duration option (`10s`, `500ms`), or `default` when absent.
    pub fn duration_option(&self, key: &str, default: Duration) -> Result<Duration> {
        match self.option(key) {
            None => Ok(default),
            Some(v) => humantime::parse_duration(&v)
                .map_err(|e| Error::config(format!("option {key}={v:?} is not a duration: {e}"))),
        }
    }

    /// The key prefix, `lockkit` by default.
    pub fn prefix(&self) -> String {
        self.key_prefix
            .clone()
            .or_else(|| self.option("prefix"))
            .unwrap_or_else(|| "lockkit".into())
    }

    /// The default lease: the `lease` URL option if given, else this config's `lease`.
    pub fn default_lease(&self) -> Result<Duration> {
        self.duration_option("lease", self.lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn env_table() {
        let cfg = LockConfig::from_vars(vars(&[
            ("LOCKKIT_URL", "redis://127.0.0.1"),
            ("LOCKKIT_LEASE", "5s"),
            ("LOCKKIT_PASSWORD", "pw1"),
            ("LOCKKIT_OPT_SESSION_TIMEOUT", "4s"),
            ("PATH", "/bin"),
        ]))
        .unwrap();
        assert_eq!(cfg.lease, Duration::from_secs(5));
        assert_eq!(cfg.option("session_timeout").as_deref(), Some("4s"));
        assert_eq!(cfg.server_url().unwrap().password.unwrap().expose(), "pw1");
        assert!(!format!("{cfg:?}").contains("pw1"));

        for bad in [
            vars(&[]),
            vars(&[("LOCKKIT_URL", "nope://x")]),
            vars(&[("LOCKKIT_URL", "mem://"), ("LOCKKIT_LEASE", "soon")]),
            vars(&[("LOCKKIT_URL", "mem://"), ("LOCKKIT_LEASE", "1ms")]),
        ] {
            assert_eq!(
                LockConfig::from_vars(bad).unwrap_err().kind(),
                &crate::ErrorKind::Config
            );
        }
    }

    #[test]
    fn toml_and_options() {
        let cfg = LockConfig::from_toml_str(
            "url = \"zk://h1,h2/app?session_timeout=3s&prefix=p1\"\n[options]\nacl_password = \"zz\"\n",
        )
        .unwrap();
        assert_eq!(
            cfg.duration_option("session_timeout", Duration::ZERO)
                .unwrap(),
            Duration::from_secs(3)
        );
        assert_eq!(cfg.prefix(), "p1");
        assert!(!format!("{cfg:?}").contains("zz"));
        assert!(LockConfig::from_toml_str("url = \"mem://\"\nbogus = 1").is_err());
        assert!(LockConfig::from_toml_str("url = \"mem://\"\nlease = \"later\"").is_err());
    }
}
