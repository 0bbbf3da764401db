//! What queued waiters cost the server while nothing changes hands: [`idle_waiters`] queues
//! waiters from one client on a lock another client holds, counts the requests the server takes
//! over a quiet window (through a counter of the server's own, which the caller reads), and then
//! checks that every waiter still gets the lock in turn. Run it alone in its test binary: other
//! tests on the same server move the counter.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::support::unique_name;
use lockkit_core::{Locks, Primitive};

/// How many waiters and how long the quiet window, from `LOCKKIT_IDLE_WAITERS` and
/// `LOCKKIT_IDLE_SECS` (defaults 200 and 3 s; the figure is 1000 for 10 s).
pub fn sizes() -> (usize, Duration) {
    let num = |key: &str, default: u64| {
        std::env::var(key)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let waiters = num("LOCKKIT_IDLE_WAITERS", 200) as usize;
    (waiters, Duration::from_secs(num("LOCKKIT_IDLE_SECS", 3)))
}

/// Queues `waiters` waiters of `waiting` on a lock `holder` holds, and returns how far
/// `counter` (a count of requests the server took) moved during `quiet`, once they all were
/// queued. Then the holder releases and every waiter must get the lock in turn.
pub async fn idle_waiters<C, F>(
    holder: &Locks,
    waiting: &Locks,
    waiters: usize,
    quiet: Duration,
    counter: C,
) -> u64
where
    C: Fn() -> F,
    F: Future<Output = u64>,
{
    let name = unique_name("idle-waiters");
    let held = holder.mutex(&name).unwrap().lock().await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..waiters {
        let m = waiting.mutex(&name).unwrap();
        tasks.push(tokio::spawn(async move {
            let g = m.lock_for(Duration::from_secs(120)).await.unwrap();
            g.expect("the waiter got the lock").release().await.unwrap();
        }));
    }
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let info = holder.inspect(&name, Primitive::Mutex).await.unwrap();
        if info.waiters.len() == waiters {
            break;
        }
        assert!(
            Instant::now() < until,
            "{} of {waiters} waiters queued after 60 s",
            info.waiters.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Whatever queueing set going (the waiters' watches and the reads that confirm them)
    // settles first: the window opens once the counter stays still for half a second.
    let until = Instant::now() + Duration::from_secs(30);
    let mut before = counter().await;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = counter().await;
        let still = now.saturating_sub(before) <= 2;
        before = now;
        if still {
            break;
        }
        assert!(
            Instant::now() < until,
            "the server's request counter did not settle within 30 s of queueing"
        );
    }
    tokio::time::sleep(quiet).await;
    let taken = counter().await.saturating_sub(before);
    held.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(120), async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .expect("every waiter got the lock in turn");
    taken
}
