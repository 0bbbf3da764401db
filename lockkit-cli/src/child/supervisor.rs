//! The resident supervisor of `lockkit exec`'s command on Linux: one thread, no async runtime,
//! every signal it handles blocked and read from a signalfd.
//!
//! - SIGCHLD: when the command's main process has exited, the rest of its process group is
//!   SIGKILLed, the main process reaped, and the supervisor exits with its status.
//! - SIGINT, SIGTERM, SIGHUP sent by lockkit (the sender's pid is checked): sent on to the
//!   command's whole group. The same signals from anyone else are dropped: the terminal's and
//!   a group-wide `kill` also reach lockkit, which forwards them, and would arrive twice.
//! - [`KILL_NOW`], from lockkit or from the kernel when lockkit dies: the whole group is
//!   SIGKILLed.
//!
//! Terminal: the command's group is not lockkit's, so a command reading the terminal from there
//! would be stopped by SIGTTIN. When stdin is a terminal whose foreground group is the
//! supervisor's, the command's group is made the foreground group (by the command's last step,
//! before `exec`, so the command never runs in the background) and the supervisor's group gets
//! it back when the command ends. Ctrl-C then reaches the command's group directly, and only
//! once. Job control is not supported: Ctrl-Z stops the command, not lockkit.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::process::CommandExt;

use nix::errno::Errno;
use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::{killpg, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::{getpgrp, getpid, getppid, tcgetpgrp, tcsetpgrp, Pid};

use super::args::COMMAND_ARG;
use crate::exit::code;
use crate::exit::{exec_error_code, fail};

/// lockkit's death (`PR_SET_PDEATHSIG`) and its explicit "kill the group now".
pub(super) const KILL_NOW: Signal = Signal::SIGUSR1;

/// Sent on to the command's group when lockkit sends them.
const FORWARDED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// The signals the supervisor reads from its signalfd.
fn handled() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGCHLD, KILL_NOW].into_iter().chain(FORWARDED) {
        set.add(sig);
    }
    set
}

/// Blocks the handled signals, and SIGTTOU, so that handing the terminal back from the
/// background does not stop the supervisor. The very first thing the supervisor does.
pub(super) fn block_signals() {
    let mut set = handled();
    set.add(Signal::SIGTTOU);
    if let Err(e) = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None) {
        fail(code::CANNOT_EXEC, format!("cannot block signals: {e}"));
    }
}

/// Starts `cmd` in a process group of its own and supervises it (module docs). `parent` is
/// lockkit's pid. Never returns.
pub(super) fn run(parent: i32, cmd: &[OsString]) -> ! {
    if let Err(e) = set_pdeathsig(KILL_NOW) {
        fail(
            code::CANNOT_EXEC,
            format!("cannot tie the command to lockkit: {e}"),
        );
    }
    // Checked after the call: a parent that died before it left us to another.
    if getppid() != Pid::from_raw(parent) {
        fail(code::LOST, "lockkit exited before its command started");
    }
    let signals = SignalFd::with_flags(&handled(), SfdFlags::SFD_CLOEXEC)
        .unwrap_or_else(|e| fail(code::CANNOT_EXEC, format!("cannot watch signals: {e}")));
    let terminal = foreground_terminal();
    let exe = std::env::current_exe()
        .unwrap_or_else(|e| fail(code::CANNOT_EXEC, format!("cannot find lockkit: {e}")));
    let mut command = std::process::Command::new(exe);
    command.arg(COMMAND_ARG).arg(getpid().to_string());
    if terminal {
        command.arg("--terminal");
    }
    // std resets SIGPIPE (ignored by std itself) in the child, but the child inherits the
    // signal mask: the command's last step empties it.
    command.arg("--").args(cmd).process_group(0);
    let group = match command.spawn() {
        Ok(child) => Pid::from_raw(child.id() as i32),
        Err(e) => fail(exec_error_code(&e), format!("cannot run {:?}: {e}", cmd[0])),
    };

    let status = loop {
        let info = match signals.read_signal() {
            Ok(Some(info)) => info,
            Ok(None) | Err(Errno::EINTR) => continue,
            Err(e) => {
                let _ = killpg(group, Signal::SIGKILL);
                let _ = waitpid(group, None);
                fail(code::FAILURE, format!("cannot read signals: {e}"));
            }
        };
        match Signal::try_from(info.ssi_signo as i32) {
            Ok(Signal::SIGCHLD) => {
                if let Some(status) = exited(group) {
                    break status;
                }
            }
            Ok(sig) if sig == KILL_NOW => {
                let _ = killpg(group, Signal::SIGKILL);
            }
            Ok(sig) if FORWARDED.contains(&sig) && info.ssi_pid == parent as u32 => {
                // The group may be empty by now; its end comes as SIGCHLD.
                let _ = killpg(group, sig);
            }
            _ => {}
        }
    };
    // The main process is a zombie not reaped yet (WNOWAIT), so the group's id, its pid, cannot
    // name another group: whatever the command left behind in it goes now.
    let _ = killpg(group, Signal::SIGKILL);
    let _ = waitpid(group, None);
    // Taken back only from the command's group (SIGTTOU is blocked, so this works from the
    // background): a terminal someone else has since taken stays theirs.
    if terminal && tcgetpgrp(std::io::stdin()) == Ok(group) {
        let _ = tcsetpgrp(std::io::stdin(), getpgrp());
    }
    std::process::exit(i32::from(status))
}

/// The command's exit code as a shell gives it, once its main process has exited (left
/// unreaped).
fn exited(pid: Pid) -> Option<u8> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(pid), flags) {
        Ok(WaitStatus::Exited(_, c)) => Some((c & 0xff) as u8),
        Ok(WaitStatus::Signaled(_, sig, _)) => Some((128 + sig as i32).min(255) as u8),
        Ok(_) | Err(Errno::EINTR) => None,
        // Not our child any more: nothing is left to wait for.
        Err(_) => Some(code::FAILURE),
    }
}

/// Whether stdin is a terminal whose foreground group is ours (so the command should get it).
fn foreground_terminal() -> bool {
    let stdin = std::io::stdin();
    stdin.is_terminal() && tcgetpgrp(&stdin) == Ok(getpgrp())
}

/// The command's last step before `exec`, in the command's own group: dies with the
/// supervisor (pid `supervisor`) and, with `terminal`, takes the terminal's foreground.
pub(super) fn prepare_command(supervisor: i32, terminal: bool) {
    if let Err(e) = set_pdeathsig(Signal::SIGKILL) {
        fail(
            code::CANNOT_EXEC,
            format!("cannot tie the command to its supervisor: {e}"),
        );
    }
    if getppid() != Pid::from_raw(supervisor) {
        fail(code::LOST, "lockkit exited before its command started");
    }
    // Still the supervisor's mask, SIGTTOU included, so taking the terminal from the
    // background does not stop us.
    if terminal {
        let _ = tcsetpgrp(std::io::stdin(), getpgrp());
    }
    // The command starts with nothing blocked (std's exec leaves the mask as it is).
    if let Err(e) = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None) {
        fail(code::CANNOT_EXEC, format!("cannot unblock signals: {e}"));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lockkit_and_the_supervisor_agree_on_kill_now() {
        assert_eq!(super::KILL_NOW as i32, super::super::KILL_NOW.as_raw());
    }
}
