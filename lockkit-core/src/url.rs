//! Parsing of lockkit URLs: `scheme://[user[:password]@]host[:port][,host[:port]]…[/path][?k=v&…]`.
//!
//! The `url` crate cannot hold several hosts, which ZooKeeper and etcd need, so this is a small
//! parser of its own.

use std::fmt;

use crate::backend::BackendKind;
use crate::config::Secret;
use crate::error::{Error, ErrorKind, Result};

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

    fn default_port(self) -> u16 {
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
                scheme: self.as_str().to_string(),
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

/// One `host:port` of a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port (the scheme's default when the URL has none).
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A parsed lockkit URL. Its `Debug` and `Display` never show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// The scheme.
    pub scheme: Scheme,
    /// The user name, percent-decoded.
    pub username: Option<String>,
    /// The password, percent-decoded.
    pub password: Option<Secret>,
    /// The hosts, in order.
    pub hosts: Vec<HostPort>,
    /// The path, percent-decoded, without the leading `/` (a Redis db, a ZooKeeper chroot).
    pub path: String,
    /// The query parameters, percent-decoded, in order.
    pub params: Vec<(String, String)>,
}

impl ServerUrl {
    /// Parses a URL.
    ///
    /// ```
    /// let u = lockkit_core::ServerUrl::parse("zk://alice:s3cret@h1:2181,h2/app?session_timeout=5s").unwrap();
    /// assert_eq!(u.hosts.len(), 2);
    /// assert_eq!(u.path, "app");
    /// assert_eq!(u.param("session_timeout"), Some("5s"));
    /// assert!(!format!("{u:?}").contains("s3cret"));
    /// ```
    pub fn parse(url: &str) -> Result<ServerUrl> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            Error::config(format!(
                "{:?} is not a URL (expected scheme://…)",
                redact_raw(url)
            ))
        })?;
        let scheme = Scheme::parse(scheme)?;
        if scheme == Scheme::File {
            return parse_file(rest);
        }
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.split_once('/') {
            Some((a, p)) => (a, p),
            None => (before_query, ""),
        };
        let (userinfo, hostlist) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(ui) => {
                let (u, p) = match ui.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (ui, None),
                };
                let u = decode(u)?;
                let u = if u.is_empty() { None } else { Some(u) };
                (u, p.map(decode).transpose()?.map(Secret::new))
            }
        };
        let mut hosts = Vec::new();
        if !hostlist.is_empty() {
            for h in hostlist.split(',') {
                hosts.push(parse_host(h, scheme)?);
            }
        }
        if hosts.is_empty() && scheme != Scheme::Mem {
            return Err(Error::config(format!(
                "{scheme}:// URL needs at least one host"
            )));
        }
        let mut params = Vec::new();
        if let Some(q) = query {
            for pair in q.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                params.push((decode(k)?, decode(v)?));
            }
        }
        Ok(ServerUrl {
            scheme,
            username,
            password,
            hosts,
            path: decode(path)?,
            params,
        })
    }

    /// The last value of query parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `host:port,host:port`.
    pub fn host_list(&self) -> String {
        self.hosts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme)?;
        if self.scheme == Scheme::File {
            return f.write_str(&self.path);
        }
        match (&self.username, &self.password) {
            (Some(u), Some(_)) => write!(f, "{u}:***@")?,
            (Some(u), None) => write!(f, "{u}@")?,
            (None, Some(_)) => f.write_str(":***@")?,
            (None, None) => {}
        }
        f.write_str(&self.host_list())?;
        if !self.path.is_empty() {
            write!(f, "/{}", self.path)?;
        }
        for (i, (k, v)) in self.params.iter().enumerate() {
            let sep = if i == 0 { '?' } else { '&' };
            if is_secret_param(k) {
                write!(f, "{sep}{k}=***")?;
            } else {
                write!(f, "{sep}{k}={v}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerUrl({self})")
    }
}

/// Whether an option or query key names a secret (its value is never shown).
pub(crate) fn is_secret_param(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    k.contains("password") || k.contains("secret") || k.contains("token") || k.ends_with("key")
}

/// A URL with any password replaced by `***`, for messages and logs. Works on unparsable input.
pub fn redact(url: &str) -> String {
    match ServerUrl::parse(url) {
        Ok(u) => u.to_string(),
        Err(_) => redact_raw(url),
    }
}

/// Redaction without parsing: hides everything before the last `@`, and any `password=` value.
fn redact_raw(url: &str) -> String {
    let hidden = match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***@{}", &url[..s + 3], &url[at + 1..]),
        (None, Some(at)) => format!("***@{}", &url[at + 1..]),
        _ => url.to_string(),
    };
    match hidden.split_once('?') {
        Some((base, _)) => format!("{base}?***"),
        None => hidden,
    }
}

/// `file://` URLs: everything up to `?` is the directory (`file:///var/lock/app`).
fn parse_file(rest: &str) -> Result<ServerUrl> {
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let path = decode(path)?;
    if path.is_empty() {
        return Err(Error::config(
            "file:// URL needs a directory, as in file:///var/lock/myapp",
        ));
    }
    let mut params = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        params.push((decode(k)?, decode(v)?));
    }
    Ok(ServerUrl {
        scheme: Scheme::File,
        username: None,
        password: None,
        hosts: Vec::new(),
        path,
        params,
    })
}

fn parse_host(h: &str, scheme: Scheme) -> Result<HostPort> {
    let bad = || Error::config(format!("bad host {h:?} in {scheme}:// URL"));
    if h.is_empty() {
        return Err(bad());
    }
    let (host, port) = if let Some(rest) = h.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(bad()),
        };
        (host.to_string(), port)
    } else {
        match h.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), Some(port)),
            None => (h.to_string(), None),
        }
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(bad());
    }
    let port = match port {
        None => scheme.default_port(),
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
            Error::config(format!(
                "bad port {p:?} in {scheme}:// URL (expected 1-65535)"
            ))
        })?,
    };
    Ok(HostPort { host, port })
}

fn decode(s: &str) -> Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| Error::config("bad percent-escape in URL"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::config("URL escape is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        struct Case {
            url: &'static str,
            hosts: &'static str,
            user: Option<&'static str>,
            pass: Option<&'static str>,
            path: &'static str,
        }
        let cases = [
            Case {
                url: "mem://",
                hosts: "",
                user: None,
                pass: None,
                path: "",
            },
            Case {
                url: "redis://127.0.0.1",
                hosts: "127.0.0.1:6379",
                user: None,
                pass: None,
                path: "",
            },
            Case {
                url: "redis://:pw@h:7000/2",
                hosts: "h:7000",
                user: None,
                pass: Some("pw"),
                path: "2",
            },
            Case {
                url: "rediss://u:p%40ss@h/0",
                hosts: "h:6379",
                user: Some("u"),
                pass: Some("p@ss"),
                path: "0",
            },
            Case {
                url: "redis+sentinel://:pw@s1,s2:26380/lockkit/2",
                hosts: "s1:26379,s2:26380",
                user: None,
                pass: Some("pw"),
                path: "lockkit/2",
            },
            Case {
                url: "REDIS+CLUSTER://u:p@h1:7000,h2",
                hosts: "h1:7000,h2:6379",
                user: Some("u"),
                pass: Some("p"),
                path: "",
            },
            Case {
                url: "zk://a:1,b:2,c/app/x",
                hosts: "a:1,b:2,c:2181",
                user: None,
                pass: None,
                path: "app/x",
            },
            Case {
                url: "etcd://[::1]:2379,[fe80::1]",
                hosts: "[::1]:2379,[fe80::1]:2379",
                user: None,
                pass: None,
                path: "",
            },
            Case {
                url: "ETCDS://root:x@e1",
                hosts: "e1:2379",
                user: Some("root"),
                pass: Some("x"),
                path: "",
            },
        ];
        for c in cases {
            let u = ServerUrl::parse(c.url).unwrap_or_else(|e| panic!("{}: {e}", c.url));
            assert_eq!(u.host_list(), c.hosts, "{}", c.url);
            assert_eq!(u.username.as_deref(), c.user, "{}", c.url);
            assert_eq!(u.password.as_ref().map(|p| p.expose()), c.pass, "{}", c.url);
            assert_eq!(u.path, c.path, "{}", c.url);
        }
    }

    #[test]
    fn parse_errors_are_config_errors() {
        for bad in [
            "",
            "redis",
            "redis://",
            "ftp://h",
            "redis://h:0",
            "redis://h:99999",
            "redis://h:x",
            "zk://a,,b",
            "etcd://[::1",
            "redis://h/%zz",
            "file://",
        ] {
            let e = ServerUrl::parse(bad).expect_err(bad);
            assert_eq!(e.kind(), &ErrorKind::Config, "{bad}");
        }
    }

    #[test]
    fn params_and_redaction() {
        let u = ServerUrl::parse("redis://u:hunter2@h?prefix=app&password=zz&lease=10s").unwrap();
        assert_eq!(u.param("prefix"), Some("app"));
        assert_eq!(u.param("lease"), Some("10s"));
        let shown = format!("{u} {u:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("zz"),
            "{shown}"
        );
        assert!(!redact("redis://u:hunter2@h:bad:port").contains("hunter2"));
    }

    #[test]
    fn schemes_name_their_features() {
        assert_eq!(Scheme::parse("zk").unwrap().feature(), Some("zk"));
        assert_eq!(Scheme::parse("rediss").unwrap().feature(), Some("redis"));
        assert_eq!(Scheme::parse("mem").unwrap().feature(), None);
        for s in ["redis+sentinel", "redis+cluster"] {
            let scheme = Scheme::parse(s).unwrap();
            assert_eq!(scheme.as_str(), s);
            assert_eq!(scheme.feature(), Some("redis"));
            assert_eq!(scheme.backend(), BackendKind::Redis);
        }
        let shown = redact("redis+sentinel://u:hunter2@s1,s2/m");
        assert_eq!(shown, "redis+sentinel://u:***@s1:26379,s2:26379/m");
        let e = Scheme::Etcds.disabled_error();
        assert!(matches!(
            e.kind(),
            ErrorKind::BackendDisabled {
                feature: "etcd",
                ..
            }
        ));
    }
}
