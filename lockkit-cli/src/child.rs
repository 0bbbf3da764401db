//! How `lockkit exec` starts its command so that the command never outlives lockkit.
//!
//! On Linux the command is started through this same binary, as `lockkit __exec-child <pid> --
//! CMD...`: the helper asks the kernel to SIGKILL it when its parent dies (`PR_SET_PDEATHSIG`,
//! which `execve` keeps), checks that its parent is still lockkit (if lockkit died before the
//! call, the helper has another parent by then, and stops), and then becomes the command
//! (`exec`: same process, same pid, so signals forwarded to it reach the command). However
//! lockkit dies, SIGKILL included, its command dies with it. Elsewhere the command is started
//! directly, and a SIGKILLed lockkit leaves it running: run it under a supervisor that kills
//! the process group.

use std::ffi::OsString;

/// The hidden first argument that makes this binary the helper.
pub(crate) const ARG: &str = "__exec-child";

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

/// The helper: `args` are what follows [`ARG`]. Never returns.
pub(crate) fn run(args: &[OsString]) -> ! {
    let (parent, cmd) = match args {
        [parent, dashes, cmd @ ..] if dashes == "--" && !cmd.is_empty() => (parent, cmd),
        _ => fail(
            crate::code::USAGE,
            "usage: lockkit __exec-child PID -- CMD...",
        ),
    };
    let parent: i32 = parent
        .to_str()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| fail(crate::code::USAGE, "__exec-child: bad parent pid"));
    die_with_parent(parent);
    let err = exec(cmd);
    let code = match err.kind() {
        std::io::ErrorKind::NotFound => crate::code::NOT_FOUND,
        _ => crate::code::CANNOT_EXEC,
    };
    fail(code, format!("cannot run {:?}: {err}", cmd[0]))
}

#[cfg(target_os = "linux")]
fn die_with_parent(parent: i32) {
    use rustix::process::{getppid, set_parent_process_death_signal, Pid, Signal};
    if let Err(e) = set_parent_process_death_signal(Some(Signal::KILL)) {
        fail(
            crate::code::CANNOT_EXEC,
            format!("cannot tie the command to lockkit: {e}"),
        );
    }
    // Checked after the call: a parent that died before it left us to another.
    if getppid() != Pid::from_raw(parent) {
        fail(
            crate::code::LOST,
            "lockkit exited before its command started",
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_parent: i32) {}

fn exec(cmd: &[OsString]) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(&cmd[0]).args(&cmd[1..]).exec()
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ! {
    crate::complain(msg);
    std::process::exit(i32::from(code))
}
