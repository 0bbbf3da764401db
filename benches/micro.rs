//! criterion micro-benches for the hot path: one uncontended acquire + release, on every backend
//! this run can reach (`mem://` and `file://` always; Redis, ZooKeeper and etcd when
//! `LOCKKIT_TEST_{REDIS,ZK,ETCD}_URL` is set and the feature is compiled in).
//!
//! ```text
//! eval "$(scripts/services.sh up)"
//! cargo bench --features full --bench micro
//! ```

// criterion_group! generates an undocumented pub fn.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use lockkit::AcquireOptions;

fn lock_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("lockkit-micro-{}", std::process::id()))
}

fn targets() -> Vec<(String, String)> {
    let dir = lock_dir();
    let mut urls = vec![
        ("mem".to_string(), "mem://".to_string()),
        ("file".to_string(), format!("file://{}", dir.display())),
    ];
    for (backend, feature_on) in [
        ("redis", cfg!(feature = "redis")),
        ("zk", cfg!(feature = "zk")),
        ("etcd", cfg!(feature = "etcd")),
    ] {
        let var = format!("LOCKKIT_TEST_{}_URL", backend.to_ascii_uppercase());
        if let (true, Ok(url)) = (feature_on, std::env::var(&var)) {
            urls.push((backend.to_string(), url));
        }
    }
    urls
}

fn acquire_release(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut group = c.benchmark_group("acquire_release");
    group
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for (backend, url) in targets() {
        let locks = match rt.block_on(lockkit::connect(&url)) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("skipping {backend}: {e}");
                continue;
            }
        };
        let lock = locks
            .mutex(&format!("micro/{}", std::process::id()))
            .expect("name");
        group.bench_function(&backend, |b| {
            b.to_async(&rt).iter(|| async {
                let g = lock
                    .try_lock()
                    .await
                    .expect("acquire")
                    .expect("uncontended");
                g.release().await.expect("release");
            })
        });
        let fixed = AcquireOptions::new()
            .no_wait()
            .fixed_lease(Duration::from_secs(30));
        if locks.capabilities().mutex.fixed_lease {
            group.bench_function(format!("{backend}/fixed-lease"), |b| {
                b.to_async(&rt).iter(|| async {
                    let g = lock
                        .acquire(&fixed)
                        .await
                        .expect("acquire")
                        .expect("uncontended");
                    g.release().await.expect("release");
                })
            });
        }
        rt.block_on(locks.close()).ok();
    }
    group.finish();
    let _ = std::fs::remove_dir_all(lock_dir());
}

criterion_group!(benches, acquire_release);
criterion_main!(benches);
