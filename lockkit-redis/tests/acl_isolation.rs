//! ACL isolation against the secure profile (`scripts/services.sh up --secure`): its `lockkit`
//! ACL user may only touch keys and channels under `lockkit:`. Locking under that prefix works;
//! the same user with another key prefix is refused with a typed, non-retryable error.

use lockkit_core::{ErrorKind, LockConfig};
use lockkit_testing::{server_url, unique_name};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_limited_user_locks_inside_and_is_refused_outside() {
    let Some(url) = server_url("redis_secure") else {
        return;
    };
    let name = unique_name("acl");
    let inside = lockkit_redis::connect(&LockConfig::new(url.clone()))
        .await
        .unwrap();
    let guard = inside.mutex(&name).unwrap().lock().await.unwrap();
    guard.release().await.unwrap();

    let mut cfg = LockConfig::new(url);
    cfg.key_prefix = Some("outside".into());
    let outside = lockkit_redis::connect(&cfg).await.unwrap();
    let e = outside.mutex(&name).unwrap().try_lock().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    assert!(!e.is_retryable());
}
