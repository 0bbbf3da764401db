//! `lockkit exec`: run a command while holding a lock.

mod stop;

use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use lockkit::{AcquireOptions, LockConfig, LockState, Locks};
use rustix::process::{kill_process, Pid, Signal};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::duration;
use crate::exit::{code, complain, error_code};
use crate::guard::{AnyLock, HoldKind};
use crate::target::Target;
use stop::Stop;

/// Arguments of `lockkit exec`.
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The lock name.
    pub(crate) name: String,

    #[command(flatten)]
    pub(crate) holding: Holding,

    /// Take the read (shared) side of the RW lock NAME.
    #[arg(long, conflicts_with_all = ["write", "semaphore"])]
    pub(crate) shared: bool,

    /// Take the write (exclusive) side of the RW lock NAME (excludes --shared holders).
    #[arg(long, conflicts_with = "semaphore")]
    pub(crate) write: bool,

    /// Take one permit of the semaphore NAME with N permits in total.
    #[arg(long, value_name = "N")]
    pub(crate) semaphore: Option<u32>,

    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<String>,
}

/// How `exec` and `elect` wait, hold and stop their command.
#[derive(Debug, Args)]
pub(crate) struct Holding {
    /// How long to wait for the lock (`elect`: to lead) before giving up with exit code 75;
    /// `0` = one try. Default: forever.
    #[arg(long, value_parser = duration::any, value_name = "DURATION", allow_hyphen_values = true)]
    pub(crate) wait: Option<Duration>,

    /// Watchdog lease: renewed while lockkit runs, so a crashed lockkit frees the lock (gives
    /// leadership up) after it.
    #[arg(
        long,
        value_parser = duration::lease,
        value_name = "DURATION",
        conflicts_with = "fixed_lease",
        allow_hyphen_values = true
    )]
    pub(crate) lease: Option<Duration>,

    /// Fixed lease, not renewed: the command is stopped before it runs out (see --kill-after).
    #[arg(long, value_parser = duration::lease, value_name = "DURATION", allow_hyphen_values = true)]
    pub(crate) fixed_lease: Option<Duration>,

    /// How long the command gets between SIGTERM and SIGKILL when its lock (leadership) is lost
    /// or at risk. SIGKILL goes out 100ms (a tenth of the lease if shorter) before the lease's
    /// deadline at the latest, SIGTERM this long before that: from the start for a fixed lease,
    /// once a renewal failed for a watchdog lease. At most a third of the lease (exit 64
    /// otherwise, checked before the lock is taken and again against the lease the server
    /// granted, which a server may make shorter than the one asked for: the lock is then
    /// released unused). Default: 10s, or a third of the lease if shorter.
    #[arg(long, value_parser = duration::any, value_name = "DURATION", allow_hyphen_values = true)]
    pub(crate) kill_after: Option<Duration>,
}

impl ExecArgs {
    fn hold_kind(&self) -> (HoldKind, u32) {
        match (self.shared, self.write, self.semaphore) {
            (true, _, _) => (HoldKind::Read, 0),
            (_, true, _) => (HoldKind::Write, 0),
            (_, _, Some(n)) => (HoldKind::Permit, n),
            _ => (HoldKind::Mutex, 0),
        }
    }

    fn options(&self) -> AcquireOptions {
        let mut opts = AcquireOptions::new();
        if let Some(w) = self.holding.wait {
            opts = opts.wait(w);
        }
        if let Some(l) = self.holding.fixed_lease {
            opts = opts.fixed_lease(l);
        }
        opts
    }
}

/// The exit code a shell would give for `status`.
pub(crate) fn status_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(sig)) => (128 + sig).min(255) as u8,
        _ => code::FAILURE,
    }
}

/// How long the supervisor gets to kill the command's group before it is SIGKILLed itself.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// How often the lease's deadline is looked at again while it may move (a renewal moves it
/// later; a renewal whose answer was lost can move it earlier).
const RECHECK: Duration = Duration::from_millis(100);

fn send(pid: Option<u32>, sig: Signal) {
    if let Some(pid) = pid.and_then(|p| Pid::from_raw(p as i32)) {
        // The child may have exited already; nothing to do then.
        let _ = kill_process(pid, sig);
    }
}

pub(crate) async fn run(target: &Target, args: ExecArgs) -> u8 {
    run_as(target, args, None).await
}

/// How long the handle's close may take at the end: what it gives back (a place in the queue
/// a signal left, a release the server did not take yet) is otherwise dropped with the
/// runtime, and waits for its lease or session to end on the server.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);

/// `exec`, or with `leader` (the value to campaign with) `elect`: the command runs while this
/// process leads the election NAME, with `LOCKKIT_TERM` in its environment.
pub(crate) async fn run_as(target: &Target, args: ExecArgs, leader: Option<String>) -> u8 {
    let (cfg, locks) = match target.connect_with_lease(args.holding.lease).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let status = hold(&cfg, &locks, args, leader).await;
    // Every way out ends here, a signal that dropped the acquire included: its claim (a place
    // in the queue, or a lock granted just then) is in the reaper, which `close` waits for.
    let _ = tokio::time::timeout(CLOSE_WITHIN, locks.close()).await;
    status
}

/// Takes the lock and runs the command under it: the exit code.
async fn hold(cfg: &LockConfig, locks: &Locks, args: ExecArgs, leader: Option<String>) -> u8 {
    let (kind, permits) = args.hold_kind();
    if kind == HoldKind::Permit && permits == 0 {
        complain("--semaphore needs at least one permit");
        return code::USAGE;
    }
    // Said before waiting for the lock: a --kill-after that does not fit the lease.
    let asked_lease = args
        .holding
        .fixed_lease
        .unwrap_or_else(|| locks.default_lease());
    if let Err(e) = Stop::new(args.holding.kill_after, asked_lease) {
        complain(e);
        return code::USAGE;
    }
    let is_leader = leader.is_some();
    let made = match leader {
        Some(value) => AnyLock::leader(locks, &args.name, value),
        None => AnyLock::new(locks, &args.name, kind, permits),
    };
    let what = if is_leader { "election" } else { "lock" };
    let lock = match made {
        Ok(l) => l,
        Err(e) => {
            complain(format!("{what} {:?}: {e}", args.name));
            return error_code(&e);
        }
    };
    // Signals that arrive while we wait for the lock end the wait (nothing to forward yet).
    let (mut sigint, mut sigterm, mut sighup) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        _ => {
            complain("cannot install signal handlers");
            return code::FAILURE;
        }
    };
    // Without --lease or --fixed-lease the handle's default lease applies: the config's
    // (`lease = "10s"`, `?lease=10s`, LOCKKIT_LEASE); `--lease` became the handle's lease above.
    let opts = args.options();
    let acquired = tokio::select! {
        r = lock.acquire(&opts) => r,
        _ = sigint.recv() => return 128 + 2,
        _ = sigterm.recv() => return 128 + 15,
        _ = sighup.recv() => return 128 + 1,
    };
    let guard = match acquired {
        Ok(Some(g)) => g,
        Ok(None) => {
            complain(format!(
                "{} {:?} is busy{} on {}",
                what,
                args.name,
                match args.holding.wait {
                    Some(w) if !w.is_zero() =>
                        format!(" (waited {})", humantime::format_duration(w)),
                    _ => String::new(),
                },
                lockkit::redact(&cfg.url)
            ));
            return code::BUSY;
        }
        Err(e) => {
            complain(format!("cannot acquire {:?}: {e}", args.name));
            return error_code(&e);
        }
    };

    // From the lease the guard has (a server may grant another than the one asked for).
    let stop = match Stop::new(args.holding.kill_after, guard.lease().duration()) {
        Ok(s) => s,
        Err(e) => {
            let _ = guard.release().await;
            complain(e);
            return code::USAGE;
        }
    };

    // A SIGCHLD that our parent ignores would be ignored by the supervisor too (the kernel
    // would then reap the command unseen): handling it here makes the supervisor start with the
    // default action, since exec resets handled signals.
    let _sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(_) => {
            let _ = guard.release().await;
            complain("cannot install signal handlers");
            return code::FAILURE;
        }
    };
    // Started so that it and its process group die with us (see `child.rs`): nothing it
    // started runs on without the lock.
    let spawned = crate::child::command(&args.command).and_then(|mut cmd| {
        cmd.env("LOCKKIT_FENCING_TOKEN", guard.token().0.to_string())
            .env("LOCKKIT_LOCK_NAME", &args.name)
            .kill_on_drop(false);
        if is_leader {
            cmd.env("LOCKKIT_TERM", guard.token().0.to_string());
        }
        cmd.spawn()
    });
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = guard.release().await;
            complain(format!("cannot run {:?}: {e}", args.command[0]));
            return match e.kind() {
                std::io::ErrorKind::NotFound => code::NOT_FOUND,
                _ => code::CANNOT_EXEC,
            };
        }
    };
    let pid = child.id();
    let mut lost = guard.lost();
    let mut lost_seen = false;
    // When SIGTERM went out (the deadline near, or the lock lost), and the group's SIGKILL.
    let mut termed: Option<Instant> = None;
    let mut killed: Option<Instant> = None;
    let fixed = !guard.lease().is_watchdog();
    let status = loop {
        let left = guard.remaining();
        // A watchdog lease is at risk once its guard no longer reads Held (module `stop`).
        let at_risk = fixed || guard.state() != LockState::Held;
        if termed.is_none() && left.is_some_and(|l| stop.term_in(l, at_risk).is_zero()) {
            // Signalled before anything is written: with `stty tostop`, a write from a
            // background lockkit (the command has the terminal) would stop lockkit first.
            send(pid, Signal::TERM);
            termed = Some(Instant::now());
            complain(format!(
                "the lease of {what} {:?} (token {}) ends in {}; sent the command SIGTERM \
                 (SIGKILL in {} at the latest)",
                args.name,
                guard.token(),
                duration::human(left.unwrap_or_default()),
                duration::human(stop.kill_in(left, Duration::ZERO)),
            ));
        }
        if let (Some(t), None) = (termed, killed) {
            if stop.kill_in(left, t.elapsed()).is_zero() {
                // The supervisor SIGKILLs the whole group; SIGKILL to the supervisor itself
                // would take only the command's main process along.
                send(pid, crate::child::KILL_NOW);
                killed = Some(Instant::now());
                complain(format!(
                    "the command did not exit {} after SIGTERM{}; sent its process group SIGKILL",
                    duration::human(t.elapsed()),
                    if t.elapsed() < stop.kill_after {
                        ", and the lease's deadline is near"
                    } else {
                        ""
                    }
                ));
            }
        }
        if killed.is_some_and(|k| k.elapsed() >= KILL_GRACE) {
            send(pid, Signal::KILL);
            break child.wait().await;
        }
        // The next step's time; while there is a deadline, it is looked at again meanwhile.
        let next = match (termed, killed) {
            (None, _) => left.map(|l| stop.term_in(l, at_risk)),
            (Some(t), None) => Some(stop.kill_in(left, t.elapsed())),
            (Some(_), Some(k)) => Some(KILL_GRACE.saturating_sub(k.elapsed())),
        };
        let next = match left {
            Some(_) => next.map(|n| n.min(RECHECK)),
            None => next,
        };
        tokio::select! {
            s = child.wait() => break s,
            _ = sigint.recv() => send(pid, Signal::INT),
            _ = sigterm.recv() => send(pid, Signal::TERM),
            _ = sighup.recv() => send(pid, Signal::HUP),
            _ = &mut lost, if !lost_seen => {
                lost_seen = true;
                if termed.is_none() {
                    send(pid, Signal::TERM);
                    termed = Some(Instant::now());
                    complain(format!(
                        "lost {what} {:?} (token {}) while the command ran; sent it SIGTERM",
                        args.name,
                        guard.token()
                    ));
                } else {
                    complain(format!(
                        "lost {what} {:?} (token {}) while the command was being stopped",
                        args.name,
                        guard.token()
                    ));
                }
            }
            _ = tokio::time::sleep(next.unwrap_or(Duration::MAX)), if next.is_some() => {}
        }
    };
    if termed.is_some() {
        // Stopped for the lock's sake: the command's own status does not count.
        let _ = guard.release().await;
        return code::LOST;
    }
    let lost_meanwhile = guard.state() == LockState::Lost;
    let released = guard.release().await;
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            complain(format!("waiting for the command failed: {e}"));
            return code::FAILURE;
        }
    };
    if lost_meanwhile {
        complain(format!(
            "lost {what} {:?} before the command finished",
            args.name
        ));
        return code::LOST;
    }
    if let Err(e) = released {
        complain(format!("releasing {:?}: {e}", args.name));
        if matches!(e.kind(), lockkit::ErrorKind::LockLost) {
            return code::LOST;
        }
    }
    status_code(status)
}
