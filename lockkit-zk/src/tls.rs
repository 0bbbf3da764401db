//! TLS to ZooKeeper's secure client port (`secureClientPort`): the core's [`Tls`] from the
//! options `tls_ca` (PEM file of the CA that signed the servers' certificates) and `tls_cert` +
//! `tls_key` (a client certificate and its private key, for servers started with
//! `ssl.clientAuth=need`). Any of them turns TLS on for every host of the URL; the server name
//! checked is the URL's host.

use lockkit_core::{Error, Result, Tls, TlsRules};

/// The TLS options of `zk://`: they turn TLS on, and the client has no system roots.
pub(crate) const RULES: TlsRules = TlsRules {
    backend: "ZooKeeper",
    domain: false,
    needs_ca: true,
};

/// Checks that TLS can be used as `tls` asks: the feature is compiled in and the PEM files
/// hold what they should.
pub(crate) fn check(tls: &Tls) -> Result<()> {
    #[cfg(feature = "tls")]
    return options(tls).map(drop);
    #[cfg(not(feature = "tls"))]
    {
        let _ = tls;
        Err(Error::config(
            "ZooKeeper over TLS (tls_ca, tls_cert, tls_key) needs the `tls` feature of lockkit-zk",
        ))
    }
}

/// The client's TLS options.
#[cfg(feature = "tls")]
pub(crate) fn options(tls: &Tls) -> Result<zookeeper_client::TlsOptions> {
    // rustls needs a process-wide crypto provider; install ring's unless one is there.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let text = |pem: &[u8]| String::from_utf8_lossy(pem).into_owned();
    let ca = tls.ca().map(text).unwrap_or_default();
    let options = zookeeper_client::TlsOptions::new()
        .with_pem_ca(&ca)
        .map_err(|_| Error::config("tls_ca holds no usable PEM certificate"))?;
    match tls.identity() {
        None => Ok(options),
        // The client's message for a bad key is dropped: it is not needed to fix the file.
        Some((cert, key)) => options
            .with_pem_identity(&text(cert), key.expose())
            .map_err(|_| {
                Error::config("tls_cert / tls_key hold no usable PEM certificate and private key")
            }),
    }
}
