//! ACL isolation against the secure profile (`scripts/services.sh up --secure`): the nodes our
//! identity creates carry the `creator_read` ACL, so another identity can see them but cannot
//! delete our lock node, force the lock open or queue on it.

use lockkit_core::{ErrorKind, LockConfig, ServerUrl};
use lockkit_testing::{server_url, unique_name};
use lockkit_zk::zookeeper_client as zk;

/// Another digest identity on the plain client port. Over TLS the server also authenticates the
/// client certificate (scheme `x509`), and our nodes' ACL then lets every holder of that
/// certificate in, so the intruder must not present ours.
fn intruder_url(url: &str) -> String {
    let u = ServerUrl::parse(url).unwrap();
    let port = std::env::var("LOCKKIT_TEST_ZK_SECURE_PLAIN_PORT")
        .expect("the secure profile exports LOCKKIT_TEST_ZK_SECURE_PLAIN_PORT");
    format!("zk://intruder:guess@{}:{port}", u.hosts[0].host)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_identity_cannot_delete_our_lock_node() {
    let Some(url) = server_url("zk_secure") else {
        return;
    };
    let ours = lockkit_zk::connect_zk(&LockConfig::new(url.clone()))
        .await
        .unwrap();
    let name = unique_name("acl");
    let dir = ours.mutex_path(&name);
    let locks = ours.clone().into_locks();
    let mutex = locks.mutex(&name).unwrap();
    let guard = mutex.lock().await.unwrap();

    let theirs = lockkit_zk::connect_zk(&LockConfig::new(intruder_url(&url)))
        .await
        .unwrap();
    let raw = theirs.zk_client().unwrap();
    // creator_read: anyone may look ...
    let (children, _) = raw.get_children(&dir).await.unwrap();
    assert_eq!(children.len(), 1, "{children:?}");
    // ... but only we may delete or create.
    let deleted = raw.delete(&format!("{dir}/{}", children[0]), None).await;
    assert!(matches!(deleted, Err(zk::Error::NoAuth)), "{deleted:?}");

    let their_mutex = theirs.clone().into_locks().mutex(&name).unwrap();
    let forced = their_mutex.force_unlock().await.unwrap_err();
    assert_eq!(forced.kind(), ErrorKind::Auth, "{forced}");
    assert!(!forced.is_retryable());
    let queued = their_mutex.try_lock().await.unwrap_err();
    assert_eq!(queued.kind(), ErrorKind::Auth, "{queued}");

    assert_eq!(
        guard.state(),
        lockkit_core::LockState::Held,
        "our lock survives the intruder"
    );
    assert_eq!(raw.get_children(&dir).await.unwrap().0, children);
    guard.release().await.unwrap();
}

/// The directories above our lock nodes carry our ACL too, not the world's: another identity
/// cannot create a lock directory beside ours (say, to pre-create `…/mutex/<name>` with an ACL
/// that shuts everyone out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_identity_cannot_create_directories_under_ours() {
    let Some(url) = server_url("zk_secure") else {
        return;
    };
    // A fresh prefix, so every directory above the lock is created by this test.
    let prefix = unique_name("acl-dirs").replace('/', "-");
    let ours = lockkit_zk::connect_zk(&LockConfig::new(url.clone()).with_option("prefix", &prefix))
        .await
        .unwrap();
    let guard = ours.mutex("a").unwrap().lock().await.unwrap();
    let dir_a = ours.mutex_path("a");
    let parent = dir_a.rsplit_once('/').unwrap().0.to_string();
    let theirs = lockkit_zk::connect_zk(&LockConfig::new(intruder_url(&url)))
        .await
        .unwrap();
    let raw = theirs.zk_client().unwrap();
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let created = raw.create(&format!("{parent}/b"), b"", &options).await;
    assert!(
        matches!(created, Err(zk::Error::NoAuth)),
        "another identity created a lock directory under ours: {created:?}"
    );
    guard.release().await.unwrap();
}
