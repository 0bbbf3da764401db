//! How `lockkit` ends: its exit codes, and errors reported the same way everywhere.

/// Exit codes of `lockkit` itself (a command run by `exec` passes its own status through).
pub(crate) mod code {
    /// Generic failure: bad configuration, connection or backend error, refused confirmation.
    pub const FAILURE: u8 = 1;
    /// Bad usage (clap's own errors exit with 2).
    pub const USAGE: u8 = 64;
    /// The backend does not support the operation (EX_UNAVAILABLE).
    pub const UNSUPPORTED: u8 = 69;
    /// The lock was lost, or at risk near its lease's deadline, while the command ran; the
    /// command was terminated (EX_SOFTWARE).
    pub const LOST: u8 = 70;
    /// The lock stayed busy for the whole `--wait` (EX_TEMPFAIL).
    pub const BUSY: u8 = 75;
    /// The command could not be executed (permission, not a program).
    pub const CANNOT_EXEC: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
}

/// Prints an error the same way everywhere. A stderr nobody reads any more (a closed pipe)
/// drops the message: `eprintln!` would panic, and on the lost-lock path skip the release and
/// the command's grace.
pub(crate) fn complain(msg: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "lockkit: {msg}");
}

/// Prints a line on stdout, as `println!` does, but answers `false` once nobody reads it (a
/// closed pipe: `lockkit leader NAME --watch | head -1`) where `println!` would panic. Any
/// other failure (a full disk behind a redirect) is said on stderr and ends the process with
/// [`code::FAILURE`]: the output is incomplete.
pub(crate) fn say_line(line: std::fmt::Arguments<'_>) -> bool {
    use std::io::Write;
    match writeln!(std::io::stdout().lock(), "{line}") {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => false,
        Err(e) => {
            complain(format_args!("cannot write to stdout: {e}"));
            std::process::exit(i32::from(code::FAILURE));
        }
    }
}

/// `println!` through [`say_line`]: `false` once stdout is closed.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::exit::say_line(format_args!($($arg)*))
    };
}
pub(crate) use say;

/// The exit code for a lockkit error.
pub(crate) fn error_code(e: &lockkit::Error) -> u8 {
    match e.kind() {
        lockkit::ErrorKind::Unsupported | lockkit::ErrorKind::BackendDisabled { .. } => {
            code::UNSUPPORTED
        }
        lockkit::ErrorKind::InvalidName | lockkit::ErrorKind::InvalidArgument => code::USAGE,
        _ => code::FAILURE,
    }
}

/// The shell's exit code for a command that could not be started.
pub(crate) fn exec_error_code(err: &std::io::Error) -> u8 {
    match err.kind() {
        std::io::ErrorKind::NotFound => code::NOT_FOUND,
        _ => code::CANNOT_EXEC,
    }
}

/// Reports `msg` and exits with `code`.
pub(crate) fn fail(code: u8, msg: impl std::fmt::Display) -> ! {
    complain(msg);
    std::process::exit(i32::from(code))
}
