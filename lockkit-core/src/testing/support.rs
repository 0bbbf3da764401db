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
    match std::env::var(&var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let required = std::env::var("LOCKKIT_TEST_REQUIRE").unwrap_or_default();
            let is_required = required
                .split(',')
                .map(str::trim)
                .any(|r| r.eq_ignore_ascii_case(backend) || r == "all");
            if is_required {
                panic!(
                    "{var} is not set but LOCKKIT_TEST_REQUIRE={required} requires the {backend} \
                     backend; run `eval \"$(scripts/services.sh up)\"` first"
                );
            }
            eprintln!("skipping: {var} is not set (start servers with scripts/services.sh up)");
            None
        }
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
