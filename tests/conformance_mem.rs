//! The conformance suite on the embedded `mem://` backend, through `lockkit::from_config`. Every
//! case shares the process-wide table, as every `connect("mem://")` of an application does.

fn config() -> Option<lockkit::LockConfig> {
    Some(lockkit::LockConfig::new("mem://"))
}

lockkit_testing::conformance_suite!(config, lockkit::from_config);
