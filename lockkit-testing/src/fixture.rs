//! What a suite's config fn hands each case: the configuration, and whatever must live until
//! the case's test fn returns.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::Rng;

use lockkit_core::LockConfig;

/// A case's configuration together with what it owns. The conformance suite's macros keep the
/// fixture until the case's test fn returns, then drop it, so a scratch directory is removed
/// even when the case panics. (Tasks the case spawned and never awaited can outlive it.)
pub trait Fixture {
    /// The configuration the case connects with.
    fn config(&self) -> LockConfig;
}

/// A server backend's configuration owns nothing.
impl Fixture for LockConfig {
    fn config(&self) -> LockConfig {
        self.clone()
    }
}

/// A `file://` configuration in a fresh directory under the system's temporary directory, removed
/// with everything in it when dropped. Tests of `file://` outside the suite use it too, through
/// [`ScratchDir::path`] and [`ScratchDir::url`].
#[derive(Debug)]
pub struct ScratchDir {
    dir: PathBuf,
}

impl ScratchDir {
    /// A fresh directory named `lockkit-<label>-<pid>-<random>`. It is not created here: the
    /// `file://` backend creates it on connect.
    pub fn new(label: &str) -> Self {
        let random: u64 = rand::thread_rng().gen();
        let dir = std::env::temp_dir().join(format!(
            "lockkit-{label}-{}-{random:016x}",
            std::process::id()
        ));
        Self { dir }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The directory's `file://` URL.
    pub fn url(&self) -> String {
        format!("file://{}", self.dir.display())
    }
}

impl Fixture for ScratchDir {
    fn config(&self) -> LockConfig {
        LockConfig::new(self.url())
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // A file written while the tree is being removed (a token drawn on a blocking thread by
        // an acquire the case dropped) makes the removal fail: try again a few times.
        for attempt in 0..5 {
            match std::fs::remove_dir_all(&self.dir) {
                Ok(()) => return,
                // A case that never connected never created it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) if attempt == 4 => {
                    eprintln!("could not remove {}: {e}", self.dir.display());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_dir_is_removed_with_its_contents_when_dropped() {
        let scratch = ScratchDir::new("fixture-test");
        let path = scratch.path().to_path_buf();
        std::fs::create_dir_all(path.join("nested")).unwrap();
        std::fs::write(path.join("nested").join("file"), b"x").unwrap();
        assert_eq!(scratch.config().url, format!("file://{}", path.display()));
        drop(scratch);
        assert!(!path.exists(), "{} is left behind", path.display());
    }

    #[test]
    fn two_scratch_dirs_differ() {
        assert_ne!(ScratchDir::new("x").path(), ScratchDir::new("x").path());
    }
}
