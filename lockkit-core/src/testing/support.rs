//! Helpers for the conformance suite and for backends' own tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
