//! The TLS options of the server backends, read once: which options turn TLS on, the PEM files
//! they name (read here, checked to be PEM), and the errors for TLS options a URL cannot use.
//! A backend hands the bytes of a [`Tls`] to its client library; the handshake-refusal probe
//! for clients that hide the reason is [`Tls::refusal`] (feature `tls-probe`).

use crate::backend_info::SchemeInfo;
use crate::error::{Error, Result};
use crate::option_key::OptionKey;
use crate::secret::Secret;

crate::option_keys! {
    /// The TLS options. A backend takes those its [`TlsRules`] name.
    pub enum TlsKey {
        /// `tls_ca`: PEM file of the CA(s) that signed the server's certificate (else the
        /// system's roots, where the client library has them).
        Ca = "tls_ca",
        /// `tls_cert`: PEM file of a client certificate, for servers that ask for one; goes
        /// with `tls_key`.
        Cert = "tls_cert",
        /// `tls_key`: PEM file of that certificate's private key (its path is never shown).
        Key = "tls_key",
        /// `tls_domain`: the name to check in the server's certificate, when it is not the
        /// URL's host.
        Domain = "tls_domain",
    }
}

/// How a backend turns TLS on, and what its client needs.
#[derive(Clone, Copy, Debug)]
pub struct TlsRules {
    /// The backend, as error messages name it (`Redis`, `ZooKeeper`, `etcd`).
    pub backend: &'static str,
    /// Whether the client can check another name than the host (`tls_domain`).
    pub domain: bool,
    /// Whether TLS needs `tls_ca` (the client has no system roots).
    pub needs_ca: bool,
}

impl TlsRules {
    /// The TLS options this backend takes.
    pub fn keys(&self) -> &'static [TlsKey] {
        if self.domain {
            &[TlsKey::Ca, TlsKey::Cert, TlsKey::Key, TlsKey::Domain]
        } else {
            &[TlsKey::Ca, TlsKey::Cert, TlsKey::Key]
        }
    }

    /// The TLS to use for options `given` on a URL of scheme `scheme`, one of the backend's
    /// `schemes`: `None` for plain TCP. A backend with a TLS scheme (`rediss`, `etcds`) takes
    /// TLS options on that scheme only; on a backend without one, any TLS option turns TLS on.
    pub(crate) fn resolve(
        &self,
        schemes: &[SchemeInfo],
        scheme: &str,
        given: &[(TlsKey, String)],
    ) -> Result<Option<Tls>> {
        let get = |key: TlsKey| {
            given
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.as_str())
        };
        let on = match schemes.iter().find(|s| s.tls) {
            Some(tls_scheme) => {
                let on = schemes.iter().any(|s| s.tls && s.matches(scheme));
                if !on && !given.is_empty() {
                    let names: Vec<&str> = self.keys().iter().map(|k| k.as_str()).collect();
                    return Err(Error::config(format!(
                        "options {} need a TLS URL ({}://)",
                        list(&names),
                        tls_scheme.name
                    )));
                }
                on
            }
            None => !given.is_empty(),
        };
        if !on {
            return Ok(None);
        }
        // Rules first, files after: a wrong combination is reported before a missing file.
        let pair = match (get(TlsKey::Cert), get(TlsKey::Key)) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(Error::config(
                    "tls_cert and tls_key go together: give both or neither",
                ))
            }
        };
        if self.needs_ca && get(TlsKey::Ca).is_none() {
            return Err(Error::config(format!(
                "{} over TLS needs tls_ca: the CA that signed the server's certificate",
                self.backend
            )));
        }
        let ca = get(TlsKey::Ca)
            .map(|p| read_pem(p, TlsKey::Ca))
            .transpose()?;
        let identity = match pair {
            Some((cert, key)) => Some((
                read_pem(cert, TlsKey::Cert)?,
                Secret::new(String::from_utf8_lossy(&read_pem(key, TlsKey::Key)?)),
            )),
            None => None,
        };
        Ok(Some(Tls {
            ca,
            identity,
            domain: get(TlsKey::Domain).map(str::to_string),
        }))
    }
}

/// `a, b and c`.
fn list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// Reads the PEM file `path` given as `key`. Errors name the option, and the path except for
/// `tls_key` (treated as a secret, like every `*key` option); never a file's contents.
fn read_pem(path: &str, key: TlsKey) -> Result<Vec<u8>> {
    let shown = if key == TlsKey::Key {
        String::new()
    } else {
        format!(" {path:?}")
    };
    let pem = std::fs::read(path)
        .map_err(|e| Error::config(format!("cannot read {key}{shown}")).with_source(e))?;
    if !String::from_utf8_lossy(&pem).contains("-----BEGIN") {
        return Err(Error::config(format!("{key}{shown} is not a PEM file")));
    }
    Ok(pem)
}

/// TLS for a connection: the PEM material the options named (none: the system's roots and no
/// client certificate) and the server name to check.
#[derive(Clone, Default)]
pub struct Tls {
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Secret)>,
    domain: Option<String>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("ca", &self.ca.is_some())
            .field("client_cert", &self.identity.is_some())
            .field("domain", &self.domain)
            .finish()
    }
}

impl Tls {
    /// PEM certificates of the CA(s) to trust (`tls_ca`), if given.
    pub fn ca(&self) -> Option<&[u8]> {
        self.ca.as_deref()
    }

    /// The client certificate chain and its private key, both PEM (`tls_cert`, `tls_key`).
    pub fn identity(&self) -> Option<(&[u8], &Secret)> {
        self.identity.as_ref().map(|(c, k)| (c.as_slice(), k))
    }

    /// The name to check in the server's certificate instead of the host (`tls_domain`).
    pub fn domain(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// Why TLS refused us, found by one handshake of our own with each of `hosts` (see
    /// [`tls_refusal`](crate::tls_probe::tls_refusal)); `None` without a `tls_ca` to probe with.
    #[cfg(feature = "tls-probe")]
    pub async fn refusal(
        &self,
        hosts: &[crate::HostPort],
        timeout: std::time::Duration,
    ) -> Option<String> {
        let pem = crate::tls_probe::TlsPem {
            ca: self.ca.as_deref()?,
            identity: self
                .identity
                .as_ref()
                .map(|(cert, key)| (cert.as_slice(), key.expose().as_bytes())),
        };
        let hosts = hosts
            .iter()
            .map(|h| {
                let name = self.domain.clone().unwrap_or_else(|| h.host.clone());
                (name, h.to_string())
            })
            .collect();
        crate::tls_probe::tls_refusal(pem, hosts, timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REDIS: TlsRules = TlsRules {
        backend: "Redis",
        domain: false,
        needs_ca: false,
    };
    const ZK: TlsRules = TlsRules {
        backend: "ZooKeeper",
        domain: false,
        needs_ca: true,
    };
    const fn scheme(name: &'static str, tls: bool) -> SchemeInfo {
        SchemeInfo {
            name,
            aliases: &[],
            default_port: None,
            tls,
        }
    }
    const REDIS_SCHEMES: &[SchemeInfo] = &[scheme("redis", false), scheme("rediss", true)];
    const ZK_SCHEMES: &[SchemeInfo] = &[scheme("zk", false)];

    fn given(pairs: &[(TlsKey, &str)]) -> Vec<(TlsKey, String)> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    #[test]
    fn tls_options_on_a_plain_url_are_config_errors() {
        let e = REDIS
            .resolve(REDIS_SCHEMES, "redis", &given(&[(TlsKey::Ca, "/x.pem")]))
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Config);
        assert!(
            e.message()
                .contains("tls_ca, tls_cert and tls_key need a TLS URL (rediss://)"),
            "{e}"
        );
        assert!(REDIS
            .resolve(REDIS_SCHEMES, "redis", &[])
            .unwrap()
            .is_none());
        let roots = REDIS
            .resolve(REDIS_SCHEMES, "rediss", &[])
            .unwrap()
            .unwrap();
        assert!(roots.ca().is_none() && roots.identity().is_none());
        assert!(ZK.resolve(ZK_SCHEMES, "zk", &[]).unwrap().is_none());
    }

    #[test]
    fn files_are_read_and_checked_naming_the_option_not_the_key_path() {
        let dir = std::env::temp_dir().join(format!("lockkit-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (pem, junk) = (dir.join("ca.pem"), dir.join("junk.txt"));
        std::fs::write(&pem, "-----BEGIN CERTIFICATE-----\n").unwrap();
        std::fs::write(&junk, "hello").unwrap();
        let (pem, junk) = (pem.to_str().unwrap(), junk.to_str().unwrap());

        let tls = ZK
            .resolve(ZK_SCHEMES, "zk", &given(&[(TlsKey::Ca, pem)]))
            .unwrap();
        assert_eq!(
            tls.unwrap().ca(),
            Some(&b"-----BEGIN CERTIFICATE-----\n"[..])
        );
        let e = ZK
            .resolve(ZK_SCHEMES, "zk", &given(&[(TlsKey::Ca, junk)]))
            .unwrap_err();
        assert!(e.message().contains("tls_ca") && e.message().contains("not a PEM"));
        let e = ZK
            .resolve(
                ZK_SCHEMES,
                "zk",
                &given(&[(TlsKey::Ca, pem), (TlsKey::Cert, pem), (TlsKey::Key, junk)]),
            )
            .unwrap_err();
        assert!(e.message().contains("tls_key is not a PEM file"), "{e}");
        assert!(!e.message().contains(junk), "the key's path is shown: {e}");
        let e = ZK
            .resolve(
                ZK_SCHEMES,
                "zk",
                &given(&[(TlsKey::Key, "/nonexistent/k.pem")]),
            )
            .unwrap_err();
        assert!(e.message().contains("go together"), "{e}");
        let e = ZK
            .resolve(
                ZK_SCHEMES,
                "zk",
                &given(&[(TlsKey::Cert, pem), (TlsKey::Key, pem)]),
            )
            .unwrap_err();
        assert!(
            e.message().contains("ZooKeeper over TLS needs tls_ca"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
