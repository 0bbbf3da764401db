//! TLS to ZooKeeper's secure client port (`secureClientPort`), from the options `tls_ca` (PEM
//! file of the CA that signed the servers' certificates) and `tls_cert` + `tls_key` (a client
//! certificate and its private key, for servers started with `ssl.clientAuth=need`). Any of them
//! turns TLS on for every host of the URL; the server name checked is the URL's host.

use lockkit_core::settings::Settings;
use lockkit_core::{Error, Result, Secret};

use crate::keys::ZkKey;

/// The PEM material read from the option files. The key stays a [`Secret`].
#[derive(Clone)]
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub(crate) struct Tls {
    ca: String,
    identity: Option<(String, Secret)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("client_cert", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// `None` when no TLS option is given.
    pub(crate) fn from_settings(cfg: &Settings<ZkKey>) -> Result<Option<Tls>> {
        let (ca, cert, key) = (
            cfg.get(ZkKey::TlsCa),
            cfg.get(ZkKey::TlsCert),
            cfg.get(ZkKey::TlsKey),
        );
        if ca.is_none() && cert.is_none() && key.is_none() {
            return Ok(None);
        }
        if !cfg!(feature = "tls") {
            return Err(Error::config(
                "ZooKeeper over TLS (tls_ca, tls_cert, tls_key) needs the `tls` feature of lockkit-zk",
            ));
        }
        let ca = ca.ok_or_else(|| {
            Error::config(
                "ZooKeeper over TLS needs tls_ca: the CA that signed the server's certificate",
            )
        })?;
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => {
                Some((read(cert, "tls_cert")?, Secret::new(read(key, "tls_key")?)))
            }
            (None, None) => None,
            _ => {
                return Err(Error::config(
                    "tls_cert and tls_key go together: give both or neither",
                ))
            }
        };
        let tls = Tls {
            ca: read(ca, "tls_ca")?,
            identity,
        };
        #[cfg(feature = "tls")]
        tls.options()?;
        Ok(Some(tls))
    }

    /// The client's TLS options (checks that the PEM files hold what they should).
    #[cfg(feature = "tls")]
    pub(crate) fn options(&self) -> Result<zookeeper_client::TlsOptions> {
        // rustls needs a process-wide crypto provider; install ring's unless one is there.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let options = zookeeper_client::TlsOptions::new()
            .with_pem_ca(&self.ca)
            .map_err(|_| Error::config("tls_ca holds no usable PEM certificate"))?;
        match &self.identity {
            None => Ok(options),
            // The client's message for a bad key is dropped: it is not needed to fix the file.
            Some((cert, key)) => options.with_pem_identity(cert, key.expose()).map_err(|_| {
                Error::config("tls_cert / tls_key hold no usable PEM certificate and private key")
            }),
        }
    }
}

fn read(path: &str, option: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::config(format!("{option}: cannot read {path:?}: {e}")))
}

/// Why TLS refused us, found by one handshake of our own with each host
/// ([`lockkit_core::tls_probe`]). The ZooKeeper client reports a failed handshake only as "no
/// available hosts", which would look retryable; a certificate the server rejects, or one we do
/// not trust, never gets better by retrying.
#[cfg(feature = "tls")]
pub(crate) async fn refusal(
    tls: &Tls,
    hosts: &str,
    timeout: std::time::Duration,
) -> Option<String> {
    let pem = lockkit_core::tls_probe::TlsPem {
        ca: tls.ca.as_bytes(),
        identity: tls
            .identity
            .as_ref()
            .map(|(cert, key)| (cert.as_bytes(), key.expose().as_bytes())),
    };
    let hosts = hosts
        .split(',')
        .filter_map(|h| {
            let (host, _) = h.rsplit_once(':')?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            Some((host.to_string(), h.to_string()))
        })
        .collect();
    lockkit_core::tls_probe::tls_refusal(pem, hosts, timeout).await
}
