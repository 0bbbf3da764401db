//! The lockkit fault harness: K worker processes contend for one lock through a lockkit URL and
//! write `(token, worker, start, end)` to a fenced register while holders and servers are killed,
//! paused and restarted on a seeded schedule; a checker then reports overlaps, unsignalled
//! overlaps, stale writes, lost-signal latency, recovery time, blocked hand-offs and leftovers.
//!
//! ```text
//! lockkit-faults run --url etcd://127.0.0.1:2379?lease_ttl=2s --group etcd-cluster --seed 1
//! lockkit-faults check out/log.jsonl
//! lockkit-faults table target/faults/*/report.json
//! ```

mod check;
mod clock;
mod faults;
mod handoff;
mod history;
mod leftovers;
mod linearizability;
mod links;
mod probe;
mod proto;
mod register;
mod run;
mod subject;
mod table;
mod trace;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "lockkit-faults", about = "lockkit fault harness")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// What a run must show besides 0 stale writes accepted (which always fails it).
#[derive(Clone, Copy, Debug, clap::Args)]
struct Targets {
    /// Also fail on unsignalled overlaps, a paused holder told later than 1 s after resuming,
    /// blocked hand-offs and leftovers (the etcd and ZooKeeper targets).
    #[arg(long)]
    strict: bool,
    /// With --strict: fail unless a pause-holder fault landed in the middle of a hold (so
    /// the lost-after-resume target was really exercised).
    #[arg(long)]
    require_pause: bool,
    /// Fail unless at least one acquire timed out (wait budget ran out, or a `Timeout` error)
    /// while a fault was in effect, so that a timeouts run really exercised timed-out acquires.
    #[arg(long)]
    require_timeouts: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run workers against URL, inject faults, check, print the report.
    Run {
        #[command(flatten)]
        args: run::RunArgs,
        #[command(flatten)]
        targets: Targets,
    },
    /// Internal: one worker process.
    Worker {
        #[arg(long)]
        id: u32,
        #[arg(long)]
        url: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        register: String,
        #[arg(long)]
        lease_ms: u64,
        #[arg(long)]
        wait_ms: u64,
        #[arg(long)]
        until: u64,
        #[arg(long)]
        seed: u64,
        #[arg(long, value_parser = run::parse_range)]
        hold_ms: (u64, u64),
        #[arg(long, value_enum, default_value_t)]
        primitive: subject::Primitive,
    },
    /// Print a Markdown results table from runs' report.json files.
    Table {
        /// report.json files.
        reports: Vec<PathBuf>,
    },
    /// Re-run the checker on a run log.
    Check {
        /// The run's log.jsonl.
        log: PathBuf,
        /// Also run the linearizability checker (writes history.json, and porcupine.html for a
        /// history that is not linearizable, beside the log).
        #[arg(long)]
        porcupine: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lockkit-faults: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async_main(cli.cmd))
}

async fn async_main(cmd: Cmd) -> ExitCode {
    match cmd {
        Cmd::Worker {
            id,
            url,
            name,
            register,
            lease_ms,
            wait_ms,
            until,
            seed,
            hold_ms,
            primitive,
        } => {
            trace::install();
            let args = worker::WorkerArgs {
                id,
                url,
                name,
                register,
                lease: Duration::from_millis(lease_ms),
                wait: Duration::from_millis(wait_ms),
                until,
                seed,
                hold_ms,
                primitive,
            };
            match worker::run(args).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("worker {id}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Table { reports } => match table::print(&reports) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lockkit-faults: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Check { log, porcupine } => {
            let lines = match read_log(&log) {
                Ok(lines) => lines,
                Err(e) => {
                    eprintln!("lockkit-faults: {}: {e}", log.display());
                    return ExitCode::FAILURE;
                }
            };
            let report = check::check(&lines);
            println!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            );
            if let Some(program) = porcupine {
                let dir = log.parent().unwrap_or(std::path::Path::new("."));
                let l = linearizability::check(
                    &program,
                    &report.history_input,
                    dir,
                    std::time::Duration::from_secs(60),
                )
                .await;
                println!("{}", serde_json::to_string(&l).unwrap_or_default());
                if l.error.is_some() || l.result != "Ok" {
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Cmd::Run { args, targets } => match run::run(args.clone()).await {
            Ok(mut outcome) => {
                outcome.failures = failures(&outcome, targets);
                print_result(&args, &outcome);
                if let Err(e) = outcome.write(&args.out) {
                    eprintln!("lockkit-faults: cannot write report.json: {e}");
                    return ExitCode::FAILURE;
                }
                if outcome.failures.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    println!("FAILED: {}", outcome.failures.join("; "));
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("lockkit-faults: run failed: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn read_log(path: &std::path::Path) -> std::io::Result<Vec<proto::LogLine>> {
    std::fs::read_to_string(path)?
        .lines()
        .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
        .collect()
}

fn fmt_stats(s: &check::Stats) -> String {
    match (s.p50, s.max) {
        (Some(p50), Some(max)) => format!("{p50:.0}/{max:.0}"),
        _ => "-".into(),
    }
}

fn fmt_probe(p: &probe::Probe) -> String {
    match (p.ms, &p.error) {
        (Some(ms), None) => format!("{ms:.0} ms"),
        (Some(ms), Some(e)) => format!("{ms:.0} ms, then {e}"),
        (None, e) => e.clone().unwrap_or_default(),
    }
}

fn fmt_leftovers(l: &leftovers::Leftovers) -> String {
    match &l.error {
        Some(e) => format!("scan failed: {e}"),
        None => l.count().to_string(),
    }
}

/// Acquires that timed out while a fault was in effect (summed over the faults).
fn timeouts_in_faults(r: &check::Report) -> usize {
    r.faults.iter().map(|f| f.acquire_timeouts).sum()
}

/// Why the run fails its targets (empty: it passes).
fn failures(o: &run::Outcome, t: Targets) -> Vec<String> {
    let r = &o.report;
    let mut failures = Vec::new();
    if r.stale_writes_accepted > 0 {
        failures.push(format!("{} stale writes accepted", r.stale_writes_accepted));
    }
    if r.holds == 0 {
        failures.push("no hold completed".into());
    }
    if !o.failed_workers.is_empty() {
        failures.push(format!(
            "workers {:?} failed (see their worker-N.log)",
            o.failed_workers
        ));
    }
    if !o.stragglers.is_empty() {
        failures.push(format!("workers {:?} did not stop", o.stragglers));
    }
    if t.require_timeouts && timeouts_in_faults(r) == 0 {
        failures.push("no acquire timed out while a fault was in effect".into());
    }
    if let Some(l) = &o.linearizability {
        if let Some(e) = &l.error {
            failures.push(format!("the linearizability check did not run: {e}"));
        }
    }
    if t.strict {
        let h = &r.history;
        if !h.ok() {
            failures.push(format!(
                "history: {} overlaps, {} token regressions, {} stale writes accepted",
                h.overlaps.len(),
                h.token_regressions.len(),
                h.stale_writes_accepted.len()
            ));
        }
        if let Some(l) = o.linearizability.as_ref().filter(|l| l.error.is_none()) {
            let html = l
                .html
                .as_ref()
                .map_or("history.json".into(), |p| p.display().to_string());
            match l.result.as_str() {
                "Ok" => {}
                "Illegal" => failures.push(format!("not linearizable (see {html})")),
                other => failures.push(format!(
                    "the linearizability check did not settle: {other} (see {html})"
                )),
            }
        }
        let cut_faults = r.faults.iter().filter(|f| f.cut_mid_hold.is_some());
        if cut_faults.clone().count() > 0
            && !cut_faults.clone().any(|f| f.cut_mid_hold == Some(true))
        {
            failures.push("no partition or half-open fault landed in the middle of a hold".into());
        }
        if r.unsignalled_overlaps > 0 {
            failures.push(format!("{} unsignalled overlaps", r.unsignalled_overlaps));
        }
        let paused_mid_hold = r
            .faults
            .iter()
            .filter(|f| f.paused_mid_hold == Some(true))
            .count();
        if t.require_pause && paused_mid_hold == 0 {
            failures.push("no pause-holder fault landed in the middle of a hold".into());
        }
        let lease_ms = r.run.as_ref().map_or(0, |run| run.lease_ms) as f64;
        let cut = r.slow_cut_signals(lease_ms + 1000.0);
        if cut > 0 {
            failures.push(format!(
                "{cut} cut-off holders not told within the lease + 1 s"
            ));
        }
        let slow = r.slow_pause_signals();
        if slow > 0 {
            failures.push(format!(
                "{slow} paused holders not told within 1 s of resuming"
            ));
        }
        if o.blocked_handoffs > 0 {
            failures.push(format!(
                "{} blocked hand-offs (final probe {})",
                o.blocked_handoffs,
                fmt_probe(&o.final_probe)
            ));
        }
        for (when, l) in [
            ("on live sessions", &o.leftovers),
            ("after close", &o.leftovers_after_close),
        ] {
            if l.error.is_some() || l.count() > 0 {
                failures.push(format!(
                    "leftovers {when}: {} {:?}",
                    fmt_leftovers(l),
                    l.locks.iter().chain(&l.leases).collect::<Vec<_>>()
                ));
            }
        }
    }
    failures
}

/// Prints the summary row (ending with the verdict) and one line per fault and finding.
fn print_result(args: &run::RunArgs, o: &run::Outcome) {
    let r = &o.report;
    let signalled = r.overlapping_holds - r.unsignalled_overlaps;
    println!(
        "RESULT url={} topology={} seed={} lease_ms={} pause_ms={} holds={} faults={} \
         overlapping_holds={} (signalled {}, pairs {}) \
         unsignalled={} stale_accepted={} rejected={} token_regressions={} \
         lost_latency_ms(p50/max)={} lost_after_resume_ms(p50/max)={} recovery_ms(p50/max)={} \
         blocked_handoffs={} (longest free gap outside faults {} ms, bound {:.0}; final probe {}) \
         leftovers={} (live sessions; clean after {} ms; after close {}) \
         acquire_timeouts={} (in faults {}; took ms p50/max {}) errors={:?} releases={:?} \
         history({} overlaps={} regressions={} stale_accepted={} unknown_acquires={}) \
         linearizable={} verdict={}",
        args.url,
        args.topology,
        args.seed,
        args.lease.as_millis(),
        args.pause().as_millis(),
        r.holds,
        r.faults.len(),
        r.overlapping_holds,
        signalled,
        r.overlaps.len(),
        r.unsignalled_overlaps,
        r.stale_writes_accepted,
        r.writes_rejected,
        r.token_regressions,
        fmt_stats(&r.lost_latency_ms),
        fmt_stats(&r.resume_stats()),
        fmt_stats(&r.recovery_ms),
        o.blocked_handoffs,
        r.handoffs
            .longest_free_ms
            .map_or("-".into(), |v| format!("{v:.0}")),
        r.handoffs.bound_ms,
        fmt_probe(&o.final_probe),
        fmt_leftovers(&o.leftovers),
        o.leftovers
            .clean_after_ms
            .map_or("-".into(), |v| format!("{v:.0}")),
        fmt_leftovers(&o.leftovers_after_close),
        r.acquire_timeouts,
        timeouts_in_faults(r),
        fmt_stats(&r.acquire_timeout_ms),
        r.errors,
        r.releases,
        if r.history.ok() {
            "clean"
        } else {
            "violations"
        },
        r.history.overlaps.len(),
        r.history.token_regressions.len(),
        r.history.stale_writes_accepted.len(),
        r.history.unknown_acquires,
        o.linearizability.as_ref().map_or("-", |l| l.word()),
        if o.failures.is_empty() {
            "pass".to_string()
        } else {
            format!("FAIL ({})", o.failures.join("; "))
        },
    );
    for f in &r.faults {
        println!(
            "  fault {:<15} {:<10} recovery {:>7} ms, {} acquires timed out across it{}",
            f.fault.kind,
            f.fault.target,
            f.recovery_ms.map_or("-".into(), |v| format!("{v:.0}")),
            f.acquire_timeouts,
            match (
                f.paused_mid_hold,
                f.lost_after_resume_ms,
                f.cut_mid_hold,
                f.lost_after_cut_ms
            ) {
                (Some(true), Some(l), _, _) => format!(", lost() {l:.0} ms after resume"),
                (Some(true), None, _, _) => ", lost() NEVER resolved".into(),
                (Some(false), ..) => ", paused after its hold ended".into(),
                (_, _, Some(true), Some(l)) => format!(", lost() {l:.0} ms after the cut"),
                (_, _, Some(true), None) => ", lost() NEVER resolved".into(),
                (_, _, Some(false), _) => ", cut off after its hold ended".into(),
                _ => String::new(),
            }
        );
    }
    for ov in r.overlaps.iter().filter(|o| !o.signalled) {
        println!("  unsignalled overlap: {ov:?}");
    }
    for v in &r.history.overlaps {
        println!("  history overlap: {v:?}");
    }
    for (earlier, later) in &r.history.token_regressions {
        println!("  history token regression: {earlier} then {later}");
    }
    for b in &r.handoffs.blocked {
        println!("  blocked hand-off: {b:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{FaultRecord, LogLine, Msg};

    fn outcome(lines: &[LogLine]) -> run::Outcome {
        run::Outcome {
            report: check::check(lines),
            blocked_handoffs: 0,
            final_probe: probe::Probe {
                bound_ms: 3000.0,
                ms: Some(1.0),
                error: None,
            },
            leftovers: leftovers::Leftovers::default(),
            leftovers_after_close: leftovers::Leftovers::default(),
            stragglers: Vec::new(),
            failed_workers: Vec::new(),
            linearizability: None,
            failures: Vec::new(),
        }
    }

    #[test]
    fn require_timeouts_fails_a_run_whose_acquires_never_timed_out_in_a_fault() {
        let msg = |msg| LogLine::Msg {
            at: 0,
            msg,
            accepted: None,
        };
        let pause = LogLine::Fault(FaultRecord {
            kind: "pause-server".into(),
            target: "etcd".into(),
            worker: None,
            start: 1000,
            end: 5000,
        });
        let hold = msg(Msg::Hold(proto::HoldRecord {
            lock: String::new(),
            worker: 1,
            claim: history::Claim::Exclusive,
            token: 1,
            sent: 0,
            start: 0,
            end: 10,
            believed_until: 10,
            lost_at: None,
            release: "ok".into(),
            release_sent: 15,
            released_at: 20,
            write_accepted: true,
        }));
        // A timeout after the pause does not count.
        let late = msg(Msg::NotGranted {
            worker: 1,
            sent: 6000,
            at: 7000,
        });
        let t = Targets {
            strict: true,
            require_pause: false,
            require_timeouts: true,
        };
        let lines = [pause.clone(), hold.clone(), late];
        let f = failures(&outcome(&lines), t);
        assert_eq!(f, ["no acquire timed out while a fault was in effect"]);
        let relaxed = Targets {
            require_timeouts: false,
            ..t
        };
        assert!(failures(&outcome(&lines), relaxed).is_empty());
        let during = msg(Msg::NotGranted {
            worker: 2,
            sent: 2000,
            at: 3200,
        });
        assert!(failures(&outcome(&[pause, hold, during]), t).is_empty());
    }
}
