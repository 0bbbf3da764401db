//! The bench scenarios and the overlap detector.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use lockkit::{AcquireOptions, BackendKind, LockConfig, Locks};
use lockkit_measure::Tally;
use rand::{Rng, SeedableRng};

use super::results::Row;
use crate::guard::{AnyLock, HoldKind};

/// One scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scenario {
    Uncontended,
    Contended,
    Many,
    Rw,
    Semaphore,
    Raw,
}

/// Everything a scenario needs.
pub(crate) struct Setup<'a> {
    pub(crate) cfg: &'a LockConfig,
    pub(crate) locks: &'a Locks,
    pub(crate) clients: usize,
    pub(crate) ops: u64,
    pub(crate) hold: Duration,
    pub(crate) progress: &'a ProgressBar,
}

const MANY_NAMES: usize = 1000;

/// Counts holders inside a critical section and every entry that broke the rules.
#[derive(Debug, Default)]
struct Detector {
    writers: AtomicI64,
    readers: AtomicI64,
    violations: AtomicU64,
}

impl Detector {
    fn enter(&self, kind: HoldKind, permits: i64) {
        let bad = match kind {
            HoldKind::Mutex | HoldKind::Write => {
                let w = self.writers.fetch_add(1, Ordering::SeqCst) + 1;
                w > 1 || self.readers.load(Ordering::SeqCst) > 0
            }
            HoldKind::Read => {
                self.readers.fetch_add(1, Ordering::SeqCst);
                self.writers.load(Ordering::SeqCst) > 0
            }
            HoldKind::Permit => self.readers.fetch_add(1, Ordering::SeqCst) + 1 > permits,
        };
        if bad {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn exit(&self, kind: HoldKind) {
        match kind {
            HoldKind::Mutex | HoldKind::Write => self.writers.fetch_sub(1, Ordering::SeqCst),
            _ => self.readers.fetch_sub(1, Ordering::SeqCst),
        };
    }
}

impl Scenario {
    pub(crate) const ALL: [Scenario; 6] = [
        Scenario::Raw,
        Scenario::Uncontended,
        Scenario::Contended,
        Scenario::Many,
        Scenario::Rw,
        Scenario::Semaphore,
    ];

    /// Whether the scenario runs once per client count of a sweep (the uncontended and raw
    /// ones have one client).
    pub(crate) fn sweeps(self) -> bool {
        !matches!(self, Scenario::Uncontended | Scenario::Raw)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended => "uncontended",
            Scenario::Contended => "contended",
            Scenario::Many => "many",
            Scenario::Rw => "rw",
            Scenario::Semaphore => "semaphore",
            Scenario::Raw => "raw-floor",
        }
    }

    pub(crate) async fn run(self, s: &Setup<'_>) -> Row {
        let backend = s.locks.backend().to_string();
        let clients = if self == Scenario::Uncontended {
            1
        } else {
            s.clients
        };
        let permits = (clients as u32 / 2).max(1);
        let (kind, primitive_ok) = match self {
            Scenario::Rw => (HoldKind::Read, s.locks.capabilities().rwlock.is_some()),
            Scenario::Semaphore => (HoldKind::Permit, s.locks.capabilities().semaphore.is_some()),
            _ => (HoldKind::Mutex, true),
        };
        let name = format!(
            "lockkit-bench/{:016x}/{}",
            rand::thread_rng().gen::<u64>(),
            self.name()
        );
        if !primitive_ok || AnyLock::new(s.locks, &name, kind, permits).is_err() {
            return Row::empty(&backend, "", self.name(), "unsupported").with_note(format!(
                "the {backend} backend has no {}",
                match kind {
                    HoldKind::Read => "RW lock",
                    _ => "semaphore",
                }
            ));
        }
        // Each client gets its own connection, except mem:// whose lock table is per handle.
        let mut handles = Vec::with_capacity(clients);
        for _ in 0..clients {
            if s.locks.backend() == BackendKind::MEMORY {
                handles.push(s.locks.clone());
            } else {
                match lockkit::from_config(s.cfg).await {
                    Ok(l) => handles.push(l),
                    Err(e) => {
                        return Row::empty(&backend, "", self.name(), "error")
                            .with_note(format!("connect: {e}"))
                    }
                }
            }
        }
        let detectors: Arc<Vec<Detector>> = Arc::new(
            (0..if self == Scenario::Many {
                MANY_NAMES
            } else {
                1
            })
                .map(|_| Detector::default())
                .collect(),
        );
        // Clients draw ops from one pool, so a client that wins more often does more of them:
        // the busiest client's share measures fairness.
        let pool = Arc::new(AtomicU64::new(s.ops));
        let tally = Arc::new(Mutex::new(Tally::new(clients)));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for (c, locks) in handles.iter().enumerate() {
            let ops = pool.clone();
            let (locks, name, detectors, pb, hold, tally) = (
                locks.clone(),
                name.clone(),
                detectors.clone(),
                s.progress.clone(),
                s.hold,
                tally.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let pool = (ops, tally.as_ref());
                client(self, c, &locks, &name, pool, permits, &detectors, &pb, hold).await
            }));
        }
        let mut error = None;
        for t in tasks {
            match t.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => error = Some(e.to_string()),
                Err(e) => error = Some(format!("client task failed: {e}")),
            }
        }
        let elapsed = started.elapsed();
        if s.locks.backend() != BackendKind::MEMORY {
            for l in &handles {
                let _ = l.close().await;
            }
        }
        let violations = detectors
            .iter()
            .map(|d| d.violations.load(Ordering::SeqCst))
            .sum();
        let tally = tally.lock().unwrap_or_else(|e| e.into_inner());
        let mut row = summarize(&backend, self.name(), clients, &tally, elapsed, violations);
        if let Some(e) = error {
            row.status = "error".into();
            row.note = Some(e);
        } else if self == Scenario::Semaphore {
            row.note = Some(format!("{permits} permits"));
        } else if self == Scenario::Rw {
            row.note = Some("80% reads".into());
        } else if self == Scenario::Many {
            row.note = Some(format!("{MANY_NAMES} names"));
        }
        row
    }
}

#[allow(clippy::too_many_arguments)]
async fn client(
    scenario: Scenario,
    c: usize,
    locks: &Locks,
    name: &str,
    (pool, tally): (Arc<AtomicU64>, &Mutex<Tally>),
    permits: u32,
    detectors: &[Detector],
    pb: &ProgressBar,
    hold: Duration,
) -> lockkit::Result<()> {
    let opts = AcquireOptions::new();
    let mut rng = rand::rngs::StdRng::from_entropy();
    let mutex = AnyLock::new(locks, name, HoldKind::Mutex, 0)?;
    let (read, write, sem) = match scenario {
        Scenario::Rw => (
            Some(AnyLock::new(locks, name, HoldKind::Read, 0)?),
            Some(AnyLock::new(locks, name, HoldKind::Write, 0)?),
            None,
        ),
        Scenario::Semaphore => (
            None,
            None,
            Some(AnyLock::new(locks, name, HoldKind::Permit, permits)?),
        ),
        _ => (None, None, None),
    };
    let mut i = 0u64;
    while pool
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        i += 1;
        let (lock, kind, slot) = match scenario {
            Scenario::Many => {
                let slot = (c * 7919 + i as usize * 31 + rng.gen_range(0..MANY_NAMES)) % MANY_NAMES;
                let l = AnyLock::new(locks, &format!("{name}/{slot}"), HoldKind::Mutex, 0)?;
                (l, HoldKind::Mutex, slot)
            }
            Scenario::Rw if rng.gen_range(0..10) < 8 => {
                (read.clone().expect("rw"), HoldKind::Read, 0)
            }
            Scenario::Rw => (write.clone().expect("rw"), HoldKind::Write, 0),
            Scenario::Semaphore => (sem.clone().expect("sem"), HoldKind::Permit, 0),
            _ => (mutex.clone(), HoldKind::Mutex, 0),
        };
        let t0 = Instant::now();
        let guard = lock
            .acquire(&opts)
            .await?
            .ok_or_else(|| lockkit::Error::contract("an acquire that waits forever gave up"))?;
        let wait = t0.elapsed();
        let d = &detectors[slot];
        d.enter(kind, i64::from(permits));
        if hold.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(hold).await;
        }
        d.exit(kind);
        guard.release().await?;
        // Recorded after the release: the shared tally's lock stays out of the hold.
        tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(c, wait);
        pb.inc(1);
    }
    Ok(())
}

pub(crate) fn summarize(
    backend: &str,
    scenario: &str,
    clients: usize,
    tally: &Tally,
    elapsed: Duration,
    violations: u64,
) -> Row {
    let s = tally.summary(elapsed);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mut row = Row::empty(backend, "", scenario, "ok");
    row.clients = clients;
    row.ops = s.ops;
    row.elapsed_ms = elapsed.as_secs_f64() * 1000.0;
    row.ops_per_sec = s.per_sec;
    row.p50_wait_us = us(s.p50);
    row.p99_wait_us = us(s.p99);
    row.max_wait_us = us(s.max);
    row.busiest_share = (clients > 1 && s.ops > 0).then_some(s.busiest_share);
    row.violations = violations;
    row.histogram = tally.waits().log2_us_buckets();
    row
}
