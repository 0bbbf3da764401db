//! Parsing of lockkit URLs: `scheme://[user[:password]@]host[:port][,host[:port]]…[/path][?k=v&…]`.
//!
//! The `url` crate cannot hold several hosts, which ZooKeeper and etcd need, so the authority is
//! split here; percent-decoding and the query string go through `percent-encoding` and
//! `form_urlencoded`.

use std::fmt;

use crate::error::{Error, Result};
use crate::redact::{is_secret_param, redact_raw};
use crate::scheme::Scheme;
use crate::secret::Secret;

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

/// A URL with any password replaced by `***`, for messages and logs. Works on unparsable input.
pub fn redact(url: &str) -> String {
    match ServerUrl::parse(url) {
        Ok(u) => u.to_string(),
        Err(_) => redact_raw(url),
    }
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
    use crate::kind::BackendKind;
    use crate::ErrorKind;

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
