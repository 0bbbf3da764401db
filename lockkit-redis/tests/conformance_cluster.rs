//! The lockkit conformance suite against a Redis Cluster (`LOCKKIT_TEST_REDIS_CLUSTER_URL`,
//! e.g. `redis+cluster://127.0.0.1:16410,…`, as `scripts/services.sh up --cluster` prints it).

async fn locks() -> Option<lockkit_core::Locks> {
    let url = lockkit_core::testing::server_url("redis_cluster")?;
    Some(
        lockkit_redis::connect(&lockkit_core::LockConfig::new(url))
            .await
            .unwrap(),
    )
}

lockkit_core::conformance_suite!(locks);

mod cluster {
    use std::time::Duration;

    use lockkit_core::{AcquireOptions, DistLockExt, LockState};

    async fn connect() -> Option<lockkit_core::Locks> {
        super::locks().await
    }

    /// Many locks spread over every node, renewed together: the watchdog groups each renewal
    /// call by slot (a multi-key script across slots would fail with CROSSSLOT, and the guards
    /// would turn Suspect, then Lost).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn renewals_are_batched_per_slot() {
        let Some(locks) = connect().await else { return };
        let base = lockkit_core::testing::unique_name("batch");
        let lease = AcquireOptions::new().watchdog_lease(Duration::from_millis(900));
        let (mut guards, mut reads, mut permits) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..40 {
            let name = format!("{base}-{i}");
            let m = locks.mutex(&name).unwrap();
            guards.push(m.acquire(&lease).await.unwrap().unwrap());
            let rw = locks.rwlock(&format!("{name}-rw")).unwrap();
            reads.push(rw.read(&lease).await.unwrap().unwrap());
            let sem = locks.semaphore(&format!("{name}-sem"), 2).unwrap();
            permits.push(sem.acquire(1, &lease).await.unwrap().unwrap());
        }
        // Three leases: every guard was renewed several times, in calls of one slot each.
        tokio::time::sleep(Duration::from_millis(2700)).await;
        let states = guards
            .iter()
            .map(|g| g.state())
            .chain(reads.iter().map(|g| g.state()))
            .chain(permits.iter().map(|p| p.state()));
        for s in states {
            assert_eq!(s, LockState::Held);
        }
        let other = connect().await.unwrap();
        for i in 0..40 {
            let m = other.mutex(&format!("{base}-{i}")).unwrap();
            assert!(m.try_lock().await.unwrap().is_none(), "lock {i} still held");
        }
        for g in guards {
            g.release().await.unwrap();
        }
        for g in reads {
            g.release().await.unwrap();
        }
        for p in permits {
            p.release().await.unwrap();
        }
    }

    /// Wake-ups reach waiters whatever node owns the lock's slot: the holder's lease is far
    /// longer than the wait budget, so only the release's message gets the waiter in.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_are_woken_on_every_node() {
        let Some(a) = connect().await else { return };
        let b = connect().await.unwrap();
        let base = lockkit_core::testing::unique_name("wake");
        let long = AcquireOptions::new().watchdog_lease(Duration::from_secs(30));
        for i in 0..12 {
            let name = format!("{base}-{i}");
            let holder = a
                .mutex(&name)
                .unwrap()
                .acquire(&long)
                .await
                .unwrap()
                .unwrap();
            let waiter = tokio::spawn({
                let (b, name) = (b.clone(), name.clone());
                async move {
                    b.mutex(&name)
                        .unwrap()
                        .lock_for(Duration::from_secs(5))
                        .await
                        .unwrap()
                }
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            holder.release().await.unwrap();
            let g = waiter.await.unwrap().expect("woken by the release");
            g.release().await.unwrap();
        }
    }
}
