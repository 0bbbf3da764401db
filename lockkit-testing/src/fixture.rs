//! What a suite's config fn hands each case: the configuration, and whatever must live exactly as
//! long as the case.

use std::path::PathBuf;

use lockkit_core::LockConfig;

/// A case's configuration together with what it owns. The suites' macros keep the fixture until
/// the case ends, then drop it, so a scratch directory is removed even when the case panics.
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
/// with everything in it when dropped.
pub struct ScratchDir {
    dir: PathBuf,
}

impl ScratchDir {
    /// A fresh directory named `lockkit-<label>-<pid>-<nanos>`. It is not created here: the
    /// `file://` backend creates it on connect.
    pub fn new(label: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("lockkit-{label}-{}-{nanos}", std::process::id()));
        Self { dir }
    }

    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Fixture for ScratchDir {
    fn config(&self) -> LockConfig {
        LockConfig::new(format!("file://{}", self.dir.display()))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // Missing is fine: a case that never connected never created it.
        let _ = std::fs::remove_dir_all(&self.dir);
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
        assert!(scratch.config().url.starts_with("file://"));
        drop(scratch);
        assert!(!path.exists(), "{} is left behind", path.display());
    }

    #[test]
    fn two_scratch_dirs_differ() {
        assert_ne!(ScratchDir::new("x").path(), ScratchDir::new("x").path());
    }
}
