//! TLS for `etcds://` URLs: the core's [`Tls`] (from `tls_ca`, `tls_cert`, `tls_key` and
//! `tls_domain`) as etcd-client's options, and why a handshake was refused.

use etcd_client::{Certificate, Identity, TlsOptions};
use lockkit_core::settings::Settings;
use lockkit_core::{Tls, TlsRules};

use crate::EtcdKey;

/// The TLS options of `etcds://`: without `tls_ca` the server must present a certificate that
/// a public root signed; `tls_domain` is the name to check when it differs from the host.
pub(crate) const RULES: TlsRules = TlsRules {
    backend: "etcd",
    scheme: Some("etcds"),
    domain: true,
    needs_ca: false,
};

/// etcd-client's options for `tls`.
pub(crate) fn options(tls: &Tls) -> TlsOptions {
    let mut options = TlsOptions::new();
    if let Some(ca) = tls.ca() {
        options = options.ca_certificate(Certificate::from_pem(ca));
    }
    if let Some((cert, key)) = tls.identity() {
        options = options.identity(Identity::from_pem(cert, key.expose()));
    }
    if let Some(domain) = tls.domain() {
        options = options.domain_name(domain);
    }
    options
}

/// Why TLS refused us ([`Tls::refusal`]): etcd-client reports a client certificate the server
/// rejects (expired, missing, from another CA) sometimes as the server's alert and sometimes
/// only as a closed connection, which would look retryable. `None` when every handshake
/// succeeds or fails for another reason.
pub(crate) async fn refusal(
    settings: &Settings<EtcdKey>,
    hosts: &[lockkit_core::HostPort],
) -> Option<String> {
    let tls = settings.tls()?;
    tls.refusal(hosts, settings.connect_timeout()).await
}
