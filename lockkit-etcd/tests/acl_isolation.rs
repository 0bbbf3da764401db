//! RBAC isolation against the secure profile (`scripts/services.sh up --secure`): the `lockkit`
//! user's role covers the key prefix `lockkit`. A user without that role, and the `lockkit` user
//! under another prefix, are refused with a typed, non-retryable error.

use lockkit_core::{ErrorKind, LockConfig};
use lockkit_testing::{server_url, unique_name};

/// Connecting may already fail (etcd checks the password at once); otherwise the lock does.
async fn refused(cfg: LockConfig) {
    let e = match lockkit_etcd::connect(&cfg).await {
        Err(e) => e,
        Ok(locks) => {
            let mutex = locks.mutex(&unique_name("acl")).unwrap();
            mutex.try_lock().await.unwrap_err()
        }
    };
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    assert!(!e.is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_without_the_role_is_refused() {
    if server_url("etcd_secure").is_none() {
        return;
    }
    let url = std::env::var("LOCKKIT_TEST_ETCD_SECURE_NOROLE_URL")
        .expect("the secure profile exports LOCKKIT_TEST_ETCD_SECURE_NOROLE_URL");
    refused(LockConfig::new(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_covers_only_its_prefix() {
    let Some(url) = server_url("etcd_secure") else {
        return;
    };
    let locks = lockkit_etcd::connect(&LockConfig::new(url.clone()))
        .await
        .unwrap();
    let guard = locks
        .mutex(&unique_name("acl"))
        .unwrap()
        .lock()
        .await
        .unwrap();
    guard.release().await.unwrap();

    let mut cfg = LockConfig::new(url);
    cfg.key_prefix = Some("outside".into());
    refused(cfg).await;
}
