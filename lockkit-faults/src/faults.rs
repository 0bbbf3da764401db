//! The fault schedule and how each fault is injected.

use std::process::Stdio;
use std::str::FromStr;

use rand::seq::SliceRandom;
use rand::{rngs::StdRng, Rng};
use rustix::process::{kill_process, Pid, Signal};
use tokio::process::Command;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL the worker holding the lock.
    KillHolder,
    /// SIGSTOP the holder for twice its lease, then SIGCONT (a GC pause).
    PauseHolder,
    /// SIGKILL the backend's leader (etcd leader, ZooKeeper leader, Redis primary), start it
    /// again a lease later.
    KillLeader,
    /// Stop the leader gracefully (`services.sh stop`: SIGTERM), start it again a lease later.
    StopLeader,
    /// SIGSTOP a server for twice the lease, then SIGCONT.
    PauseServer,
    /// Stop a server and start it again at once.
    RestartServer,
    /// Cut the holder off from every server for twice its lease (nothing passes either way, its
    /// sockets stay open), then heal in place: what was held is delivered late, in order.
    PartitionHolder,
    /// Delay everything on the holder's links by 200 ms to 2 s (random jitter, order kept) for
    /// twice its lease: round trips longer than a renewal interval, some longer than the lease.
    SlowHolder,
    /// The holder's connections go half-open for twice its lease (its requests still reach the
    /// servers and are applied, their answers never come back, no FIN or RST comes), then are
    /// reset: the client must notice a dead peer by itself, and what it sent meanwhile took
    /// effect unseen.
    HalfOpenHolder,
    /// Reset every worker's connections at once.
    ResetClients,
    /// Cut the servers' leader off from the rest of its group for twice the lease (nftables;
    /// clients still reach it), then heal: the leader is the minority, the others elect anew.
    IsolateLeader,
    /// Cut a follower off from the rest of its group for twice the lease, then heal: the
    /// majority keeps its leader, the clients of the follower are in the minority.
    IsolateFollower,
}

impl FaultKind {
    /// Every kind, in schedule order before shuffling.
    pub const ALL: [FaultKind; 12] = [
        FaultKind::KillHolder,
        FaultKind::PauseHolder,
        FaultKind::KillLeader,
        FaultKind::StopLeader,
        FaultKind::PauseServer,
        FaultKind::RestartServer,
        FaultKind::PartitionHolder,
        FaultKind::SlowHolder,
        FaultKind::HalfOpenHolder,
        FaultKind::ResetClients,
        FaultKind::IsolateLeader,
        FaultKind::IsolateFollower,
    ];

    /// Whether the fault acts on the workers' network links (they then reach the servers
    /// through proxies, see [`crate::links`]).
    pub fn is_network(self) -> bool {
        matches!(
            self,
            FaultKind::PartitionHolder
                | FaultKind::SlowHolder
                | FaultKind::HalfOpenHolder
                | FaultKind::ResetClients
        )
    }

    /// The kind's name on the command line and in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::KillHolder => "kill-holder",
            FaultKind::PauseHolder => "pause-holder",
            FaultKind::KillLeader => "kill-leader",
            FaultKind::StopLeader => "stop-leader",
            FaultKind::PauseServer => "pause-server",
            FaultKind::RestartServer => "restart-server",
            FaultKind::PartitionHolder => "partition-holder",
            FaultKind::SlowHolder => "slow-holder",
            FaultKind::HalfOpenHolder => "half-open-holder",
            FaultKind::ResetClients => "reset-clients",
            FaultKind::IsolateLeader => "isolate-leader",
            FaultKind::IsolateFollower => "isolate-follower",
        }
    }
}

impl FromStr for FaultKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown fault {s:?}"))
    }
}

/// The schedule: every kind once per round, each round in a seeded order.
pub fn schedule(kinds: &[FaultKind], count: usize, rng: &mut StdRng) -> Vec<FaultKind> {
    let mut out = Vec::with_capacity(count);
    while out.len() < count && !kinds.is_empty() {
        let mut round = kinds.to_vec();
        round.shuffle(rng);
        out.extend(round);
    }
    out.truncate(count);
    out
}

/// Sends a signal to a worker process.
pub fn signal(pid: u32, sig: Signal) -> std::io::Result<()> {
    let pid = Pid::from_raw(pid as i32).ok_or_else(|| std::io::Error::other("bad pid"))?;
    kill_process(pid, sig).map_err(std::io::Error::from)
}

/// Server control through an external command: `CTL VERB BACKEND [MEMBER]` with VERB one of
/// `members`, `leader` (print member names, one a line), `kill`, `stop`, `start`, `pause`,
/// `resume`, `isolate`, `heal`.
#[derive(Clone, Debug)]
pub struct Ctl {
    program: Vec<String>,
    backend: String,
}

impl Ctl {
    /// `program` is split on whitespace (e.g. `scripts/faults.sh ctl`).
    pub fn new(program: &str, backend: &str) -> Self {
        Ctl {
            program: program.split_whitespace().map(String::from).collect(),
            backend: backend.to_string(),
        }
    }

    async fn call(&self, verb: &str, member: Option<&str>) -> std::io::Result<String> {
        let (prog, args) = self
            .program
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty --ctl"))?;
        let mut cmd = Command::new(prog);
        cmd.args(args).arg(verb).arg(&self.backend);
        if let Some(m) = member {
            cmd.arg(m);
        }
        let out = cmd
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .await?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "{} {verb} {} {} failed: {}",
                self.program.join(" "),
                self.backend,
                member.unwrap_or(""),
                out.status
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The server members.
    pub async fn members(&self) -> std::io::Result<Vec<String>> {
        Ok(self
            .call("members", None)
            .await?
            .lines()
            .map(String::from)
            .collect())
    }

    /// The current leader (etcd leader, ZooKeeper leader, Redis primary).
    pub async fn leader(&self) -> std::io::Result<String> {
        let out = self.call("leader", None).await?;
        out.lines()
            .next()
            .map(String::from)
            .ok_or_else(|| std::io::Error::other("no leader"))
    }

    /// Runs `kill`, `stop`, `start`, `pause`, `resume`, `isolate` or `heal` on one member.
    pub async fn act(&self, verb: &str, member: &str) -> std::io::Result<()> {
        self.call(verb, Some(member)).await.map(|_| ())
    }
}

/// A random member (seeded).
pub fn pick(members: &[String], rng: &mut StdRng) -> Option<String> {
    if members.is_empty() {
        None
    } else {
        Some(members[rng.gen_range(0..members.len())].clone())
    }
}
