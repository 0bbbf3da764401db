//! The conformance suite on the `file://` backend, through `lockkit::from_config`, in a fresh
//! temporary directory per case, removed when the case ends.

fn config() -> Option<lockkit_testing::ScratchDir> {
    Some(lockkit_testing::ScratchDir::new("conformance-file"))
}

lockkit_testing::conformance_suite!(config, lockkit::from_config);
