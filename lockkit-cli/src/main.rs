#![doc = include_str!("../README.md")]

mod bench;
mod child;
mod duration;
mod elect;
mod exec;
mod exit;
mod guard;
mod inspect;
mod semaphore;
mod target;
mod top;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use exit::{code, complain};
use inspect::Kind;

const AFTER_HELP: &str = "\
Backend: --url URL, or LOCKKIT_URL, or --config FILE (TOML with url = \"...\").
URLs: mem://  file:///var/lock/app  redis://host:6379  zk://h1:2181,h2:2181/chroot  etcd://h:2379
      redlock://h1:6379,h2:6379,h3:6379 (a mutex over independent Redis masters)

Exit codes:
  0..255  exec: the command's own status (128+N when it died from signal N)
  1       error (configuration, connection, backend), or a refused confirmation
  2       bad command line, a duration flag's value included (malformed, negative, out of
          range: at most 365 days, a lease at least 100ms)
  64      invalid lock name or argument
  69      the backend does not support this operation
  70      exec, elect: the lock (the leadership) was lost, or at risk near its lease's deadline, while the command
          ran; its group got SIGTERM, then SIGKILL by the deadline (see --kill-after)
  75      exec, elect: the lock stayed busy (another led) for the whole --wait
  126     exec: the command could not be executed
  127     exec: the command was not found";

/// Distributed locks from the shell: run a command under a lock, inspect and force-unlock locks,
/// and benchmark backends side by side.
#[derive(Debug, Parser)]
#[command(name = "lockkit", version, after_help = AFTER_HELP)]
struct Cli {
    /// Backend URL (repeat for `bench` to compare several backends).
    #[arg(long, global = true, value_name = "URL")]
    url: Vec<String>,

    /// A TOML config file (`url = "..."`, `lease = "30s"`, `key_prefix = "..."`, ...).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<std::path::PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command while holding a lock: a distributed flock(1).
    ///
    /// The command gets LOCKKIT_FENCING_TOKEN and LOCKKIT_LOCK_NAME in its environment;
    /// SIGINT, SIGTERM and SIGHUP sent to lockkit are forwarded to its process group; the lock
    /// is released on every exit path. On Linux the command and everything in its process group
    /// are SIGKILLed when lockkit dies (kill -9 included) and when the command exits.
    ///
    /// The command is stopped before the lock can be anyone else's, and lockkit exits 70: its
    /// process group gets SIGKILL 100ms before the lease's deadline (as lockkit computes it) at
    /// the latest, and SIGTERM --kill-after before that. A fixed lease ends at its deadline, so
    /// its command is always stopped so; a watchdog lease's deadline moves on with every
    /// renewal, so its command is stopped only once a renewal failed and the deadline came that
    /// near. A lock lost early (force-unlock, an expired session) has SIGTERM sent at once and
    /// SIGKILL --kill-after later. --kill-after is at most a third of the lease.
    #[command(after_help = AFTER_HELP)]
    Exec(exec::ExecArgs),

    /// Run a command only while this process leads an election: `exec` for leaders.
    ///
    /// Campaigns with --value (default `<host>:<pid>`), then runs the command with
    /// LOCKKIT_TERM (the leadership's term, a fencing token) and LOCKKIT_LOCK_NAME in its
    /// environment. Leadership lost, or at risk near its lease's deadline, stops the command as
    /// `exec` does (exit 70); the command's exit resigns at once, so the next candidate leads.
    #[command(after_help = AFTER_HELP)]
    Elect(elect::ElectArgs),

    /// Show an election's leader (its value and term), or follow every change with --watch.
    #[command(after_help = AFTER_HELP)]
    Leader {
        /// The election's name.
        name: String,
        /// Print every change of leader, in order, until interrupted.
        #[arg(long)]
        watch: bool,
        /// Print JSON lines (`{"name", "leader": {"value", "term"} | null}`).
        #[arg(long)]
        json: bool,
    },

    /// Show a lock's holders (owner, mode, token, remaining lease) and waiters in queue order.
    #[command(after_help = AFTER_HELP)]
    Inspect {
        /// The lock name.
        name: String,
        /// Which primitive the name refers to.
        #[arg(long, value_enum, default_value = "mutex")]
        kind: Kind,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// Show a semaphore's size (stored with it on the server) and free permits; with --set,
    /// first change its size for every handle: growing admits waiters at once, shrinking lets
    /// holders keep their permits and admits no one until the permits in use fit.
    #[command(after_help = AFTER_HELP)]
    Semaphore {
        /// The semaphore's name.
        name: String,
        /// Make this the semaphore's size (at least 1).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        set: Option<u32>,
        /// Print JSON (`{"name", "backend", "size", "previous", "available"}`).
        #[arg(long)]
        json: bool,
    },

    /// Release a lock whoever holds it (their guards turn Lost), or demote an election's leader
    /// (`--kind election`). Asks for confirmation on a terminal; refuses without --yes when
    /// stdin is not a terminal.
    #[command(name = "force-unlock", after_help = AFTER_HELP)]
    ForceUnlock {
        /// The lock name.
        name: String,
        /// Which primitive the name refers to (semaphores cannot be force-unlocked).
        #[arg(long, value_enum, default_value = "mutex")]
        kind: Kind,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },

    /// A live view of the locks under a name prefix: holders (owner, token, lease left, held
    /// for), waiters in order, acquisitions and losses per second. Keys: q quit, p pause,
    /// s sort, / filter, arrows select. --once prints one table, --json one JSON array.
    #[command(after_help = AFTER_HELP)]
    Top(top::TopArgs),

    /// Run the same lock scenarios across every --url given and report throughput, wait
    /// latency, fairness and violations.
    #[command(after_help = AFTER_HELP)]
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match args.get(1) {
        Some(a) if a == child::ARG => child::run(&args[2..]),
        Some(a) if a == child::COMMAND_ARG => child::run_command(&args[2..]),
        _ => {}
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            complain(format!("cannot start the async runtime: {e}"));
            return ExitCode::from(code::FAILURE);
        }
    };
    let status = runtime.block_on(run(cli));
    // The commands that hold locks closed their handle (which waits for their cleanup): what a
    // spawned task still does now is dropped at its next await; blocking threads get a moment.
    runtime.shutdown_timeout(Duration::from_millis(500));
    ExitCode::from(status)
}

async fn run(cli: Cli) -> u8 {
    let target = target::Target::new(cli.url, cli.config);
    match cli.command {
        Command::Exec(args) => exec::run(&target, args).await,
        Command::Elect(args) => elect::run(&target, args).await,
        Command::Leader { name, watch, json } => elect::leader(&target, &name, watch, json).await,
        Command::Inspect { name, kind, json } => inspect::inspect(&target, &name, kind, json).await,
        Command::Semaphore { name, set, json } => semaphore::run(&target, &name, set, json).await,
        Command::ForceUnlock { name, kind, yes } => {
            inspect::force_unlock(&target, &name, kind, yes).await
        }
        Command::Top(args) => top::run(&target, args).await,
        Command::Bench(args) => bench::run(&target, args).await,
    }
}
