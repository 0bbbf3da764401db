//! The conformance suite on the `file://` backend, through `lockkit::from_config`, in a fresh
//! temporary directory per case.

fn config() -> Option<lockkit::LockConfig> {
    let dir = std::env::temp_dir().join(format!(
        "lockkit-conformance-file-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    Some(lockkit::LockConfig::new(format!(
        "file://{}",
        dir.display()
    )))
}

lockkit_testing::conformance_suite!(config, lockkit::from_config);
