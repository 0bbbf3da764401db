//! The coordinator: serves the register, runs the workers, injects the faults, then checks.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use rand::{rngs::StdRng, SeedableRng};
use rustix::process::Signal;
use tokio::process::{Child, Command};

use crate::check::{check, Report};
use crate::clock::{micros, now, Micros};
use crate::faults::{pick, schedule, signal, Ctl, FaultKind};
use crate::leftovers::{scan, scan_live, Leftovers, Phase};
use crate::linearizability::{self, Linearizability};
use crate::links::Links;
use crate::probe::{self, Probe};
use crate::proto::{FaultRecord, LogLine, RunInfo};
use crate::register::Register;
use crate::subject::Primitive;

/// The coordinator's parameters (also the `run` command's options).
#[derive(Clone, Debug, clap::Args)]
pub struct RunArgs {
    /// Backend URL for the workers.
    #[arg(long)]
    pub url: String,
    /// Topology label for the report.
    #[arg(long, default_value = "single")]
    pub topology: String,
    /// Server group for the control command (a member name for a single server).
    #[arg(long)]
    pub group: String,
    /// Server control command, called as `CTL VERB GROUP [MEMBER]`.
    #[arg(long, default_value = "scripts/faults.sh ctl")]
    pub ctl: String,
    /// Concurrent worker processes.
    #[arg(long, default_value_t = 3)]
    pub workers: u32,
    /// Watchdog lease.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub lease: Duration,
    /// Each worker acquire's wait budget, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub wait_ms: u64,
    /// How long the workers run.
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Seed of the fault schedule and hold times.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fault kinds, comma separated: the process faults by default; the network faults
    /// (`partition-holder`, `slow-holder`, `half-open-holder`, `reset-clients`) put a proxy on
    /// every worker's links to the servers; `isolate-leader` and `isolate-follower` partition a
    /// server member from its group (etcd and ZooKeeper clusters).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill-holder,pause-holder,kill-leader,stop-leader,pause-server,restart-server"
    )]
    pub faults: Vec<FaultKind>,
    /// How long pause-holder and pause-server stop their target (default: twice the lease).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub pause: Option<Duration>,
    /// Time between faults.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub every: Duration,
    /// Wait after the workers closed their handles before the second leftover scan.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// Output directory.
    #[arg(long, default_value = "target/faults")]
    pub out: PathBuf,
    /// Range of a hold's length in milliseconds (`MIN-MAX`).
    #[arg(long, default_value = "50-250", value_parser = parse_range)]
    pub hold_ms: (u64, u64),
    /// What the workers contend for: a mutex, an election (a leadership is a hold, its term a
    /// token), an RW lock, a semaphore or multi-locks.
    #[arg(long, value_enum, default_value_t)]
    pub primitive: Primitive,
    /// The linearizability checker (`lockkit-faults/porcupine`, built by `scripts/faults.sh`):
    /// when given, the run's history is checked against a lock model with fencing tokens.
    #[arg(long)]
    pub porcupine: Option<PathBuf>,
    /// How long the linearizability search may take before it answers `Unknown`.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub porcupine_timeout: Duration,
}

impl RunArgs {
    /// How long a pause fault lasts.
    pub fn pause(&self) -> Duration {
        self.pause.unwrap_or(self.lease * 2)
    }
}

/// A run's findings: the checker's report, the final probe and leftovers.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Outcome {
    /// The checker's report.
    pub report: Report,
    /// Blocked hand-offs: the checker's, plus one if the final probe got no lock in time.
    pub blocked_handoffs: usize,
    /// A fresh client's acquire once the workers had stopped acquiring (their handles still
    /// open).
    pub final_probe: Probe,
    /// What the run left on the servers while the workers' handles were still open, after a
    /// grace of up to one lease + 2 s for cleanups in flight.
    pub leftovers: Leftovers,
    /// What was left once the workers had closed their handles, plus `--grace`.
    pub leftovers_after_close: Leftovers,
    /// Workers still running at the end that had to be killed.
    pub stragglers: Vec<u32>,
    /// Workers that exited with a failure (see worker-N.log).
    pub failed_workers: Vec<u32>,
    /// The linearizability check's verdict, when `--porcupine` was given.
    pub linearizability: Option<Linearizability>,
    /// Why the run failed (empty: it passed), as the verdict found.
    pub failures: Vec<String>,
}

impl Outcome {
    /// Writes `report.json` into `dir`.
    pub fn write(&self, dir: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(
            dir.join("report.json"),
            serde_json::to_string_pretty(self).map_err(std::io::Error::other)?,
        )
    }
}

struct Workers {
    args: RunArgs,
    /// The workers' proxies, when a network fault is scheduled.
    links: Option<Links>,
    name: String,
    register: String,
    until: Micros,
    children: HashMap<u32, Child>,
    next_id: u32,
}

impl Workers {
    /// The workers' proxies (there are some whenever a network fault is scheduled).
    fn links(&self) -> std::io::Result<&Links> {
        self.links
            .as_ref()
            .ok_or_else(|| std::io::Error::other("network faults need the workers' links"))
    }

    async fn spawn(&mut self) -> std::io::Result<()> {
        let id = self.next_id;
        self.next_id += 1;
        let url = match &mut self.links {
            Some(links) => links.open(id).await?,
            None => self.args.url.clone(),
        };
        let log = std::fs::File::create(self.args.out.join(format!("worker-{id}.log")))?;
        let child = Command::new(std::env::current_exe()?)
            .arg("worker")
            .args(["--id", &id.to_string()])
            .args(["--url", &url])
            .args(["--name", &self.name])
            .args(["--register", &self.register])
            .args(["--lease-ms", &self.args.lease.as_millis().to_string()])
            .args(["--wait-ms", &self.args.wait_ms.to_string()])
            .args(["--until", &self.until.to_string()])
            .args([
                "--seed",
                &(self.args.seed ^ u64::from(id) << 32).to_string(),
            ])
            .args([
                "--hold-ms",
                &format!("{}-{}", self.args.hold_ms.0, self.args.hold_ms.1),
            ])
            .args(["--primitive", self.args.primitive.as_str()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        self.children.insert(id, child);
        Ok(())
    }
}

/// Runs the whole experiment and checks it.
pub async fn run(args: RunArgs) -> std::io::Result<Outcome> {
    let isolates = args
        .faults
        .iter()
        .any(|k| matches!(k, FaultKind::IsolateLeader | FaultKind::IsolateFollower));
    if isolates && !matches!(args.group.as_str(), "etcd-cluster" | "zk-ensemble") {
        return Err(std::io::Error::other(format!(
            "isolate-leader and isolate-follower need a group of members that replicate to each \
             other (etcd-cluster, zk-ensemble), not {}",
            args.group
        )));
    }
    std::fs::create_dir_all(&args.out)?;
    let reg = Register::create(&args.out.join("log.jsonl"))?;
    let addr = reg.serve().await?;
    let start = now();
    let name = format!(
        "faults-{}-{}-{}",
        args.topology,
        args.seed,
        std::process::id()
    );
    reg.log(LogLine::Run(RunInfo {
        url: args.url.clone(),
        topology: args.topology.clone(),
        seed: args.seed,
        workers: args.workers,
        primitive: args.primitive.as_str().to_string(),
        permits: args.primitive.permits(),
        lease_ms: args.lease.as_millis() as u64,
        wait_ms: args.wait_ms,
        command_timeout_ms: command_timeout(&args.url)?.as_millis() as u64,
        duration_ms: args.duration.as_millis() as u64,
        name: name.clone(),
        start,
    }));
    let until = start + micros(args.duration);
    let links = if args.faults.iter().any(|k| k.is_network()) {
        Some(Links::new(&args.url)?)
    } else {
        None
    };
    let mut workers = Workers {
        args: args.clone(),
        links,
        name: name.clone(),
        register: addr.to_string(),
        until,
        children: HashMap::new(),
        next_id: 1,
    };
    for _ in 0..args.workers {
        workers.spawn().await?;
    }

    let mut rng = StdRng::seed_from_u64(args.seed);
    let settle = Duration::from_secs(3);
    let tail = args.lease * 2;
    let window = args.duration.saturating_sub(settle + tail);
    let count = (window.as_micros() / args.every.as_micros().max(1)) as usize + 1;
    let plan = schedule(&args.faults, count, &mut rng);
    let ctl = Ctl::new(&args.ctl, &args.group);
    let mut next = start + micros(settle);
    for kind in plan {
        tokio::time::sleep(crate::clock::until(next)).await;
        if now() + micros(tail) >= until {
            break;
        }
        match inject(kind, &args, &ctl, &reg, &mut workers, &mut rng).await {
            Ok(Some(f)) => {
                eprintln!(
                    "faults: {} on {} ({} ms)",
                    f.kind,
                    f.target,
                    (f.end - f.start) / 1000
                );
                reg.log(LogLine::Fault(f));
            }
            Ok(None) => eprintln!("faults: {} skipped: nobody held the lock", kind.as_str()),
            Err(e) => {
                eprintln!("faults: {} failed: {e}", kind.as_str());
                return Err(e);
            }
        }
        next = (next + micros(args.every)).max(now() + 1_000_000);
    }

    // Workers stop acquiring by themselves at `until`, report `Done` and wait with their
    // handles open; kill those that neither report nor exit in time.
    let mut stragglers = Vec::new();
    let mut failed_workers = Vec::new();
    let mut exited = HashSet::new();
    let deadline = until + 20_000_000;
    loop {
        for (id, child) in workers.children.iter_mut() {
            if exited.contains(id) {
                continue;
            }
            if let Ok(Some(status)) = child.try_wait() {
                exited.insert(*id);
                if !status.success() {
                    failed_workers.push(*id);
                }
            }
        }
        let waiting: Vec<u32> = workers
            .children
            .keys()
            .filter(|id| !exited.contains(*id) && !reg.is_done(**id))
            .copied()
            .collect();
        if waiting.is_empty() {
            break;
        }
        if now() >= deadline {
            for id in waiting {
                stragglers.push(id);
                exited.insert(id);
                if let Some(child) = workers.children.get_mut(&id) {
                    let _ = child.kill().await;
                }
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Probe and scan while the workers' sessions are alive: close() would revoke what they
    // hold and hide keys the protocol left behind.
    let final_probe = probe::run(&args.url, args.primitive, &name, args.lease).await;
    let grace = args.lease + Duration::from_secs(2);
    let leftovers = scan_live(&args.url, args.primitive, &name, grace).await;
    reg.let_workers_leave();
    let deadline = now() + 15_000_000;
    for (id, child) in workers.children.iter_mut() {
        if exited.contains(id) {
            continue;
        }
        match tokio::time::timeout(crate::clock::until(deadline), child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(_) => failed_workers.push(*id),
            Err(_) => {
                stragglers.push(*id);
                let _ = child.kill().await;
            }
        }
    }
    stragglers.sort();
    failed_workers.sort();
    tokio::time::sleep(args.grace).await;
    let leftovers_after_close = scan(&args.url, args.primitive, &name, Phase::AfterClose).await;
    let report = check(&reg.lines());
    let linearizability = match &args.porcupine {
        Some(program) => Some(
            linearizability::check(
                program,
                &report.history_input,
                &args.out,
                args.porcupine_timeout,
            )
            .await,
        ),
        None => {
            linearizability::write_history(&report.history_input, &args.out)?;
            None
        }
    };
    let outcome = Outcome {
        blocked_handoffs: report.handoffs.blocked.len() + usize::from(final_probe.blocked()),
        report,
        final_probe,
        leftovers,
        leftovers_after_close,
        stragglers,
        failed_workers,
        linearizability,
        failures: Vec::new(),
    };
    Ok(outcome)
}

/// The URL's `command_timeout`, or lockkit's default.
fn command_timeout(url: &str) -> std::io::Result<Duration> {
    let url = lockkit::ServerUrl::parse(url).map_err(std::io::Error::other)?;
    url.param("command_timeout")
        .map_or(Ok(lockkit::settings::DEFAULT_COMMAND_TIMEOUT), |v| {
            humantime::parse_duration(v).map_err(std::io::Error::other)
        })
}

/// Waits up to 8 s for a holder whose acquire is at most 40 ms old (so the fault lands mid-hold).
async fn fresh_holder(reg: &Register) -> Option<(u32, u32)> {
    let give_up = now() + 8_000_000;
    while now() < give_up {
        if let Some((worker, pid, at)) = reg.current_holder() {
            if now().saturating_sub(at) <= 40_000 {
                return Some((worker, pid));
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

async fn inject(
    kind: FaultKind,
    args: &RunArgs,
    ctl: &Ctl,
    reg: &Register,
    workers: &mut Workers,
    rng: &mut StdRng,
) -> std::io::Result<Option<FaultRecord>> {
    let record = |target: String, worker: Option<u32>, start: Micros| FaultRecord {
        kind: kind.as_str().to_string(),
        target,
        worker,
        start,
        end: now(),
    };
    let pause = args.pause();
    Ok(Some(match kind {
        FaultKind::KillHolder => {
            let Some((worker, pid)) = fresh_holder(reg).await else {
                return Ok(None);
            };
            let start = now();
            signal(pid, Signal::KILL)?;
            reg.forget(worker);
            if let Some(mut child) = workers.children.remove(&worker) {
                let _ = child.wait().await;
            }
            if let Some(links) = &mut workers.links {
                links.close(worker);
            }
            workers.spawn().await?;
            record(format!("worker {worker}"), Some(worker), start)
        }
        FaultKind::PauseHolder => {
            let Some((worker, pid)) = fresh_holder(reg).await else {
                return Ok(None);
            };
            let start = now();
            signal(pid, Signal::STOP)?;
            tokio::time::sleep(pause).await;
            // The end is taken before SIGCONT: the worker cannot run before it.
            let fault = record(format!("worker {worker}"), Some(worker), start);
            signal(pid, Signal::CONT)?;
            fault
        }
        FaultKind::KillLeader | FaultKind::StopLeader => {
            let leader = ctl.leader().await?;
            let verb = if kind == FaultKind::KillLeader {
                "kill"
            } else {
                "stop"
            };
            ctl.act(verb, &leader).await?;
            // From here the server is gone (both commands wait for it).
            let start = now();
            tokio::time::sleep(args.lease).await;
            ctl.act("start", &leader).await?;
            record(leader, None, start)
        }
        FaultKind::PauseServer => {
            let leader = ctl.leader().await?;
            ctl.act("pause", &leader).await?;
            let start = now();
            tokio::time::sleep(pause).await;
            ctl.act("resume", &leader).await?;
            record(leader, None, start)
        }
        FaultKind::PartitionHolder | FaultKind::SlowHolder | FaultKind::HalfOpenHolder => {
            let links = workers.links()?;
            let Some((worker, _)) = fresh_holder(reg).await else {
                return Ok(None);
            };
            let start = now();
            match kind {
                FaultKind::SlowHolder => links.slow(
                    worker,
                    Duration::from_millis(200),
                    Duration::from_millis(1800),
                ),
                FaultKind::HalfOpenHolder => links.hold_answers(worker),
                _ => links.partition(worker),
            }
            tokio::time::sleep(pause).await;
            if kind == FaultKind::HalfOpenHolder {
                links.reset(worker);
            }
            links.heal(worker);
            record(format!("worker {worker}"), Some(worker), start)
        }
        FaultKind::ResetClients => {
            let links = workers.links()?;
            let start = now();
            links.reset_all();
            record("every worker".into(), None, start)
        }
        FaultKind::IsolateLeader | FaultKind::IsolateFollower => {
            let leader = ctl.leader().await?;
            let member = if kind == FaultKind::IsolateLeader {
                leader
            } else {
                let followers: Vec<String> = ctl
                    .members()
                    .await?
                    .into_iter()
                    .filter(|m| *m != leader)
                    .collect();
                pick(&followers, rng).ok_or_else(|| std::io::Error::other("no followers"))?
            };
            ctl.act("isolate", &member).await?;
            let start = now();
            tokio::time::sleep(pause).await;
            ctl.act("heal", &member).await?;
            record(member, None, start)
        }
        FaultKind::RestartServer => {
            let members = ctl.members().await?;
            let member = pick(&members, rng).ok_or_else(|| std::io::Error::other("no members"))?;
            ctl.act("stop", &member).await?;
            let start = now();
            ctl.act("start", &member).await?;
            record(member, None, start)
        }
    }))
}

/// `MIN-MAX` (milliseconds), as the fault interval options take it.
pub(crate) fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s.split_once('-').ok_or("expected MIN-MAX")?;
    let (a, b) = (
        a.parse().map_err(|e| format!("{e}"))?,
        b.parse().map_err(|e| format!("{e}"))?,
    );
    if a > b {
        return Err("MIN must not exceed MAX".into());
    }
    Ok((a, b))
}
