//! `lockkit bench`: the same lock scenarios across several backends, side by side.

mod charts;
mod floor;
mod raw;
mod report;
mod results;
mod scenario;
mod text;

use std::io::IsTerminal;
use std::time::Duration;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use results::{Report, Row};

use crate::exit::{code, complain};
use crate::target::Target;

pub(crate) use scenario::Scenario;

/// Which scenarios to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Which {
    /// One client, one lock: acquire / release cycles.
    Uncontended,
    /// N clients (each its own connection) hand one lock back and forth.
    Contended,
    /// N clients over 1000 independent locks.
    Many,
    /// N clients on one RW lock, 80 % reads and 20 % writes.
    Rw,
    /// N clients on one semaphore with N/2 permits (at least 1).
    Semaphore,
    /// The backend's own minimal round trips for one lock cycle, without lockkit.
    Raw,
    /// Every scenario.
    All,
}

/// Arguments of `lockkit bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Scenario to run (repeat for several).
    #[arg(long, value_enum, default_value = "all")]
    scenario: Vec<Which>,

    /// Concurrent clients in the contended, many, rw and semaphore scenarios; a list
    /// (`1,8,64`) runs each of them once per count, a sweep shown in the report as throughput
    /// against clients.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "4",
        value_name = "N[,N...]"
    )]
    clients: Vec<usize>,

    /// Lock cycles per scenario and backend, shared among the clients.
    #[arg(long, default_value_t = 1000)]
    ops: u64,

    /// How long each holder stays inside its critical section.
    #[arg(
        long,
        value_parser = crate::duration::any,
        default_value = "0s",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    hold: Duration,

    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,

    /// Also write a self-contained HTML report (table and SVG charts) to this file.
    #[arg(long, value_name = "FILE")]
    report: Option<std::path::PathBuf>,
}

fn scenarios(which: &[Which]) -> Vec<Scenario> {
    let mut out = Vec::new();
    for w in which {
        let add: &[Scenario] = match w {
            Which::Uncontended => &[Scenario::Uncontended],
            Which::Contended => &[Scenario::Contended],
            Which::Many => &[Scenario::Many],
            Which::Rw => &[Scenario::Rw],
            Which::Semaphore => &[Scenario::Semaphore],
            Which::Raw => &[Scenario::Raw],
            Which::All => &Scenario::ALL,
        };
        for s in add {
            if !out.contains(s) {
                out.push(*s);
            }
        }
    }
    out
}

fn progress(label: String, total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{prefix:>28} [{bar:30}] {pos}/{len} {per_sec} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_prefix(label);
    pb
}

pub(crate) async fn run(target: &Target, args: BenchArgs) -> u8 {
    let configs = match target.configs() {
        Ok(c) => c,
        Err(e) => {
            complain(e);
            return code::FAILURE;
        }
    };
    if args.clients.is_empty() || args.clients.contains(&0) || args.ops == 0 {
        complain("--clients and --ops must be at least 1");
        return code::USAGE;
    }
    let mut counts: Vec<usize> = Vec::new();
    for c in &args.clients {
        if !counts.contains(c) {
            counts.push(*c);
        }
    }
    let list = scenarios(&args.scenario);
    let mut rows = Vec::new();
    for cfg in &configs {
        let url = lockkit::redact(&cfg.url);
        let scheme = url.split("://").next().unwrap_or("?").to_string();
        let locks = match lockkit::from_config(cfg).await {
            Ok(l) => l,
            Err(e) => {
                let status = if matches!(
                    e.kind(),
                    lockkit::ErrorKind::Unsupported | lockkit::ErrorKind::BackendDisabled { .. }
                ) {
                    "unsupported"
                } else {
                    "error"
                };
                complain(format!("{url}: {e}"));
                for s in &list {
                    rows.push(
                        Row::empty(&scheme, &url, s.name(), status)
                            .with_note(format!("connect: {e}")),
                    );
                }
                continue;
            }
        };
        let backend = locks.backend().to_string();
        for s in &list {
            // One client in the uncontended and raw scenarios, whatever the sweep.
            let sweep: &[usize] = if s.sweeps() { &counts } else { &[1] };
            for &clients in sweep {
                let pb = progress(format!("{backend} {} ×{clients}", s.name()), args.ops);
                let setup = scenario::Setup {
                    cfg,
                    locks: &locks,
                    clients,
                    ops: args.ops,
                    hold: args.hold,
                    progress: &pb,
                };
                let mut row = match s {
                    Scenario::Raw => floor::run(&setup).await,
                    _ => s.run(&setup).await,
                };
                pb.finish_and_clear();
                row.url = url.clone();
                rows.push(row);
            }
        }
        let _ = locks.close().await;
    }
    let report = Report {
        clients: counts,
        ops: args.ops,
        hold_us: args.hold.as_micros() as u64,
        rows,
    };
    let text = if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => s + "\n",
            Err(e) => {
                complain(format!("cannot encode JSON: {e}"));
                return code::FAILURE;
            }
        }
    } else {
        report::table(&report)
    };
    // A closed pipe (`| head`) is not worth a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    if let Some(path) = &args.report {
        if let Err(e) = std::fs::write(path, report::html(&report)) {
            complain(format!("cannot write {}: {e}", path.display()));
            return code::FAILURE;
        }
        crate::exit::complain(format_args!("wrote {}", path.display()));
    }
    let violations: u64 = report.rows.iter().map(|r| r.violations).sum();
    let errors = report.rows.iter().filter(|r| r.status == "error").count();
    if violations > 0 {
        complain(format!("{violations} mutual-exclusion violations detected"));
        return code::FAILURE;
    }
    if errors > 0 {
        complain(format!("{errors} scenario(s) failed"));
        return code::FAILURE;
    }
    0
}
