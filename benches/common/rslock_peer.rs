//! The peer both Redis benches run: `rslock` (the Redlock crate), its retries as it ships them.

use std::time::Duration;

use super::contended::{Contended, Run};

/// One rslock client of the `redis://` URLs `masters`, connected to every one before the clock
/// starts (its connections open on first use) by taking and releasing `warm_key`, as lockkit's
/// handles are.
pub async fn client(masters: &[String], warm_key: &str, lease: Duration) -> rslock::LockManager {
    let rl = rslock::LockManager::new(masters.to_vec());
    if let Ok(l) = rl.lock(warm_key.as_bytes(), lease).await {
        rl.unlock(&l).await;
    }
    rl
}

/// `count` rslock clients take `key` `total` times, with `lease`: `acquire_no_guard` retries
/// until it has the lock, `unlock` releases it; each client its own `LockManager` (its own
/// connections).
pub async fn contended(
    masters: &[String],
    key: &str,
    (total, count): (usize, usize),
    hold: Duration,
    lease: Duration,
) -> Contended {
    let mut managers = Vec::new();
    for _ in 0..count {
        managers.push(client(masters, &format!("{key}-warm"), lease).await);
    }
    let mut run = Run::start(total, hold);
    for rl in managers {
        // A clone is the same client.
        let (arena, key, unlocker) = (run.arena(), key.to_string(), rl.clone());
        run.spawn(async move {
            arena
                .client(
                    async move || Some(rl.acquire_no_guard(key.as_bytes(), lease).await.unwrap()),
                    async move |l| unlocker.unlock(&l).await,
                )
                .await
        });
    }
    run.finish("rslock (acquire, as shipped)", Vec::new()).await
}
