//! The conformance cases, one `pub async fn` each, grouped by concept.
//!
//! Times are generous bounds on correctness ("it did not wait for a lease"), never performance
//! targets: those live in the benchmarks.

mod cancel;
mod capability;
mod config;
mod election;
mod lease;
mod multi;
mod mutex;
mod rwlock;
mod semaphore;
mod telemetry;
mod tokens;
mod views;

pub use cancel::*;
pub use capability::*;
pub use config::*;
pub use election::*;
pub use lease::*;
pub use multi::*;
pub use mutex::*;
pub use rwlock::*;
pub use semaphore::*;
pub use telemetry::*;
pub use tokens::*;
pub use views::*;

use std::future::Future;
use std::time::Duration;

use lockkit_core::{AcquireOptions, Error, ErrorKind, Locks, Mutex, Primitive, Result};

/// Bound for things that must happen "at once" or "soon" on a loaded 2-core machine.
pub(crate) const SOON: Duration = Duration::from_secs(5);
/// A short lease for expiry tests (etcd's minimum TTL is 1 s).
pub(crate) const SHORT: Duration = Duration::from_secs(1);
/// How soon a holder hears that a force-unlock took its lock: well before a renewal of a 30 s
/// lease (10 s).
pub(crate) const HEARD: Duration = Duration::from_secs(5);

pub(crate) fn name(case: &str) -> String {
    super::unique_name(case)
}

pub(crate) fn mutex(locks: &Locks, name: &str) -> Mutex {
    locks.mutex(name).expect("valid name")
}

/// Awaits `fut`, failing the test if it takes longer than `limit`.
pub(crate) async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what} did not finish within {limit:?}"),
    }
}

pub(crate) fn assert_kind<T: std::fmt::Debug>(r: Result<T>, kind: ErrorKind, what: &str) -> Error {
    match r {
        Ok(v) => panic!("{what}: expected {kind:?}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "{what}: wrong error kind: {e}");
            e
        }
    }
}

/// Waits until `count` waiters queue on `name` (a `primitive`), as `inspect` shows them, so
/// that a case can start the next one behind them; where the backend keeps no queue (not fair)
/// or cannot inspect, a pause.
pub(crate) async fn queued(locks: &Locks, name: &str, primitive: Primitive, count: usize) {
    let inspects = locks
        .capabilities()
        .of(primitive)
        .is_some_and(|s| s.inspect && s.fair);
    if !inspects {
        tokio::time::sleep(Duration::from_millis(150)).await;
        return;
    }
    within(SOON, "the waiter queues", async {
        while locks.inspect(name, primitive).await.unwrap().waiters.len() < count {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// Options for a fixed short lease.
pub(crate) fn fixed(d: Duration) -> AcquireOptions {
    AcquireOptions::new().fixed_lease(d)
}
