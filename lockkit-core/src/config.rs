//! `LockConfig`: a URL plus options, from code, TOML or the environment.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::redact::is_secret_param;
use crate::secret::Secret;
use crate::url::{redact, ServerUrl};

/// How to connect: a URL plus options. Options given here win over the URL's own query
/// parameters; a field left `None` falls back to the URL's parameter of the same name, then to
/// the default.
///
/// ```
/// let cfg = lockkit_core::LockConfig::from_toml_str(r#"
///     url = "redis://:secret@127.0.0.1:6379"
///     key_prefix = "billing"
///     lease = "10s"
/// "#).unwrap();
/// assert_eq!(cfg.lease, Some(std::time::Duration::from_secs(10)));
/// assert!(!format!("{cfg:?}").contains("secret"));
/// ```
#[non_exhaustive]
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LockConfig {
    /// `mem://`, `file:///dir`, `redis://…`, `rediss://…`, `redis+sentinel://…`,
    /// `redis+cluster://…`, `zk://…`, `etcd://…` or `etcds://…`.
    pub url: String,
    /// A prefix for every key, node or path lockkit writes (default `lockkit`; URL option
    /// `prefix`).
    pub key_prefix: Option<String>,
    /// The handle's default lease: what an acquire that names no lease gets (default 30 s;
    /// URL option `lease`). On ZooKeeper it is the session timeout, on etcd the session
    /// lease's TTL.
    #[serde(with = "humantime_serde")]
    pub lease: Option<Duration>,
    /// How long to wait for a connection (default 5 s; URL option `connect_timeout`).
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Option<Duration>,
    /// How long one server command may take (default 5 s; URL option `command_timeout`).
    #[serde(with = "humantime_serde")]
    pub command_timeout: Option<Duration>,
    /// User name, overriding the URL's.
    pub username: Option<String>,
    /// Password, overriding the URL's.
    pub password: Option<Secret>,
    /// Backend-specific options (the same keys the URL's query string takes). An unknown key
    /// is a [`Config`](crate::ErrorKind::Config) error at connect.
    pub options: BTreeMap<String, String>,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            url: "mem://".into(),
            key_prefix: None,
            lease: None,
            connect_timeout: None,
            command_timeout: None,
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
                let shown = if is_secret_param(k) { "***" } else { v };
                (k.as_str(), shown)
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

    /// Sets the handle's default lease.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Sets a backend option (as the URL's query string would).
    pub fn with_option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.insert(key.into(), value.into());
        self
    }

    /// Reads a TOML document (the fields of this struct).
    pub fn from_toml_str(s: &str) -> Result<Self> {
        let cfg: LockConfig = toml::from_str(s).map_err(|e| toml_error(s, &e))?;
        cfg.check()?;
        Ok(cfg)
    }

    /// This config as a TOML document (passwords included: keep it out of logs).
    pub fn to_toml_string(&self) -> Result<String> {
        toml::to_string(self).map_err(|e| Error::config(format!("cannot write TOML: {e}")))
    }

    /// Reads `LOCKKIT_URL` (required) and `LOCKKIT_KEY_PREFIX`, `LOCKKIT_LEASE`,
    /// `LOCKKIT_CONNECT_TIMEOUT`, `LOCKKIT_COMMAND_TIMEOUT` (durations such as `10s`),
    /// `LOCKKIT_USERNAME`, `LOCKKIT_PASSWORD`, and `LOCKKIT_OPT_<KEY>` for backend options.
    /// Any other `LOCKKIT_` variable is a [`Config`](crate::ErrorKind::Config) error, so a
    /// misspelt one is never silently ignored.
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
                "LEASE" => cfg.lease = Some(dur(&v)?),
                "CONNECT_TIMEOUT" => cfg.connect_timeout = Some(dur(&v)?),
                "COMMAND_TIMEOUT" => cfg.command_timeout = Some(dur(&v)?),
                "USERNAME" => cfg.username = Some(v),
                "PASSWORD" => cfg.password = Some(Secret::new(v)),
                _ => match key.strip_prefix("OPT_") {
                    Some(opt) => {
                        cfg.options.insert(opt.to_ascii_lowercase(), v);
                    }
                    // Variables lockkit's own tools and tests set for themselves.
                    None if OTHER_VARS.iter().any(|p| key.starts_with(p)) => {}
                    None => {
                        return Err(Error::config(format!(
                            "unknown variable {k}; lockkit reads LOCKKIT_URL, LOCKKIT_KEY_PREFIX, \
                             LOCKKIT_LEASE, LOCKKIT_CONNECT_TIMEOUT, LOCKKIT_COMMAND_TIMEOUT, \
                             LOCKKIT_USERNAME, LOCKKIT_PASSWORD and LOCKKIT_OPT_<KEY>"
                        )))
                    }
                },
            }
        }
        cfg.url = url.ok_or_else(|| Error::config("LOCKKIT_URL is not set"))?;
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<()> {
        if let Some(why) = self.lease.and_then(crate::options::lease_problem) {
            return Err(Error::config(why));
        }
        ServerUrl::parse(&self.url).map(drop)
    }

    /// The parsed URL, with this config's user name and password applied over the URL's. It is
    /// not yet [resolved](ServerUrl::resolve): the scheme is as written (an alias stays an
    /// alias) and a host given without a port has port 0, until a backend resolves it.
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
}

/// `LOCKKIT_*` variables that are not configuration: what `lockkit exec` gives its command and
/// what the test scripts use.
const OTHER_VARS: &[&str] = &[
    "FENCING_TOKEN",
    "LOCK_NAME",
    "TERM",
    "TEST_",
    "KEEP_SERVICES",
    "CARGO_JOBS",
    "CHILD",
];

/// A TOML error without the values it would quote: the parser shows the line it stopped at and
/// names the value it refused, which may be a password or a URL holding one. Field names stay.
fn toml_error(doc: &str, e: &toml::de::Error) -> Error {
    let message = e.message().trim_end();
    let message = if message.starts_with("unknown field") || message.starts_with("missing field") {
        message.to_string()
    } else {
        hide_quoted(message)
    };
    let at = match e.span().and_then(|span| doc.get(..span.start)) {
        Some(before) => {
            let line = before.matches('\n').count() + 1;
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            let column = before[line_start..].chars().count() + 1;
            format!(" at line {line}, column {column}")
        }
        None => String::new(),
    };
    Error::config(format!("bad lockkit TOML config{at}: {message}"))
}

/// `message` with every `` `quoted` `` or `"quoted"` part replaced by `…`.
fn hide_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut open: Option<char> = None;
    for c in message.chars() {
        match open {
            Some(q) if c == q => {
                out.push('…');
                out.push(c);
                open = None;
            }
            Some(_) => {}
            None => {
                out.push(c);
                if c == '`' || c == '"' {
                    open = Some(c);
                }
            }
        }
    }
    if open.is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

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
            ("LOCKKIT_TEST_REDIS_URL", "redis://x"),
            ("PATH", "/bin"),
        ]))
        .unwrap();
        assert_eq!(cfg.lease, Some(Duration::from_secs(5)));
        assert_eq!(
            cfg.options.get("session_timeout").map(String::as_str),
            Some("4s")
        );
        assert_eq!(cfg.server_url().unwrap().password.unwrap().expose(), "pw1");
        assert!(!format!("{cfg:?}").contains("pw1"));

        for bad in [
            vars(&[]),
            vars(&[("LOCKKIT_URL", "nope:/x")]),
            vars(&[("LOCKKIT_URL", "2redis://x")]),
            vars(&[("LOCKKIT_URL", "mem://"), ("LOCKKIT_LEASE", "soon")]),
            vars(&[("LOCKKIT_URL", "mem://"), ("LOCKKIT_LEASE", "1ms")]),
            vars(&[("LOCKKIT_URL", "mem://"), ("LOCKKIT_LEASES", "1s")]),
        ] {
            assert_eq!(
                LockConfig::from_vars(bad).unwrap_err().kind(),
                ErrorKind::Config
            );
        }
    }

    /// The TOML parser's own message quotes the line it stopped at and the value it refused: a
    /// password, or a URL with one, was printed.
    #[test]
    fn a_bad_toml_config_does_not_show_its_values() {
        for (doc, says) in [
            ("url = \"redis://h\"\npassword = 123456\n", "line 2"),
            ("url = \"redis://h\"\npassword = \"123456\n", "line 2"),
            ("url = \"redis://u:123456@h\nlease = \"2s\"\n", "line 1"),
            ("url = 123456\n", "line 1"),
        ] {
            let e = LockConfig::from_toml_str(doc).unwrap_err().to_string();
            assert!(!e.contains("123456"), "{doc}: {e}");
            assert!(e.contains(says), "{doc}: {e}");
        }
        let e = LockConfig::from_toml_str("url = \"mem://\"\nbogus = 1").unwrap_err();
        assert!(e.to_string().contains("`bogus`"), "{e}");
    }

    #[test]
    fn toml_round_trip() {
        let cfg = LockConfig::from_toml_str(
            "url = \"zk://h1,h2/app?session_timeout=3s&prefix=p1\"\nlease = \"7s\"\n[options]\nacl_password = \"zz\"\n",
        )
        .unwrap();
        assert_eq!(cfg.lease, Some(Duration::from_secs(7)));
        assert!(!format!("{cfg:?}").contains("zz"));
        let again = LockConfig::from_toml_str(&cfg.to_toml_string().unwrap()).unwrap();
        assert_eq!(again.lease, cfg.lease);
        assert_eq!(again.options, cfg.options);
        assert!(LockConfig::from_toml_str("url = \"mem://\"\nbogus = 1").is_err());
        assert!(LockConfig::from_toml_str("url = \"mem://\"\nlease = \"later\"").is_err());
    }
}
