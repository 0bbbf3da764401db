//! How `lockkit exec` starts its command so that nothing it started outlives the lock.
//!
//! On Linux the command runs under a small synchronous supervisor, this same binary started as
//! `lockkit __exec-child <pid> -- CMD...` (see [`supervisor`]):
//!
//! - The supervisor asks the kernel for a signal when lockkit dies (`PR_SET_PDEATHSIG`), checks
//!   that its parent is still lockkit (if lockkit died before the call, the supervisor has
//!   another parent by then, and stops with exit code 70 without running anything), and starts
//!   the command in a new process group of its own.
//! - The command itself is started through one more re-exec, `lockkit __exec-command <pid> --
//!   CMD...`, already in the new group, which ties itself to the supervisor with
//!   `PR_SET_PDEATHSIG` = SIGKILL (kept across `execve`), checks the supervisor is still its
//!   parent, and becomes the command (`exec`: same pid, which names the group).
//! - When lockkit dies, SIGKILL included, or asks for it ([`KILL_NOW`], after a lost lock's
//!   `--kill-after`), the supervisor SIGKILLs the command's whole process group. When the
//!   command's main process exits, whatever it left in its group is SIGKILLed too (like
//!   systemd's `KillMode=control-group`) before the supervisor exits with the command's status
//!   (`128+N` when a signal `N` killed it). SIGINT, SIGTERM and SIGHUP that lockkit forwards go
//!   to the whole group.
//!
//! What escapes: a process that leaves the group itself (`setsid`, `setpgid`: daemons, `sudo`
//! with a pty, `setsid(1)`); a process the supervisor may not signal (one running as another
//! user, e.g. under `sudo`: `PR_SET_PDEATHSIG` is also cleared when a setuid or file-capability
//! binary is executed); and, if the supervisor itself is SIGKILLed directly (not lockkit), the
//! command's children: the command dies with the supervisor, its children do not.
//!
//! Elsewhere (not Linux) the command is started directly, as a plain child in lockkit's process
//! group: signals and a lost lock's SIGTERM/SIGKILL reach only that process, and a SIGKILLed
//! lockkit leaves it running: run lockkit under a supervisor that kills the process group.

use std::ffi::OsString;

mod args;
#[cfg(target_os = "linux")]
mod supervisor;

use crate::exit::{exec_error_code, fail};
pub(crate) use args::{ARG, COMMAND_ARG};

/// What lockkit sends the supervisor to have the command's whole group SIGKILLed at once (the
/// same signal the supervisor gets when lockkit dies). Without a supervisor: SIGKILL itself.
#[cfg(target_os = "linux")]
pub(crate) const KILL_NOW: rustix::process::Signal = rustix::process::Signal::USR1;
/// What lockkit sends the supervisor to have the command's whole group SIGKILLed at once (the
/// same signal the supervisor gets when lockkit dies). Without a supervisor: SIGKILL itself.
#[cfg(not(target_os = "linux"))]
pub(crate) const KILL_NOW: rustix::process::Signal = rustix::process::Signal::KILL;

/// The command that runs `cmd` for a lockkit process whose lock protects it.
pub(crate) fn command(cmd: &[String]) -> std::io::Result<tokio::process::Command> {
    if cfg!(target_os = "linux") {
        let mut c = tokio::process::Command::new(std::env::current_exe()?);
        c.arg(ARG)
            .arg(std::process::id().to_string())
            .arg("--")
            .args(cmd);
        Ok(c)
    } else {
        let mut c = tokio::process::Command::new(&cmd[0]);
        c.args(&cmd[1..]);
        Ok(c)
    }
}

/// The supervisor: `args` are what follows [`ARG`]. Never returns.
pub(crate) fn run(args: &[OsString]) -> ! {
    // Blocked before anything else, so that none of them can end the supervisor before it
    // looks at them; the command starts with an empty mask (std keeps the mask in a child, so
    // `__exec-command` clears it before it becomes the command).
    #[cfg(target_os = "linux")]
    supervisor::block_signals();
    let (parent, _, cmd) = parse(args, false);
    #[cfg(target_os = "linux")]
    supervisor::run(parent, cmd);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = parent;
        exec(cmd)
    }
}

/// The command's last step: `args` are what follows [`COMMAND_ARG`]. Never returns.
pub(crate) fn run_command(args: &[OsString]) -> ! {
    let (parent, terminal, cmd) = parse(args, true);
    #[cfg(target_os = "linux")]
    supervisor::prepare_command(parent, terminal);
    #[cfg(not(target_os = "linux"))]
    let _ = (parent, terminal);
    exec(cmd)
}

/// `PID [--terminal] -- CMD...` (`--terminal` only where `terminal_flag`).
fn parse(args: &[OsString], terminal_flag: bool) -> (i32, bool, &[OsString]) {
    let usage = || -> ! {
        fail(
            crate::exit::code::USAGE,
            if terminal_flag {
                "usage: lockkit __exec-command PID [--terminal] -- CMD..."
            } else {
                "usage: lockkit __exec-child PID -- CMD..."
            },
        )
    };
    let (parent, rest) = match args {
        [parent, rest @ ..] => (parent, rest),
        [] => usage(),
    };
    let (terminal, rest) = match rest {
        [flag, rest @ ..] if terminal_flag && flag == "--terminal" => (true, rest),
        _ => (false, rest),
    };
    let cmd = match rest {
        [dashes, cmd @ ..] if dashes == "--" && !cmd.is_empty() => cmd,
        _ => usage(),
    };
    let parent: i32 = parent
        .to_str()
        .and_then(|p| p.parse().ok())
        .filter(|p| *p > 0)
        .unwrap_or_else(|| fail(crate::exit::code::USAGE, "bad parent pid"));
    (parent, terminal, cmd)
}

/// Becomes `cmd` (std's `exec` resets SIGPIPE, which std ignores, first), or exits 127/126.
fn exec(cmd: &[OsString]) -> ! {
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(&cmd[0]).args(&cmd[1..]).exec();
    fail(
        exec_error_code(&err),
        format!("cannot run {:?}: {err}", cmd[0]),
    )
}
