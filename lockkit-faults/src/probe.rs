//! The final probe: once every worker has stopped, a fresh client must get the lock within one
//! lease plus 1 s (a worker killed at the end leaves its lock to its lease; anything longer is
//! something the run left blocking the lock).

use std::time::{Duration, Instant};

use lockkit::AcquireOptions;

use crate::subject::{Primitive, Subject};
use serde::Serialize;

/// How long a fresh client may take to connect before the probe gives up (not part of the
/// bound: connecting is not getting the lock).
const CONNECT_LIMIT: Duration = Duration::from_secs(10);

/// What the final probe found.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    /// The bound: lease + 1 s, in milliseconds.
    pub bound_ms: f64,
    /// From the acquire being sent to the guard, in milliseconds (`None`: no guard).
    pub ms: Option<f64>,
    /// Why there was no guard: not granted within the bound, or the error.
    pub error: Option<String>,
}

impl Probe {
    /// The probe got no guard within the bound.
    pub fn blocked(&self) -> bool {
        self.ms.is_none_or(|ms| ms > self.bound_ms)
    }

    fn failed(mut self, error: String) -> Probe {
        self.error = Some(error);
        self
    }
}

/// Connects to `url`, acquires the whole of `name` (campaigns in it, write-locks it, takes every
/// permit or every member) with a wait budget of `lease` + 1 s, releases (resigns), closes.
pub async fn run(url: &str, primitive: Primitive, name: &str, lease: Duration) -> Probe {
    let bound = lease + Duration::from_secs(1);
    let mut probe = Probe {
        bound_ms: bound.as_millis() as f64,
        ms: None,
        error: None,
    };
    let locks = match tokio::time::timeout(CONNECT_LIMIT, lockkit::connect(url)).await {
        Ok(Ok(locks)) => locks,
        Ok(Err(e)) => return probe.failed(format!("connect: {e}")),
        Err(_) => return probe.failed(format!("connect: not done in {CONNECT_LIMIT:?}")),
    };
    let lock = match Subject::open(&locks, primitive, name, "probe") {
        Ok(lock) => lock,
        Err(e) => return probe.failed(e.to_string()),
    };
    let opts = AcquireOptions::new().wait(bound).watchdog_lease(lease);
    let sent = Instant::now();
    // The acquire's own budget is the bound; the timeout only stops a hung call.
    match tokio::time::timeout(bound * 2, lock.take(&lock.whole(), &opts)).await {
        Ok(Ok(Some(guard))) => {
            probe.ms = Some(sent.elapsed().as_secs_f64() * 1000.0);
            if let Err(e) = guard.release().await {
                probe.error = Some(format!("release: {e}"));
            }
        }
        Ok(Ok(None)) => probe.error = Some(format!("not granted within {bound:?}")),
        Ok(Err(e)) => probe.error = Some(e.to_string()),
        Err(_) => probe.error = Some(format!("acquire hung for {:?}", bound * 2)),
    }
    drop(lock);
    let _ = tokio::time::timeout(CONNECT_LIMIT, locks.close()).await;
    probe
}
