//! The conformance suite on the `file://` backend, through `lockkit::connect`, in a fresh
//! temporary directory per case.

async fn locks() -> Option<lockkit::Locks> {
    let dir = std::env::temp_dir().join(format!(
        "lockkit-conformance-file-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let url = format!("file://{}", dir.display());
    Some(lockkit::connect(&url).await.expect("file:// connects"))
}

lockkit::conformance_suite!(locks);
