//! TLS for `etcds://` URLs: the CA to trust and an optional client certificate, from options.

use etcd_client::{Certificate, Identity, TlsOptions};
use lockkit_core::settings::Settings;
use lockkit_core::{Error, Result};

use crate::EtcdKey;

/// TLS options from `tls_ca` (PEM file of the CA that signed the server's certificate; without
/// it the server must present a certificate that a public root signed), `tls_cert` + `tls_key`
/// (PEM files of a client certificate, for servers started with `--client-cert-auth`) and
/// `tls_domain` (the name to check in the server's certificate, when it differs from the host
/// in the URL).
pub(crate) fn options(cfg: &Settings<EtcdKey>) -> Result<TlsOptions> {
    let mut tls = TlsOptions::new();
    if let Some(ca) = cfg.get(EtcdKey::TlsCa) {
        tls = tls.ca_certificate(Certificate::from_pem(read(ca, "tls_ca")?));
    }
    match (cfg.get(EtcdKey::TlsCert), cfg.get(EtcdKey::TlsKey)) {
        (Some(cert), Some(key)) => {
            tls = tls.identity(Identity::from_pem(
                read(cert, "tls_cert")?,
                read(key, "tls_key")?,
            ));
        }
        (None, None) => {}
        _ => {
            return Err(Error::config(
                "tls_cert and tls_key go together: give both or neither",
            ))
        }
    }
    if let Some(domain) = cfg.get(EtcdKey::TlsDomain) {
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
    cfg: &Settings<EtcdKey>,
    hosts: &[lockkit_core::HostPort],
    timeout: std::time::Duration,
) -> Option<String> {
    let ca = std::fs::read(cfg.get(EtcdKey::TlsCa)?).ok()?;
    let identity = match (cfg.get(EtcdKey::TlsCert), cfg.get(EtcdKey::TlsKey)) {
        (Some(cert), Some(key)) => Some((std::fs::read(cert).ok()?, std::fs::read(key).ok()?)),
        _ => None,
    };
    let pem = lockkit_core::tls_probe::TlsPem {
        ca: &ca,
        identity: identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice())),
    };
    let domain = cfg.get(EtcdKey::TlsDomain).map(str::to_string);
    let hosts = hosts
        .iter()
        .map(|h| {
            (
                domain.clone().unwrap_or_else(|| h.host.clone()),
                h.to_string(),
            )
        })
        .collect();
    lockkit_core::tls_probe::tls_refusal(pem, hosts, timeout).await
}
