//! Why a TLS connection was refused, by one rule (feature `tls-probe`): read from the TLS error
//! a client passes along ([`refusal_in`]), or found by one handshake of our own with each host
//! where the client hides it ([`tls_refusal`]).
//!
//! A certificate the server rejects, one we do not trust, or a handshake the two sides cannot
//! agree on never gets better by retrying: a backend that sees such a failure returns `Auth`.
//! Some clients report it only as "no hosts" or "connection closed", which looks retryable;
//! those ask [`tls_refusal`].

use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription as A, ClientConfig, ClientConnection, RootCertStore};

/// The PEM material of a TLS client: the CA to trust and an optional client certificate.
#[derive(Clone, Copy)]
pub struct TlsPem<'a> {
    /// PEM certificates of the CA(s) that signed the servers' certificates.
    pub ca: &'a [u8],
    /// PEM client certificate chain and private key.
    pub identity: Option<(&'a [u8], &'a [u8])>,
}

impl std::fmt::Debug for TlsPem<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsPem")
            .field("client_cert", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

/// The first certificate refusal met on `hosts` (pairs of the server name to check and the
/// `host:port` to connect to), as a message naming the option to fix; `None` when every
/// handshake succeeds or fails for another reason (the server is down, the PEM is unusable).
///
/// Each host gets one handshake, then one short read (at most 500 ms): with TLS 1.3 a server
/// that refuses our certificate says so only after our side of the handshake is done.
pub async fn tls_refusal(
    pem: TlsPem<'_>,
    hosts: Vec<(String, String)>,
    timeout: Duration,
) -> Option<String> {
    let config = client_config(pem)?;
    tokio::task::spawn_blocking(move || {
        hosts
            .iter()
            .find_map(|(name, addr)| handshake(&config, name, addr, timeout))
    })
    .await
    .ok()
    .flatten()
}

fn client_config(pem: TlsPem<'_>) -> Option<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.ca).flatten() {
        roots.add(cert).ok()?;
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots);
    let config = match pem.identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert).flatten().collect(),
                PrivateKeyDer::from_pem_slice(key).ok()?,
            )
            .ok()?,
    };
    Some(Arc::new(config))
}

fn handshake(
    config: &Arc<ClientConfig>,
    name: &str,
    addr: &str,
    timeout: Duration,
) -> Option<String> {
    let name = ServerName::try_from(name.to_string()).ok()?;
    let addr = addr.to_socket_addrs().ok()?.next()?;
    let mut tcp = TcpStream::connect_timeout(&addr, timeout).ok()?;
    tcp.set_read_timeout(Some(timeout)).ok()?;
    tcp.set_write_timeout(Some(timeout)).ok()?;
    let mut conn = ClientConnection::new(config.clone(), name).ok()?;
    // Finish the handshake, then read once, briefly: a server that refused our certificate says
    // so within milliseconds; one that accepted us waits for its protocol's first message, and
    // the read times out.
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
    refusal_in(&err)
}

/// The refusal carried somewhere in `e`'s chain of sources, as a message naming the option to
/// fix; `None` when the chain holds no TLS refusal. The chain is read by
/// [`find_source`](crate::find_source), which looks through the wrappers client libraries put
/// around a TLS error.
pub fn refusal_in(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    crate::find_source::<rustls::Error>(e).and_then(refusal)
}

/// Whether a TLS error is a refusal, which retrying cannot fix, and what to check: a
/// certificate either side rejects, a fatal alert from the server (but for a transient
/// `InternalError`), a handshake the two sides cannot agree on. A message that is not TLS (a
/// plain server on the port) is not one.
fn refusal(e: &rustls::Error) -> Option<String> {
    match e {
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
            | A::DecryptError
            | A::HandshakeFailure),
        ) => Some(format!(
            "the server refused our client certificate ({alert:?}); check tls_cert and tls_key"
        )),
        rustls::Error::AlertReceived(A::CloseNotify | A::UserCanceled | A::InternalError) => None,
        rustls::Error::AlertReceived(alert) => Some(format!(
            "the server refused the TLS handshake ({alert:?}); check the server's TLS settings"
        )),
        rustls::Error::NoCertificatesPresented | rustls::Error::InvalidCertRevocationList(_) => {
            Some(format!(
                "the certificates do not serve ({e}); check tls_ca, tls_cert and tls_key"
            ))
        }
        rustls::Error::PeerIncompatible(_) | rustls::Error::PeerMisbehaved(_) => Some(format!(
            "the server's TLS cannot be agreed with ({e}); check the server's TLS settings"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_found_through_io_and_shared_wrappers() {
        let tls = rustls::Error::AlertReceived(A::UnknownCA);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let why = refusal_in(&io).expect("inside an io::Error");
        assert!(
            why.contains("UnknownCA") && why.contains("tls_cert"),
            "{why}"
        );

        let shared: Arc<dyn std::error::Error + Send + Sync> = Arc::new(io);
        assert!(refusal_in(&shared).is_some(), "behind an Arc");

        /// A client's own error that names the shared one as its source.
        #[derive(Debug)]
        struct Wrapper(Arc<dyn std::error::Error + Send + Sync>);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("transport error")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        assert!(refusal_in(&Wrapper(shared)).is_some(), "as a source");
    }

    #[test]
    fn other_tls_and_io_errors_are_not_refusals() {
        let corrupt = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, corrupt);
        assert_eq!(refusal_in(&io), None);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(refusal_in(&reset), None);
    }
}
