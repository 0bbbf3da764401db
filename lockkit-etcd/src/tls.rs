//! TLS for `etcds://` URLs: the core's [`Tls`] (from `tls_ca`, `tls_cert`, `tls_key` and
//! `tls_domain`) as etcd-client's options.

use etcd_client::{Certificate, Identity, TlsOptions};
use lockkit_core::{Tls, TlsRules};

/// The TLS options of `etcds://`: without `tls_ca` the server must present a certificate that
/// a public root signed; `tls_domain` is the name to check when it differs from the host.
pub(crate) const RULES: TlsRules = TlsRules {
    backend: "etcd",
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
