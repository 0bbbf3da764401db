//! `lockkit exec`: run a command while holding a lock.

use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use lockkit::{AcquireOptions, LockState};
use rustix::process::{kill_process, Pid, Signal};
use tokio::signal::unix::{signal, SignalKind};

use crate::guard::{AnyLock, HoldKind};
use crate::target::Target;
use crate::{code, complain, error_code, parse_duration};

/// Arguments of `lockkit exec`.
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The lock name.
    name: String,

    /// How long to wait for a busy lock (`0` = fail at once with exit code 75). Default: forever.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    wait: Option<Duration>,

    /// Watchdog lease: renewed while lockkit runs, so a crashed lockkit frees the lock after it.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "fixed_lease")]
    lease: Option<Duration>,

    /// Fixed lease, not renewed: the lock is lost when it runs out (and the command terminated).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    fixed_lease: Option<Duration>,

    /// Take the read (shared) side of the RW lock NAME.
    #[arg(long, conflicts_with_all = ["write", "semaphore"])]
    shared: bool,

    /// Take the write (exclusive) side of the RW lock NAME (excludes --shared holders).
    #[arg(long, conflicts_with = "semaphore")]
    write: bool,

    /// Take one permit of the semaphore NAME with N permits in total.
    #[arg(long, value_name = "N")]
    semaphore: Option<u32>,

    /// After a lost lock: how long the command gets between SIGTERM and SIGKILL.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "10s")]
    kill_after: Duration,

    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
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
        if let Some(w) = self.wait {
            opts = opts.wait(w);
        }
        if let Some(l) = self.fixed_lease {
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

fn send(pid: Option<u32>, sig: Signal) {
    if let Some(pid) = pid.and_then(|p| Pid::from_raw(p as i32)) {
        // The child may have exited already; nothing to do then.
        let _ = kill_process(pid, sig);
    }
}

pub(crate) async fn run(target: &Target, args: ExecArgs) -> u8 {
    let (cfg, locks) = match target.connect_with_lease(args.lease).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let (kind, permits) = args.hold_kind();
    if kind == HoldKind::Permit && permits == 0 {
        complain("--semaphore needs at least one permit");
        return code::USAGE;
    }
    let lock = match AnyLock::new(&locks, &args.name, kind, permits) {
        Ok(l) => l,
        Err(e) => {
            complain(format!("lock {:?}: {e}", args.name));
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
                "lock {:?} is busy{} on {}",
                args.name,
                match args.wait {
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
            .kill_on_drop(false)
            .spawn()
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
    let status = loop {
        tokio::select! {
            s = child.wait() => break s,
            _ = sigint.recv() => send(pid, Signal::INT),
            _ = sigterm.recv() => send(pid, Signal::TERM),
            _ = sighup.recv() => send(pid, Signal::HUP),
            _ = &mut lost => {
                // Signalled before anything is written: with `stty tostop`, a write from a
                // background lockkit (the command has the terminal) would stop lockkit first.
                send(pid, Signal::TERM);
                complain(format!(
                    "lost lock {:?} (token {}) while the command ran; sent it SIGTERM",
                    args.name,
                    guard.token()
                ));
                if tokio::time::timeout(args.kill_after, child.wait()).await.is_err() {
                    // The supervisor SIGKILLs the whole group; SIGKILL to the supervisor
                    // itself would take only the command's main process along.
                    send(pid, crate::child::KILL_NOW);
                    complain(format!(
                        "the command did not exit within {}; sent its process group SIGKILL",
                        humantime::format_duration(args.kill_after)
                    ));
                    if tokio::time::timeout(KILL_GRACE, child.wait()).await.is_err() {
                        send(pid, Signal::KILL);
                        let _ = child.wait().await;
                    }
                }
                let _ = guard.release().await;
                return code::LOST;
            }
        }
    };
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
            "lost lock {:?} before the command finished",
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
