//! Helpers for the conformance suite and for backends' own tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

/// The test server URL for `backend` (`redis`, `zk`, `etcd`) from `LOCKKIT_TEST_<BACKEND>_URL`.
///
/// When the variable is missing: if `LOCKKIT_TEST_REQUIRE` names the backend (comma-separated, or
/// `all`) this panics, so a missing server fails the run; otherwise it returns `None` (skip).
pub fn server_url(backend: &str) -> Option<String> {
    let var = format!("LOCKKIT_TEST_{}_URL", backend.to_ascii_uppercase());
    let require = std::env::var("LOCKKIT_TEST_REQUIRE").unwrap_or_default();
    match resolve_url(backend, std::env::var(&var).ok(), &require) {
        Ok(Some(url)) => Some(url),
        Ok(None) => {
            eprintln!("skipping: {var} is not set (start servers with scripts/services.sh up)");
            None
        }
        Err(message) => panic!("{message}"),
    }
}

/// The decision behind [`server_url`]: the URL, a skip (`Ok(None)`), or a failure message.
fn resolve_url(
    backend: &str,
    url: Option<String>,
    require: &str,
) -> Result<Option<String>, String> {
    if let Some(url) = url.filter(|u| !u.is_empty()) {
        return Ok(Some(url));
    }
    let required = require
        .split(',')
        .map(str::trim)
        .any(|r| r.eq_ignore_ascii_case(backend) || r == "all");
    if required {
        let var = format!("LOCKKIT_TEST_{}_URL", backend.to_ascii_uppercase());
        return Err(format!(
            "{var} is not set but LOCKKIT_TEST_REQUIRE={require} requires the {backend} backend; \
             run `eval \"$(scripts/services.sh up)\"` first"
        ));
    }
    Ok(None)
}

/// A loopback TCP port that was free a moment ago, for a private server a test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral loopback port")
}

/// Whether `cmd version_arg` runs. When it does not and `LOCKKIT_TEST_REQUIRE` names `backend`
/// (or `all`), this panics: a test that needs a private server must not skip silently.
pub fn tool_available(cmd: &str, version_arg: &str, backend: &str) -> bool {
    let found = std::process::Command::new(cmd)
        .arg(version_arg)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let require = std::env::var("LOCKKIT_TEST_REQUIRE").unwrap_or_default();
    let required = require
        .split(',')
        .map(str::trim)
        .any(|r| r.eq_ignore_ascii_case(backend) || r == "all");
    if !found && required {
        panic!("`{cmd}` is needed for the {backend} tests (scripts/services.sh install)");
    }
    found
}

/// Paths of a throwaway CA and a server certificate for 127.0.0.1 signed by it (PEM).
#[derive(Debug, Clone)]
pub struct TestCerts {
    /// The CA certificate, to trust.
    pub ca: std::path::PathBuf,
    /// The server certificate (SAN IP:127.0.0.1 and DNS:localhost).
    pub cert: std::path::PathBuf,
    /// The server certificate's private key.
    pub key: std::path::PathBuf,
}

/// Makes a throwaway CA and a server certificate for 127.0.0.1 signed by it, in `dir`
/// (`ca.pem`, `ca.key`, `server.pem`, `server.key`), with rcgen.
pub fn make_test_certs(dir: &std::path::Path) -> TestCerts {
    std::fs::create_dir_all(dir).expect("create the certificate directory");
    let ca_key = rcgen::KeyPair::generate().expect("a CA key");
    let ca = ca_params()
        .self_signed(&ca_key)
        .expect("the CA certificate");
    write(dir, "ca.pem", &ca.pem());
    write(dir, "ca.key", &ca_key.serialize_pem());
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("server names");
    params.subject_alt_names.push(rcgen::SanType::IpAddress(
        std::net::Ipv4Addr::LOCALHOST.into(),
    ));
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "127.0.0.1");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let (cert, key) = signed(dir, "server", params, &ca, &ca_key);
    TestCerts {
        ca: dir.join("ca.pem"),
        cert,
        key,
    }
}

/// Paths of a client certificate and its key (PEM).
#[derive(Debug, Clone)]
pub struct ClientCert {
    /// The client certificate (extendedKeyUsage clientAuth, CN lockkit-client).
    pub cert: std::path::PathBuf,
    /// Its private key.
    pub key: std::path::PathBuf,
}

/// Makes a client certificate `NAME.pem` and key `NAME.key` in `dir`, signed by the CA that
/// [`make_test_certs`] made there.
pub fn make_client_cert(dir: &std::path::Path, name: &str) -> ClientCert {
    let pem = std::fs::read_to_string(dir.join("ca.key")).expect("the CA key (make_test_certs)");
    let ca_key = rcgen::KeyPair::from_pem(&pem).expect("a PEM key");
    // The same name and key as the CA: what a certificate it signs refers to.
    let ca = ca_params()
        .self_signed(&ca_key)
        .expect("the CA certificate");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "lockkit-client");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let (cert, key) = signed(dir, name, params, &ca, &ca_key);
    ClientCert { cert, key }
}

/// The test CA's parameters.
fn ca_params() -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "lockkit test CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// A new key `NAME.key` and certificate `NAME.pem` for `params` in `dir`, signed by `ca`.
fn signed(
    dir: &std::path::Path,
    name: &str,
    mut params: rcgen::CertificateParams,
    ca: &rcgen::Certificate,
    ca_key: &rcgen::KeyPair,
) -> (std::path::PathBuf, std::path::PathBuf) {
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    let key = rcgen::KeyPair::generate().expect("a key");
    let cert = params
        .signed_by(&key, ca, ca_key)
        .expect("a signed certificate");
    (
        write(dir, &format!("{name}.pem"), &cert.pem()),
        write(dir, &format!("{name}.key"), &key.serialize_pem()),
    )
}

fn write(dir: &std::path::Path, file: &str, pem: &str) -> std::path::PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, pem).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// A server process a test started, killed (and its directory, if any, removed) when dropped.
#[derive(Debug)]
pub struct PrivateServer {
    child: std::process::Child,
    dir: Option<std::path::PathBuf>,
}

impl PrivateServer {
    /// Spawns `command` with its output discarded (panics if it cannot start); `dir`, if given,
    /// is removed when the server is dropped.
    pub fn spawn(mut command: std::process::Command, dir: Option<std::path::PathBuf>) -> Self {
        let child = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {:?}: {e}", command.get_program()));
        PrivateServer { child, dir }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Waits until something accepts connections on `127.0.0.1:port`, polling every `every`;
/// panics naming `what` if that takes longer than `within`.
pub async fn wait_for_port(port: u16, within: Duration, every: Duration, what: &str) {
    let until = std::time::Instant::now() + within;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < until, "{what} did not start");
        tokio::time::sleep(every).await;
    }
}

/// A fresh name under a random prefix, so tests never meet each other's locks.
pub fn unique_name(case: &str) -> String {
    let n: u64 = rand::thread_rng().gen();
    format!("lktest-{n:016x}/{case}")
}

/// Counts holders inside a critical section and records any moment with more than allowed.
#[derive(Debug, Clone, Default)]
pub struct OverlapDetector {
    inside: Arc<AtomicUsize>,
    max_seen: Arc<AtomicUsize>,
}

impl OverlapDetector {
    /// A detector with nobody inside.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks entry; returns a token that marks exit on drop.
    pub fn enter(&self) -> OverlapScope {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_seen.fetch_max(now, Ordering::SeqCst);
        OverlapScope {
            inside: self.inside.clone(),
        }
    }

    /// The most holders ever inside at once.
    pub fn max_inside(&self) -> usize {
        self.max_seen.load(Ordering::SeqCst)
    }
}

/// Marks exit from an [`OverlapDetector`]'s section when dropped.
#[derive(Debug)]
pub struct OverlapScope {
    inside: Arc<AtomicUsize>,
}

impl Drop for OverlapScope {
    fn drop(&mut self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Reads an election's observer until it shows `want` (a leader's value; `None`: nobody
/// leads), skipping other states and errors (a watch or session that restarted); panics after
/// 20 s without it. Returns how many errors it skipped.
pub async fn observe_until(
    changes: &mut lockkit_core::LeaderChanges,
    want: Option<&[u8]>,
) -> usize {
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut errors = 0;
    loop {
        let item = tokio::time::timeout_at(until, changes.next())
            .await
            .unwrap_or_else(|_| panic!("the observer never showed {want:?}"))
            .expect("the observer stream is open");
        match item {
            Ok(seen) if seen.as_ref().map(|l| l.value()) == want => return errors,
            Ok(_) => {}
            Err(_) => errors += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::resolve_url;

    #[test]
    fn a_required_backend_without_url_fails_instead_of_skipping() {
        assert_eq!(
            resolve_url("redis", Some("redis://h".into()), ""),
            Ok(Some("redis://h".into()))
        );
        assert_eq!(resolve_url("redis", None, ""), Ok(None));
        assert_eq!(resolve_url("redis", None, "zk,etcd"), Ok(None));
        assert!(resolve_url("redis", None, "redis,zk,etcd").is_err());
        assert!(resolve_url("redis", Some(String::new()), "redis").is_err());
        assert!(resolve_url("zk", None, "all").is_err());
    }
}
