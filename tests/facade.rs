//! The facade: `connect(url)` / `from_config` routing, errors for bad and disabled URLs.
//!
//! `scripts/test.sh` runs this file twice: with `--all-features` and with no features, so the
//! `BackendDisabled` cases run for real.

use lockkit::{BackendKind, ErrorKind, LockConfig};

/// `mem://` is one table per process: every `connect("mem://")` shares it (swapping a server
/// URL for `mem://` keeps the exclusion between parts that connect separately); `mem://NAME`
/// is a table of its own.
#[tokio::test]
async fn mem_connects_share_one_table_per_name() {
    let locks = lockkit::connect("mem://").await.unwrap();
    assert_eq!(locks.backend(), BackendKind::MEMORY);
    let name = "facade/shared";
    let g = locks.mutex(name).unwrap().lock().await.unwrap();
    for other in [
        locks.clone(),
        lockkit::connect("mem://").await.unwrap(),
        lockkit::Locks::memory(),
    ] {
        assert!(
            other
                .mutex(name)
                .unwrap()
                .try_lock()
                .await
                .unwrap()
                .is_none(),
            "a second mem:// handle took a held lock"
        );
    }
    let named = lockkit::connect("mem://facade-tests").await.unwrap();
    let own = named.mutex(name).unwrap().try_lock().await.unwrap();
    assert!(own.is_some(), "mem://NAME shares the default table");
    assert!(lockkit::connect("mem://a,b").await.is_err());
    g.release().await.unwrap();
}

#[tokio::test]
async fn malformed_urls_are_config_errors() {
    for url in [
        "",
        "localhost:6379",
        "nope://h",
        "2redis://h",
        "zk://h:notaport",
        "etcd://h:70000",
    ] {
        let e = lockkit::connect(url).await.expect_err(url);
        assert_eq!(e.kind(), ErrorKind::Config, "{url}: {e}");
        assert!(!e.is_retryable());
    }
    // A URL that names no host is the backend's to refuse: where it is compiled out, the
    // missing feature is the answer.
    let e = lockkit::connect("redis://").await.unwrap_err();
    if cfg!(feature = "redis") {
        assert_eq!(e.kind(), ErrorKind::Config, "{e}");
        assert!(e.to_string().contains("needs at least one host"), "{e}");
    } else {
        assert!(matches!(e.kind(), ErrorKind::BackendDisabled { .. }), "{e}");
    }
}

#[tokio::test]
async fn config_errors_never_show_passwords() {
    let e = lockkit::connect("redis://user:hunter2@h:badport")
        .await
        .unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert!(!format!("{e:?}").contains("hunter2"), "{e:?}");
}

/// The embedded backends have no server to show credentials to: they refuse them rather than
/// drop them silently.
#[tokio::test]
async fn embedded_backends_refuse_credentials() {
    let dir = std::env::temp_dir().join(format!("lockkit-facade-cred-{}", std::process::id()));
    let file = format!("file://{}", dir.display());
    for url in ["mem://", "mem://named", file.as_str()] {
        let mut with_user = LockConfig::new(url);
        with_user.username = Some("app".into());
        let mut with_password = LockConfig::new(url);
        with_password.password = Some(lockkit::Secret::new("hunter2"));
        for cfg in [with_user, with_password] {
            let e = lockkit::from_config(&cfg).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config, "{url}: {e}");
            assert!(e.to_string().contains("password"), "{url}: {e}");
            assert!(!e.to_string().contains("hunter2"), "{url}: {e}");
        }
    }
    let e = lockkit::connect("mem://app:hunter2@named")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn from_config_reads_toml() {
    let cfg = LockConfig::from_toml_str("url = \"mem://\"\nlease = \"2s\"\nkey_prefix = \"app\"")
        .unwrap();
    let locks = lockkit::from_config(&cfg).await.unwrap();
    assert_eq!(locks.default_lease(), std::time::Duration::from_secs(2));
    assert!(locks
        .mutex("a")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_some());
}

#[cfg(not(feature = "redis"))]
#[tokio::test]
async fn redis_urls_without_the_feature_say_which_feature() {
    for url in ["redis://127.0.0.1:6379", "rediss://h"] {
        let e = lockkit::connect(url).await.unwrap_err();
        assert!(
            matches!(
                e.kind(),
                ErrorKind::BackendDisabled {
                    feature: "redis",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("`redis` feature"), "{e}");
    }
}

#[cfg(not(feature = "zk"))]
#[tokio::test]
async fn zk_urls_without_the_feature_say_which_feature() {
    let e = lockkit::connect("zk://127.0.0.1:2181/app")
        .await
        .unwrap_err();
    match e.kind() {
        ErrorKind::BackendDisabled { scheme, feature } => {
            assert_eq!((scheme, feature), ("zk", "zk"));
        }
        other => panic!("{other:?}"),
    }
}

#[cfg(not(feature = "etcd"))]
#[tokio::test]
async fn etcd_urls_without_the_feature_say_which_feature() {
    for url in ["etcd://127.0.0.1:2379", "etcds://a,b"] {
        let e = lockkit::connect(url).await.unwrap_err();
        assert!(
            matches!(
                e.kind(),
                ErrorKind::BackendDisabled {
                    feature: "etcd",
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

/// Every backend compiled in is found by each of its schemes and aliases, in any case, and no
/// two backends claim a scheme or a kind: routing comes from the backends' descriptors alone.
#[tokio::test]
async fn every_backend_is_routed_by_its_own_descriptor() {
    let mut schemes = Vec::new();
    let mut kinds = Vec::new();
    for b in lockkit::BACKENDS {
        kinds.push(b.kind.as_str());
        for s in b.schemes {
            for name in std::iter::once(&s.name).chain(s.aliases) {
                schemes.push(*name);
                for spelled in [name.to_string(), name.to_ascii_uppercase()] {
                    let found = lockkit::backend_for(&spelled).unwrap();
                    assert_eq!(found.kind, b.kind, "{spelled}");
                }
            }
        }
    }
    for list in [&mut schemes, &mut kinds] {
        let n = list.len();
        list.sort();
        list.dedup();
        assert_eq!(list.len(), n, "claimed twice: {list:?}");
    }
    // An alias connects as its scheme does.
    let locks = lockkit::connect("MEMORY://facade-alias").await.unwrap();
    assert_eq!(locks.backend(), BackendKind::MEMORY);
}

/// The facade's list of optional backends' schemes (what a build without them still knows)
/// is each backend's own list of schemes and aliases.
#[cfg(all(feature = "redis", feature = "zk", feature = "etcd"))]
#[test]
fn optional_schemes_match_the_backends_descriptors() {
    for (feature, names) in lockkit::OPTIONAL {
        // A feature may compile in more than one backend (`redis`: Redis and Redlock).
        let mut theirs: Vec<&str> = lockkit::BACKENDS
            .iter()
            .filter(|b| b.feature == Some(*feature))
            .flat_map(|b| b.schemes.iter())
            .flat_map(|s| std::iter::once(s.name).chain(s.aliases.iter().copied()))
            .collect();
        assert!(!theirs.is_empty(), "no backend of feature {feature}");
        let mut ours = names.to_vec();
        theirs.sort();
        ours.sort();
        assert_eq!(ours, theirs, "{feature}");
    }
}

/// A `mem://` semaphore sized near `u32::MAX` (a common "unbounded"): permits in use plus a
/// request were added in `u32`, which panicked in a debug build and wrapped in a release one,
/// granting past the size.
#[tokio::test]
async fn a_mem_semaphore_near_u32_max_neither_panics_nor_overgrants() {
    let locks = lockkit::connect("mem://").await.unwrap();
    let s = locks.semaphore("huge", u32::MAX).unwrap();
    let most = s.try_acquire(u32::MAX - 1).await.unwrap().expect("fits");
    assert!(
        s.try_acquire(2).await.unwrap().is_none(),
        "granted past the size"
    );
    let last = s
        .try_acquire(1)
        .await
        .unwrap()
        .expect("the last permit fits");
    assert_eq!(s.available().await.unwrap(), 0);
    last.release().await.unwrap();
    most.release().await.unwrap();
    assert_eq!(s.available().await.unwrap(), u32::MAX);
}
