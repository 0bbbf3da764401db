//! The embedded backend keeps each `prefix` to itself, as every server backend does.

use lockkit_core::{LockConfig, Locks};

async fn table(query: &str) -> Locks {
    lockkit_core::mem::connect(&LockConfig::new(format!("mem://prefix-table{query}")))
        .await
        .unwrap()
}

/// A handle with prefix `a` and name `b/c`, one with prefix `a/b` and name `c`, and one with no
/// prefix and name `a/b/c` hold three different locks, and each lists only its own.
#[tokio::test]
async fn prefixes_never_share_a_lock() {
    let a = table("?prefix=a").await;
    let ab = table("?prefix=a%2Fb").await;
    let none = table("").await;
    let _ga = a.mutex("b/c").unwrap().try_lock().await.unwrap().unwrap();
    let gab = ab.mutex("c").unwrap().try_lock().await.unwrap();
    assert!(
        gab.is_some(),
        "prefix a/b's lock c is not prefix a's lock b/c"
    );
    let gn = none.mutex("a/b/c").unwrap().try_lock().await.unwrap();
    assert!(gn.is_some(), "an unprefixed a/b/c is no prefixed lock");
    let names = |l: Vec<lockkit_core::LockEntry>| -> Vec<String> {
        l.into_iter().map(|e| e.name).collect()
    };
    assert_eq!(names(a.list("").await.unwrap()), ["b/c"]);
    assert_eq!(names(ab.list("").await.unwrap()), ["c"]);
    assert_eq!(names(none.list("").await.unwrap()), ["a/b/c"]);
}
