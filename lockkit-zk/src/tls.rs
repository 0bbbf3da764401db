//! TLS to ZooKeeper's secure client port (`secureClientPort`), from the options `tls_ca` (PEM
//! file of the CA that signed the servers' certificates) and `tls_cert` + `tls_key` (a client
//! certificate and its private key, for servers started with `ssl.clientAuth=need`). Any of them
//! turns TLS on for every host of the URL; the server name checked is the URL's host.

use lockkit_core::{Error, LockConfig, Result, Secret};

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
    pub(crate) fn from_config(cfg: &LockConfig) -> Result<Option<Tls>> {
        let (ca, cert, key) = (
            cfg.option("tls_ca"),
            cfg.option("tls_cert"),
            cfg.option("tls_key"),
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
            (Some(cert), Some(key)) => Some((
                read(&cert, "tls_cert")?,
                Secret::new(read(&key, "tls_key")?),
            )),
            (None, None) => None,
            _ => {
                return Err(Error::config(
                    "tls_cert and tls_key go together: give both or neither",
                ))
            }
        };
        let tls = Tls {
            ca: read(&ca, "tls_ca")?,
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

/// Why TLS refused us, found by one handshake of our own with each host. The ZooKeeper client
/// reports a failed handshake only as "no available hosts", which would look retryable; a
/// certificate the server rejects, or one we do not trust, never gets better by retrying.
#[cfg(feature = "tls")]
pub(crate) mod probe {
    use std::io::Read;
    use std::net::{TcpStream, ToSocketAddrs};
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use rustls::{AlertDescription, ClientConfig, ClientConnection, RootCertStore};

    use super::Tls;

    /// The first certificate refusal met on `hosts` (`host:port,host:port`), if any.
    pub(crate) async fn refusal(tls: &Tls, hosts: &str, timeout: Duration) -> Option<String> {
        let config = client_config(tls)?;
        let hosts: Vec<String> = hosts.split(',').map(str::to_string).collect();
        tokio::task::spawn_blocking(move || {
            hosts.iter().find_map(|h| handshake(&config, h, timeout))
        })
        .await
        .ok()
        .flatten()
    }

    fn client_config(tls: &Tls) -> Option<Arc<ClientConfig>> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(tls.ca.as_bytes()).flatten() {
            roots.add(cert).ok()?;
        }
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .ok()?
                .with_root_certificates(roots);
        let config = match &tls.identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    CertificateDer::pem_slice_iter(cert.as_bytes())
                        .flatten()
                        .collect(),
                    PrivateKeyDer::from_pem_slice(key.expose().as_bytes()).ok()?,
                )
                .ok()?,
        };
        Some(Arc::new(config))
    }

    fn handshake(config: &Arc<ClientConfig>, host_port: &str, timeout: Duration) -> Option<String> {
        let (host, _) = host_port.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string()).ok()?;
        let addr = host_port.to_socket_addrs().ok()?.next()?;
        let mut tcp = TcpStream::connect_timeout(&addr, timeout).ok()?;
        tcp.set_read_timeout(Some(timeout)).ok()?;
        tcp.set_write_timeout(Some(timeout)).ok()?;
        let mut conn = ClientConnection::new(config.clone(), name).ok()?;
        // Finish the handshake, then read once, briefly: with TLS 1.3 a server that refuses our
        // certificate says so only after our side of the handshake is done, within
        // milliseconds. A ZooKeeper server that accepted us sends nothing, and the read times
        // out.
        let err = loop {
            if conn.is_handshaking() {
                match conn.complete_io(&mut tcp) {
                    Ok(_) => continue,
                    Err(e) => break e,
                }
            }
            tcp.set_read_timeout(Some(timeout.min(Duration::from_millis(500))))
                .ok()?;
            let mut byte = [0u8; 1];
            match rustls::Stream::new(&mut conn, &mut tcp).read_exact(&mut byte) {
                Ok(()) => return None,
                Err(e) => break e,
            }
        };
        let tls = err.get_ref()?.downcast_ref::<rustls::Error>()?;
        match tls {
            rustls::Error::InvalidCertificate(why) => Some(format!(
                "the server's certificate is not trusted ({why:?}); check tls_ca"
            )),
            rustls::Error::AlertReceived(
                alert @ (AlertDescription::BadCertificate
                | AlertDescription::CertificateExpired
                | AlertDescription::CertificateRevoked
                | AlertDescription::CertificateUnknown
                | AlertDescription::CertificateRequired
                | AlertDescription::UnknownCA
                | AlertDescription::AccessDenied
                | AlertDescription::HandshakeFailure),
            ) => Some(format!(
                "the server refused our client certificate ({alert:?}); check tls_cert and tls_key"
            )),
            _ => None,
        }
    }
}
