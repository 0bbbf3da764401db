//! TLS for `etcds://` URLs: the CA to trust and an optional client certificate, from options.

use etcd_client::{Certificate, Identity, TlsOptions};
use lockkit_core::{Error, LockConfig, Result};

/// TLS options from `tls_ca` (PEM file of the CA that signed the server's certificate; without
/// it the server must present a certificate that a public root signed), `tls_cert` + `tls_key`
/// (PEM files of a client certificate, for servers started with `--client-cert-auth`) and
/// `tls_domain` (the name to check in the server's certificate, when it differs from the host
/// in the URL).
pub(crate) fn options(cfg: &LockConfig) -> Result<TlsOptions> {
    let mut tls = TlsOptions::new();
    if let Some(ca) = cfg.option("tls_ca") {
        tls = tls.ca_certificate(Certificate::from_pem(read(&ca, "tls_ca")?));
    }
    match (cfg.option("tls_cert"), cfg.option("tls_key")) {
        (Some(cert), Some(key)) => {
            tls = tls.identity(Identity::from_pem(
                read(&cert, "tls_cert")?,
                read(&key, "tls_key")?,
            ));
        }
        (None, None) => {}
        _ => {
            return Err(Error::config(
                "tls_cert and tls_key go together: give both or neither",
            ))
        }
    }
    if let Some(domain) = cfg.option("tls_domain") {
        tls = tls.domain_name(domain);
    }
    Ok(tls)
}

fn read(path: &str, option: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::config(format!("cannot read {option} file {path:?}: {e}")).with_source(e)
    })
}

/// Why TLS refused us, found by one handshake of our own with each host: etcd-client reports a
/// client certificate the server rejects (expired, missing, from another CA) sometimes as the
/// server's alert and sometimes only as a closed connection, which would look retryable.
/// `None` when every handshake succeeds or fails for another reason.
pub(crate) async fn refusal(
    cfg: &LockConfig,
    hosts: &[lockkit_core::HostPort],
    timeout: std::time::Duration,
) -> Option<String> {
    let config = probe_config(cfg)?;
    let domain = cfg.option("tls_domain");
    let hosts: Vec<(String, String)> = hosts
        .iter()
        .map(|h| {
            (
                domain.clone().unwrap_or_else(|| h.host.clone()),
                h.to_string(),
            )
        })
        .collect();
    tokio::task::spawn_blocking(move || {
        hosts
            .iter()
            .find_map(|(name, addr)| handshake(&config, name, addr, timeout))
    })
    .await
    .ok()
    .flatten()
}

fn probe_config(cfg: &LockConfig) -> Option<std::sync::Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(cfg.option("tls_ca")?).ok()?;
    for cert in CertificateDer::pem_slice_iter(&ca).flatten() {
        roots.add(cert).ok()?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .ok()?
    .with_root_certificates(roots);
    let config = match (cfg.option("tls_cert"), cfg.option("tls_key")) {
        (Some(cert), Some(key)) => {
            let cert = std::fs::read(cert).ok()?;
            let key = std::fs::read(key).ok()?;
            builder
                .with_client_auth_cert(
                    CertificateDer::pem_slice_iter(&cert).flatten().collect(),
                    PrivateKeyDer::from_pem_slice(&key).ok()?,
                )
                .ok()?
        }
        _ => builder.with_no_client_auth(),
    };
    Some(std::sync::Arc::new(config))
}

fn handshake(
    config: &std::sync::Arc<rustls::ClientConfig>,
    name: &str,
    addr: &str,
    timeout: std::time::Duration,
) -> Option<String> {
    use rustls::AlertDescription as A;
    use std::io::Read;
    use std::net::ToSocketAddrs;
    let name = rustls::pki_types::ServerName::try_from(name.to_string()).ok()?;
    let addr = addr.to_socket_addrs().ok()?.next()?;
    let mut tcp = std::net::TcpStream::connect_timeout(&addr, timeout).ok()?;
    tcp.set_read_timeout(Some(timeout)).ok()?;
    tcp.set_write_timeout(Some(timeout)).ok()?;
    let mut conn = rustls::ClientConnection::new(config.clone(), name).ok()?;
    // Finish the handshake, then read once, briefly: with TLS 1.3 a server that refuses our
    // certificate says so only after our side of the handshake is done, within milliseconds.
    // An etcd server that accepted us waits for the HTTP/2 preface, and the read times out.
    let err = loop {
        if conn.is_handshaking() {
            match conn.complete_io(&mut tcp) {
                Ok(_) => continue,
                Err(e) => break e,
            }
        }
        tcp.set_read_timeout(Some(timeout.min(std::time::Duration::from_millis(500))))
            .ok()?;
        let mut byte = [0u8; 1];
        match rustls::Stream::new(&mut conn, &mut tcp).read_exact(&mut byte) {
            Ok(()) => return None,
            Err(e) => break e,
        }
    };
    match err.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(why) => Some(format!(
            "the server's certificate is not trusted ({why:?}); check tls_ca"
        )),
        rustls::Error::AlertReceived(
            alert @ (A::BadCertificate
            | A::CertificateExpired
            | A::CertificateRevoked
            | A::CertificateUnknown
            | A::CertificateRequired
            | A::UnknownCA
            | A::AccessDenied
            | A::HandshakeFailure),
        ) => Some(format!(
            "the server refused our client certificate ({alert:?}); check tls_cert and tls_key"
        )),
        _ => None,
    }
}
