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

/// Makes a CA and a server certificate with `openssl` in `dir` (valid for two days).
pub fn make_test_certs(dir: &std::path::Path) -> TestCerts {
    std::fs::create_dir_all(dir).expect("create the certificate directory");
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .expect("write server.ext");
    openssl(
        dir,
        &[
            &[
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
                "ca.pem",
            ][..],
            &DAYS,
            &["-subj", "/CN=lockkit test CA"],
        ]
        .concat(),
    );
    let (cert, key) = signed_cert(dir, "server", "/CN=127.0.0.1", "server.ext");
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

/// Makes a client certificate `NAME.pem` and key `NAME.key` in `dir` with `openssl`, signed by
/// the CA that [`make_test_certs`] made there (valid for two days).
pub fn make_client_cert(dir: &std::path::Path, name: &str) -> ClientCert {
    std::fs::write(
        dir.join("client.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
         extendedKeyUsage=clientAuth\n",
    )
    .expect("write client.ext");
    let (cert, key) = signed_cert(dir, name, "/CN=lockkit-client", "client.ext");
    ClientCert { cert, key }
}

/// How long the test certificates are valid, as `openssl` arguments.
const DAYS: [&str; 2] = ["-days", "2"];

/// Runs `openssl ARGS...` in `dir`; panics if it fails.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let ok = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl runs")
        .success();
    assert!(ok, "openssl {args:?}");
}

/// A new key `NAME.key` and certificate `NAME.pem` for `subject` in `dir`, signed by the CA
/// `ca.pem` / `ca.key` there with the extensions of `ext` (a file in `dir`).
fn signed_cert(
    dir: &std::path::Path,
    name: &str,
    subject: &str,
    ext: &str,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subject,
        ],
    );
    openssl(
        dir,
        &[
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
            ][..],
            &DAYS,
            &["-extfile", ext],
        ]
        .concat(),
    );
    (dir.join(pem), dir.join(key))
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
