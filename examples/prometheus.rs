//! lockkit's metrics in Prometheus form: installs `metrics-exporter-prometheus`'s recorder, takes,
//! contends for and loses a few locks on the embedded backend, and prints what a scrape would
//! read. (A service would serve `handle.render()` on its metrics endpoint, or let the exporter
//! listen itself.)
//!
//! ```text
//! cargo run --example prometheus
//! ```

use std::time::Duration;

use lockkit::AcquireOptions;

#[tokio::main]
async fn main() -> lockkit::Result<()> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("no other recorder is installed");
    let locks = lockkit::connect("mem://").await?;
    let jobs = locks.mutex("jobs/nightly")?;
    let held = jobs.lock().await?;
    // Busy: a second acquire gives up after 50 ms.
    assert!(jobs.lock_for(Duration::from_millis(50)).await?.is_none());
    held.release().await?;
    // A fixed lease that runs out: counted in lockkit_lost_total{reason="lease_expired"}.
    let short = locks
        .mutex("jobs/report")?
        .acquire(&AcquireOptions::new().fixed_lease(Duration::from_millis(150)))
        .await?
        .expect("free");
    short.lost().await;
    let _ = short.release().await;
    print!("{}", handle.render());
    Ok(())
}
