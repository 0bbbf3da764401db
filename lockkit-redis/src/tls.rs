//! TLS for `rediss://`: the CA to trust and an optional client certificate, as the core read
//! them from the `tls_ca`, `tls_cert` and `tls_key` options, handed to redis-rs.

#[cfg(feature = "tls")]
use lockkit_core::{Error, ErrorKind};
use lockkit_core::{Result, Tls};

/// The certificates of `tls` for redis-rs, or `None` when no option named any (system roots,
/// no client certificate).
#[cfg(feature = "tls")]
fn certificates(tls: &Tls) -> Option<redis::TlsCertificates> {
    if tls.ca().is_none() && tls.identity().is_none() {
        return None;
    }
    Some(redis::TlsCertificates {
        client_tls: tls.identity().map(|(cert, key)| redis::ClientTlsConfig {
            client_cert: cert.to_vec(),
            client_key: key.expose().as_bytes().to_vec(),
        }),
        root_cert: tls.ca().map(<[u8]>::to_vec),
    })
}

/// A redis-rs client for `info` with `tls` applied (for a `rediss://` address).
pub(crate) fn client(info: redis::ConnectionInfo, tls: Option<&Tls>) -> Result<redis::Client> {
    #[cfg(feature = "tls")]
    {
        if matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            // rustls needs a process-wide crypto provider; install ring's unless the
            // application installed one already.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        if let Some(certs) = tls.and_then(certificates) {
            return redis::Client::build_with_tls(info, certs).map_err(setup_error);
        }
    }
    #[cfg(not(feature = "tls"))]
    debug_assert!(
        tls.is_none_or(|t| t.ca().is_none() && t.identity().is_none()),
        "TLS options are rejected without rediss://"
    );
    redis::Client::open(info).map_err(|e| crate::error::map(e, "client setup"))
}

/// A certificate or key redis-rs could not use: the files are wrong, so retrying cannot help.
#[cfg(feature = "tls")]
pub(crate) fn setup_error(e: redis::RedisError) -> Error {
    Error::new(
        ErrorKind::Config,
        "redis: the TLS certificate or key files are not usable (tls_ca, tls_cert, tls_key)",
    )
    .with_retryable(false)
    .with_source(e)
}
