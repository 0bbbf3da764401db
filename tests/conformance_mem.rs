//! The conformance suite on the embedded `mem://` backend, through `lockkit::connect`.

async fn locks() -> Option<lockkit::Locks> {
    Some(lockkit::connect("mem://").await.expect("mem:// connects"))
}

lockkit::conformance_suite!(locks);
