//! What workers tell the register, and what the run log holds.

use serde::{Deserialize, Serialize};

use crate::clock::Micros;
use crate::history::Claim;

/// One request from a worker to the register (one JSON line; the register answers one line).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Msg {
    /// A worker process started.
    Hello {
        /// Worker id.
        worker: u32,
        /// Its process id.
        pid: u32,
    },
    /// An acquire returned a guard.
    Acquired {
        /// The lock: empty for the run's one lock, a member's name for a multi-lock's.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        lock: String,
        /// Worker id.
        worker: u32,
        /// What it holds.
        #[serde(default)]
        claim: Claim,
        /// The guard's fencing token.
        token: u64,
        /// When the acquire was called.
        sent: Micros,
        /// When the acquire returned.
        at: Micros,
    },
    /// The fenced write: accepted only if `token` is greater than every token accepted before
    /// for the same lock.
    Write {
        /// The lock whose token it carries: empty for the run's one lock, a member's name for a multi-lock's.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        lock: String,
        /// Worker id.
        worker: u32,
        /// The writer's fencing token.
        token: u64,
        /// When the hold began (the acquire returned).
        start: Micros,
        /// When the holder stopped using the lock (work done, or `lost()` resolved).
        end: Micros,
    },
    /// An acquire's wait budget ran out (no guard, no error).
    NotGranted {
        /// Worker id.
        worker: u32,
        /// When the acquire was called.
        sent: Micros,
        /// When it returned.
        at: Micros,
    },
    /// A finished hold, reported after its release.
    Hold(HoldRecord),
    /// The worker stopped acquiring and holds nothing; the register answers only once the
    /// coordinator has probed and scanned, so the worker's handle (sessions, leases) is still
    /// open while they run, and closes after.
    Done {
        /// Worker id.
        worker: u32,
        /// When it stopped.
        at: Micros,
    },
    /// An acquire or connect failed.
    Error {
        /// Worker id.
        worker: u32,
        /// What the failed acquire claimed; `None` for a connect, which is no acquire.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claim: Option<Claim>,
        /// When the call was made.
        sent: Micros,
        /// When it failed.
        at: Micros,
        /// The error kind.
        kind: String,
    },
}

/// One hold from acquire to release, as its worker saw it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HoldRecord {
    /// The lock: empty for the run's one lock, a member's name for a multi-lock's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lock: String,
    /// Worker id.
    pub worker: u32,
    /// What it held.
    #[serde(default)]
    pub claim: Claim,
    /// Fencing token.
    pub token: u64,
    /// The acquire was called.
    pub sent: Micros,
    /// The acquire returned.
    pub start: Micros,
    /// The worker stopped using the lock: its work was done, or `lost()` resolved first.
    pub end: Micros,
    /// The last instant the guard's `state()` read live (`Held` or `Suspect`), at most `end`:
    /// how long a holder that looks before it acts believed it held. A holder paused past its
    /// lease deadline believed only up to its last look before the pause.
    pub believed_until: Micros,
    /// When `lost()` resolved, if it did before the release finished.
    pub lost_at: Option<Micros>,
    /// The release outcome: `ok`, or the error kind (`LockLost`, `Connection`, ...).
    pub release: String,
    /// When the release was called.
    #[serde(default)]
    pub release_sent: Micros,
    /// When the release call returned.
    pub released_at: Micros,
    /// Whether the register accepted this hold's write (`false` too when it wrote none: only
    /// exclusive holds write).
    pub write_accepted: bool,
}

/// The register's answer to a request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    /// Accepted (always true except for a rejected write).
    pub ok: bool,
    /// For a rejected write: the highest token accepted so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<u64>,
}

/// A fault the coordinator injected.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultRecord {
    /// `kill-holder`, `pause-holder`, `kill-leader`, `stop-leader`, `pause-server` or
    /// `restart-server`.
    pub kind: String,
    /// The worker (`worker 3`) or server member (`etcd2`) it hit.
    pub target: String,
    /// For holder faults: the worker id.
    pub worker: Option<u32>,
    /// When the fault took effect: the holder was signalled, or the server was down / stopped.
    pub start: Micros,
    /// When the fault was over (SIGCONT / server started again); equals `start` for a kill.
    pub end: Micros,
}

/// When `worker`'s hold granted at `granted` ended because the worker was killed, if it was. A
/// killed worker is never started again (its successor has a new id), so its one kill ends
/// whatever it held; the kill's time is read just before the signal, which may be a moment
/// before the worker read the time of its grant.
pub fn killed_at(faults: &[FaultRecord], worker: u32, granted: Micros) -> Option<Micros> {
    faults
        .iter()
        .find(|f| f.kind == "kill-holder" && f.worker == Some(worker))
        .map(|f| f.start.max(granted))
}

/// One line of the run log.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LogLine {
    /// A worker's request and, for writes, the register's decision.
    Msg {
        /// When the register received it.
        at: Micros,
        /// The request.
        msg: Msg,
        /// For writes: accepted or rejected.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        accepted: Option<bool>,
    },
    /// A fault.
    Fault(FaultRecord),
    /// The run's parameters.
    Run(RunInfo),
}

/// The parameters of a run, first line of the log.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    /// Backend URL (without secrets: the harness takes none).
    pub url: String,
    /// Topology label (`single`, `cluster`, `sentinel`, ...).
    pub topology: String,
    /// Seed of the fault schedule and the workers' hold times.
    pub seed: u64,
    /// Number of concurrent workers.
    pub workers: u32,
    /// What they contend for (`mutex`, `election`, `rwlock`, `semaphore`).
    #[serde(default)]
    pub primitive: String,
    /// The lock's capacity in permits (a semaphore's size; 1 otherwise).
    #[serde(default = "one")]
    pub permits: u32,
    /// Lease in milliseconds.
    pub lease_ms: u64,
    /// Each worker acquire's wait budget in milliseconds.
    pub wait_ms: u64,
    /// The URL's `command_timeout` (lockkit's default when it sets none), in milliseconds.
    pub command_timeout_ms: u64,
    /// Run length in milliseconds.
    pub duration_ms: u64,
    /// The lock name.
    pub name: String,
    /// When the run started.
    pub start: Micros,
}

fn one() -> u32 {
    1
}
