//! Tracing: one acquire span and one release span per operation, with the same fields on
//! every backend.

use lockkit_core::Locks;

use super::*;
use crate::spans;

/// The fields of `lockkit.acquire`, then of `lockkit.release`, as every backend records them.
const ACQUIRE_FIELDS: [&str; 9] = [
    "backend",
    "fair",
    "lease",
    "lock",
    "outcome",
    "primitive",
    "token",
    "wait",
    "waited_ms",
];
const RELEASE_FIELDS: [&str; 5] = ["backend", "lock", "outcome", "primitive", "token"];

/// An acquire and a release each leave one span, with the fixed field set, the backend's name
/// and the outcome.
pub async fn spans_read_the_same_on_every_backend(locks: &Locks) {
    assert!(
        spans::capture(),
        "another tracing subscriber was installed first"
    );
    let n = name("spans");
    let g = mutex(locks, &n).lock().await.unwrap();
    let token = g.token().0.to_string();
    g.release().await.unwrap();
    let seen = spans::of_lock(&n);
    let names: Vec<&str> = seen.iter().map(|s| s.name).collect();
    assert_eq!(names, ["lockkit.acquire", "lockkit.release"], "{seen:?}");
    let (acquire, release) = (&seen[0].fields, &seen[1].fields);
    assert_eq!(
        acquire.keys().map(String::as_str).collect::<Vec<_>>(),
        ACQUIRE_FIELDS
    );
    assert_eq!(
        release.keys().map(String::as_str).collect::<Vec<_>>(),
        RELEASE_FIELDS
    );
    for fields in [acquire, release] {
        assert_eq!(fields["backend"], locks.backend().as_str());
        assert_eq!(fields["primitive"], "mutex");
        assert_eq!(fields["token"], token);
    }
    assert_eq!(acquire["outcome"], "acquired");
    assert_eq!(release["outcome"], "released");
}
