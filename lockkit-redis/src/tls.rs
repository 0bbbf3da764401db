//! TLS for `rediss://`: the CA to trust and an optional client certificate, read from the PEM
//! files named by the `tls_ca`, `tls_cert` and `tls_key` options.

use lockkit_core::Result;
#[cfg(feature = "tls")]
use lockkit_core::{Error, ErrorKind};

use crate::config::TlsFiles;

/// The certificates for `files`, or `None` when no option was given (system roots, no client
/// certificate). Errors name the option, and the path except for `tls_key` (whose value is
/// treated as a secret, like every `*key` option); never a file's contents.
#[cfg(feature = "tls")]
pub(crate) fn certificates(files: &TlsFiles) -> Result<Option<redis::TlsCertificates>> {
    if files.is_empty() {
        return Ok(None);
    }
    let read = |path: &std::path::Path, what: &str| {
        let shown = if what == "tls_key" {
            String::new()
        } else {
            format!(" {}", path.display())
        };
        let pem = std::fs::read(path)
            .map_err(|e| Error::config(format!("cannot read {what}{shown}: {e}")))?;
        if !String::from_utf8_lossy(&pem).contains("-----BEGIN") {
            return Err(Error::config(format!("{what}{shown} is not a PEM file")));
        }
        Ok(pem)
    };
    let root_cert = files.ca.as_deref().map(|p| read(p, "tls_ca")).transpose()?;
    let client_tls = match &files.client {
        Some((cert, key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert, "tls_cert")?,
            client_key: read(key, "tls_key")?,
        }),
        None => None,
    };
    Ok(Some(redis::TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// A redis-rs client for `info` with `files` applied (for a `rediss://` address).
pub(crate) fn client(info: redis::ConnectionInfo, files: &TlsFiles) -> Result<redis::Client> {
    #[cfg(feature = "tls")]
    {
        if matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            // rustls needs a process-wide crypto provider; install ring's unless the
            // application installed one already.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        if let Some(certs) = certificates(files)? {
            return redis::Client::build_with_tls(info, certs).map_err(setup_error);
        }
    }
    #[cfg(not(feature = "tls"))]
    debug_assert!(
        files.is_empty(),
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
