//! Parsing of lockkit URLs: `scheme://[user[:password]@]host[:port][,host[:port]]…[/path][?k=v&…]`.
//!
//! The `url` crate cannot hold several hosts, which ZooKeeper and etcd need, so the authority is
//! split here; percent-decoding and the query string go through `percent-encoding` and
//! `form_urlencoded`.

use std::fmt;

use crate::backend_info::{BackendInfo, SchemeInfo};
use crate::error::{Error, Result};
use crate::redact::{is_secret_param, redact_raw};
use crate::secret::Secret;

/// One `host:port` of a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port: the one the URL gives, or the scheme's default once the URL is
    /// [resolved](ServerUrl::resolve); 0 until then when the URL gives none.
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if self.port != 0 {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// A parsed lockkit URL. Its `Debug` and `Display` never show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// The scheme, in lower case: as written until the URL is [resolved](Self::resolve) by a
    /// backend, which makes an alias its scheme's name (`zookeeper` becomes `zk`).
    pub scheme: String,
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
    /// Parses a URL of any scheme; which backend takes it, and the default port of a host
    /// given without one, come from that backend ([`resolve`](Self::resolve)).
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
        let scheme = parse_scheme(scheme)?;
        if scheme == "file" {
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
            // An `@` past the host most likely ends a password with a raw `/` or `?` in it,
            // which would otherwise be read as a host, a port or a path (and echoed back, or
            // connected to without credentials).
            None if rest.contains('@') => return Err(stray_at(url)),
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
                hosts.push(parse_host(h, &scheme)?);
            }
        }
        let params = parse_query(query)?;
        Ok(ServerUrl {
            scheme,
            username,
            password,
            hosts,
            path: decode(path)?,
            params,
        })
    }

    /// Parses `url` and [resolves](Self::resolve) it against `backend`: what the backend itself
    /// will connect to, every host with a port.
    pub fn parse_for(url: &str, backend: &BackendInfo) -> Result<ServerUrl> {
        let mut parsed = ServerUrl::parse(url)?;
        parsed.resolve(backend)?;
        Ok(parsed)
    }

    /// Checks this URL against `backend`, whose scheme it must have: an alias becomes the
    /// scheme's name, hosts given without a port get the scheme's default, and a server
    /// backend's URL must name a host. Returns the scheme.
    pub fn resolve(&mut self, backend: &BackendInfo) -> Result<&'static SchemeInfo> {
        let scheme = backend.scheme(&self.scheme).ok_or_else(|| {
            let names: Vec<&str> = backend.schemes.iter().map(|s| s.name).collect();
            Error::config(format!(
                "the {} backend takes {}:// URLs, not {}://",
                backend.kind,
                names.join("://, "),
                self.scheme
            ))
        })?;
        self.scheme = scheme.name.to_string();
        match scheme.default_port {
            Some(_) if self.hosts.is_empty() => Err(Error::config(format!(
                "{}:// URL needs at least one host",
                scheme.name
            ))),
            Some(port) => {
                for h in self.hosts.iter_mut().filter(|h| h.port == 0) {
                    h.port = port;
                }
                Ok(scheme)
            }
            None => Ok(scheme),
        }
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
        if self.scheme == "file" {
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

/// A URL with any password replaced by `***`, for messages and logs. Works on unparsable input.
pub fn redact(url: &str) -> String {
    match ServerUrl::parse(url) {
        // An `@` that did not end up separating credentials may follow a password with a raw
        // `/` or `?` in it (`redis://u:12/ab@h`), which parses as a host and a path: hide all
        // of it.
        Ok(u) if u.username.is_some() || u.password.is_some() || !has_at(url) => u.to_string(),
        _ => redact_raw(url),
    }
}

/// The refusal of an `@` that does not end the authority; the URL is shown with everything up to
/// its last `@` hidden.
fn stray_at(url: &str) -> Error {
    Error::config(format!(
        "{} has an `@` after its host: in a password, percent-encode `/`, `?` and `#` \
         (%2F, %3F, %23); anywhere else, write `@` as %40",
        redact_raw(url)
    ))
}

/// Whether `url` has an `@` after its `://`.
fn has_at(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(_, rest)| rest.contains('@'))
}

impl fmt::Debug for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerUrl({self})")
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
    let params = parse_query(query)?;
    Ok(ServerUrl {
        scheme: "file".to_string(),
        username: None,
        password: None,
        hosts: Vec::new(),
        path,
        params,
    })
}

/// The scheme, lower-cased: a letter, then letters, digits, `+`, `-` or `.` (RFC 3986).
fn parse_scheme(s: &str) -> Result<String> {
    let mut chars = s.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !ok {
        return Err(Error::config(format!("bad URL scheme {:?}", redact_raw(s))));
    }
    Ok(s.to_ascii_lowercase())
}

fn parse_host(h: &str, scheme: &str) -> Result<HostPort> {
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
        None => 0,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
            Error::config(format!(
                "bad port {p:?} in {scheme}:// URL (expected 1-65535)"
            ))
        })?,
    };
    Ok(HostPort { host, port })
}

/// Percent-decodes `s`, refusing malformed escapes (`%zz`, a lone `%`) and non-UTF-8 results.
fn decode(s: &str) -> Result<String> {
    check_escapes(s)?;
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| Error::config("URL escape is not UTF-8"))
}

/// `percent-encoding` passes malformed escapes through unchanged; a URL with one is a typo.
fn check_escapes(s: &str) -> Result<()> {
    let b = s.as_bytes();
    for (i, _) in s.match_indices('%') {
        let hex = |j: usize| b.get(j).is_some_and(u8::is_ascii_hexdigit);
        if !(hex(i + 1) && hex(i + 2)) {
            return Err(Error::config("bad percent-escape in URL"));
        }
    }
    Ok(())
}

/// The query string's pairs, decoded as `application/x-www-form-urlencoded` (as the `url`
/// crate's `query_pairs` does).
fn parse_query(query: Option<&str>) -> Result<Vec<(String, String)>> {
    let q = query.unwrap_or("");
    check_escapes(q)?;
    Ok(form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .filter(|(k, _)| !k.is_empty())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend_info::{route, SchemeInfo};
    use crate::kind::BackendKind;
    use crate::ErrorKind;

    /// A backend as a backend crate describes itself: two schemes, one an alias's target.
    static DB: BackendInfo = BackendInfo {
        kind: BackendKind::new("db"),
        schemes: &[
            SchemeInfo {
                name: "db",
                aliases: &["database"],
                default_port: Some(4000),
                tls: false,
            },
            SchemeInfo {
                name: "dbs",
                aliases: &[],
                default_port: Some(4001),
                tls: true,
            },
        ],
        feature: Some("db"),
        connect: |_| Box::pin(async { Err(Error::config("no db here")) }),
    };

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
                hosts: "127.0.0.1",
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
                hosts: "h",
                user: Some("u"),
                pass: Some("p@ss"),
                path: "0",
            },
            Case {
                url: "redis+sentinel://:pw@s1,s2:26380/lockkit/2",
                hosts: "s1,s2:26380",
                user: None,
                pass: Some("pw"),
                path: "lockkit/2",
            },
            Case {
                url: "REDIS+CLUSTER://u:p@h1:7000,h2",
                hosts: "h1:7000,h2",
                user: Some("u"),
                pass: Some("p"),
                path: "",
            },
            Case {
                url: "zk://a:1,b:2,c/app/x",
                hosts: "a:1,b:2,c",
                user: None,
                pass: None,
                path: "app/x",
            },
            Case {
                url: "etcd://[::1]:2379,[fe80::1]",
                hosts: "[::1]:2379,[fe80::1]",
                user: None,
                pass: None,
                path: "",
            },
            Case {
                url: "ETCDS://root:x@e1",
                hosts: "e1",
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
            "://h",
            "1db://h",
            "re dis://h",
            "redis://h:0",
            "redis://h:99999",
            "redis://h:x",
            "zk://a,,b",
            "etcd://[::1",
            "redis://h/%zz",
            "file://",
        ] {
            let e = ServerUrl::parse(bad).expect_err(bad);
            assert_eq!(e.kind(), crate::ErrorKind::Config, "{bad}");
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
        // A raw `/` in a password, on any scheme, known or not.
        for url in ["redis://u:12/hunter2@h", "reddis://u:12/hunter2@h?x=1"] {
            let shown = redact(url);
            assert!(!shown.contains("hunter2"), "{url}: {shown}");
        }
    }

    /// A password with a raw `/` or `?` used to be read as a host and a path (or a query): its
    /// first part turned up in a "bad port" or "bad db" error, or the URL parsed, connecting
    /// without credentials to a host named by the user name, with the rest in the path.
    #[test]
    fn an_at_past_the_host_is_refused_without_showing_the_password() {
        for url in [
            "redis://default:Ab3/xYz@h:6379",
            "redis://default:123/hunter2@h",
            "zk://alice:42/s3cret@zk1",
            "zk://alice:42?s3cret@zk1",
            "etcd://u:p#1/x@h",
            "zk://zk1:2181/app@v2",
        ] {
            let e = ServerUrl::parse(url).unwrap_err();
            let shown = e.to_string();
            assert_eq!(e.kind(), ErrorKind::Config, "{url}");
            assert!(shown.contains("percent-encode"), "{url}: {shown}");
            for secret in [
                "Ab3", "xYz", "123", "hunter2", "s3cret", "alice", "p#1", "app",
            ] {
                assert!(!shown.contains(secret), "{url}: {shown}");
            }
        }
        // Escaped, each is what it says.
        let u = ServerUrl::parse("redis://default:Ab3%2FxYz@h:6379").unwrap();
        assert_eq!(u.password.as_ref().map(|p| p.expose()), Some("Ab3/xYz"));
        let u = ServerUrl::parse("zk://zk1:2181/app%40v2?tls_ca=%2Fa%40b").unwrap();
        assert_eq!(
            (u.path.as_str(), u.param("tls_ca")),
            ("app@v2", Some("/a@b"))
        );
    }

    #[test]
    fn a_backend_resolves_its_own_urls() {
        let mut u = ServerUrl::parse("DATABASE://u:pw@h1,h2:9/x").unwrap();
        assert_eq!(u.scheme, "database");
        assert_eq!(u.resolve(&DB).unwrap().name, "db");
        assert_eq!(u.scheme, "db");
        assert_eq!(u.host_list(), "h1:4000,h2:9");
        assert!(!u.to_string().contains("pw"), "{u}");
        let mut u = ServerUrl::parse("dbs://h").unwrap();
        assert!(u.resolve(&DB).unwrap().tls);
        assert_eq!(u.host_list(), "h:4001");
        for (bad, says) in [
            ("db://", "needs at least one host"),
            ("redis://h", "takes db://, dbs:// URLs"),
        ] {
            let e = ServerUrl::parse(bad).unwrap().resolve(&DB).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config, "{bad}");
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn urls_are_routed_by_the_descriptors() {
        let disabled: &[(&str, &[&str])] = &[("etcd", &["etcd", "etcds"])];
        assert_eq!(
            route("Database", &[&DB], disabled).unwrap().kind.as_str(),
            "db"
        );
        let e = route("etcds", &[&DB], disabled).unwrap_err();
        assert!(matches!(
            e.kind(),
            ErrorKind::BackendDisabled {
                scheme: "etcds",
                feature: "etcd",
            }
        ));
        let e = route("ftp", &[&DB], disabled).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(
            e.to_string().contains("expected db, dbs, etcd, etcds"),
            "{e}"
        );
        let shown = redact("redis+sentinel://u:hunter2@s1,s2/m");
        assert_eq!(shown, "redis+sentinel://u:***@s1,s2/m");
    }
}
