//! The raw floor: each backend's own minimal steps for one lock cycle, without lockkit, as the
//! row every lockkit figure is compared with.

use std::time::Instant;

use lockkit::BackendKind;
use lockkit_measure::Latencies;

use super::raw::RawFloor;
use super::results::Row;
use super::scenario::{summarize, Scenario, Setup};

/// The raw-floor row of the backend `s` talks to.
pub(crate) async fn run(s: &Setup<'_>) -> Row {
    let backend = s.locks.backend().to_string();
    match raw_floor(s).await {
        RawFloor::Measured(waits, elapsed, what) => {
            let mut row = summarize(&backend, Scenario::Raw.name(), 1, &waits.into(), elapsed, 0);
            row.note = Some(what.into());
            row
        }
        RawFloor::NotMeasured(why) => Row::empty(&backend, "", "raw-floor", "n/a").with_note(why),
        RawFloor::Failed(e) => Row::empty(&backend, "", "raw-floor", "error").with_note(e),
    }
}

async fn raw_floor(s: &Setup<'_>) -> RawFloor {
    match s.locks.backend() {
        BackendKind::MEMORY => {
            // An uncontended in-process mutex cycle: the floor under any mem:// lock.
            let m = std::sync::Mutex::new(0u64);
            let mut waits = Latencies::new();
            let started = Instant::now();
            for _ in 0..s.ops {
                let t0 = Instant::now();
                let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
                waits.record(t0.elapsed());
                *g += 1;
                drop(g);
                s.progress.inc(1);
            }
            RawFloor::Measured(waits, started.elapsed(), "std Mutex lock + unlock")
        }
        BackendKind::FILE => match s.cfg.server_url() {
            Ok(url) => {
                let dir = std::path::PathBuf::from(url.path);
                let path = dir.join(format!("raw-floor.{}.lock", std::process::id()));
                let mut waits = Latencies::new();
                let started = Instant::now();
                for _ in 0..s.ops {
                    let t0 = Instant::now();
                    let r = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .open(&path)
                        .and_then(|f| f.try_lock().map_err(std::io::Error::from).map(|()| f));
                    match r {
                        Ok(f) => {
                            waits.record(t0.elapsed());
                            drop(f);
                        }
                        Err(e) => return RawFloor::Failed(format!("{}: {e}", path.display())),
                    }
                    s.progress.inc(1);
                }
                let _ = std::fs::remove_file(&path);
                RawFloor::Measured(waits, started.elapsed(), "open + flock + close, no token")
            }
            Err(e) => RawFloor::Failed(e.to_string()),
        },
        #[cfg(feature = "full")]
        kind => super::raw::floor(s.cfg, kind, s.ops, s.progress).await,
        #[cfg(not(feature = "full"))]
        _ => RawFloor::NotMeasured("the raw floor needs the `full` feature"),
    }
}
