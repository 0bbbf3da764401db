//! `lockkit exec` (and `elect`) on `mem://` and `file://` (the server backends are in
//! `servers.rs`).

mod common;

use std::time::Duration;

use common::suite;
use common::*;

#[test]
fn mem_exit_status_env_and_crash() {
    suite::exit_status_and_env("mem://");
    let o = run(
        lockkit("mem://", &["exec", "x", "--", "sh", "-c", "kill -KILL $$"]),
        LIMIT,
    );
    assert_eq!(code(&o), 137);
}

#[test]
fn file_exit_status_and_env() {
    let d = TempDir::new("env");
    suite::exit_status_and_env(&d.url());
}

/// `lockkit elect` and `lockkit leader [--watch] [--json]` on `file://`, whose leader is another
/// process (mem:// elections live in one process).
#[test]
fn file_elect_and_leader() {
    let d = TempDir::new("elect");
    suite::elect_and_leader(&d.url());
}

#[test]
fn file_lost_leadership_terminates_command() {
    let d = TempDir::new("demoted");
    suite::lost_leadership_terminates_command(&d.url());
}

#[test]
fn file_crash_release_busy_code_and_sigterm_forwarding() {
    let d = TempDir::new("crash");
    suite::crash_releases_and_busy_code(&d.url());
}

#[test]
fn file_sigint_forwarding() {
    let d = TempDir::new("sigint");
    suite::sigint_is_forwarded(&d.url());
}

#[test]
fn file_lost_lock_terminates_command() {
    let d = TempDir::new("lost");
    suite::lost_lock_terminates_command(&d.url(), "30s");
}

#[test]
fn file_killed_lockkit_takes_its_command_along() {
    let d = TempDir::new("pdeathsig");
    suite::killed_lockkit_takes_its_command_along(&d.url(), Duration::from_secs(2));
}

#[test]
fn file_leftovers_die_with_the_command() {
    let d = TempDir::new("leftovers");
    suite::leftovers_die_with_the_command(&d.url());
}

#[test]
fn file_sigterm_reaches_the_group() {
    let d = TempDir::new("termgroup");
    suite::sigterm_reaches_the_group(&d.url());
}

#[test]
fn file_lost_lock_kills_the_group() {
    let d = TempDir::new("lostgroup");
    suite::lost_lock_kills_the_group(&d.url());
}

/// The supervisor runs nothing unless its parent is the lockkit whose pid it was given (it
/// stops with 70 when that lockkit died before it started); nor does the command's last step.
#[cfg(target_os = "linux")]
#[test]
fn exec_helpers_refuse_a_parent_that_is_not_theirs() {
    let d = TempDir::new("refuse");
    let marker = d.path("ran");
    let script = format!("echo ran > {}", marker.display());
    for helper in ["__exec-child", "__exec-command"] {
        let mut c = std::process::Command::new(LOCKKIT);
        c.args([helper, "1", "--", "sh", "-c", &script]);
        let o = run(c, LIMIT);
        assert_eq!(code(&o), 70, "{helper}: {:?}", text(&o));
        assert!(!marker.exists(), "{helper} ran the command");
    }
    // Given the right pid (this test is their parent), both run it.
    for helper in ["__exec-child", "__exec-command"] {
        let _ = std::fs::remove_file(&marker);
        let mut c = std::process::Command::new(LOCKKIT);
        let me = std::process::id().to_string();
        c.args([helper, me.as_str(), "--", "sh", "-c", &script]);
        let o = run(c, LIMIT);
        assert_eq!(code(&o), 0, "{helper}: {:?}", text(&o));
        assert!(marker.exists(), "{helper} did not run the command");
    }
}

/// The command starts with no signal blocked and SIGPIPE not ignored, whatever the supervisor
/// blocks for itself.
#[cfg(target_os = "linux")]
#[test]
fn the_command_starts_with_clean_signals() {
    let o = run(
        lockkit("mem://", &["exec", "x", "--", "cat", "/proc/self/status"]),
        LIMIT,
    );
    let (out, err) = text(&o);
    assert_eq!(code(&o), 0, "{err}");
    let mask = |field: &str| -> u64 {
        out.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no {field} in {out}"))
    };
    assert_eq!(
        mask("SigBlk:"),
        0,
        "the command starts with signals blocked"
    );
    assert_eq!(mask("SigIgn:") & (1 << (13 - 1)), 0, "SIGPIPE is ignored");
}

#[test]
fn file_fixed_lease_command_is_dead_before_the_next_holder() {
    let d = TempDir::new("nextholder");
    suite::fixed_lease_command_is_dead_before_the_next_holder(&d.url());
}

#[test]
fn file_fixed_lease_sigterm_leaves_kill_after_before_the_next_holder() {
    let d = TempDir::new("termearly");
    suite::fixed_lease_sigterm_leaves_kill_after_before_the_next_holder(&d.url());
}

/// `--kill-after` must fit before the lease's deadline: at most a third of the lease (fixed,
/// watchdog, or the handle's default of 30 s); said before the lock is taken, exit 64.
#[test]
fn kill_after_must_fit_the_lease() {
    let d = TempDir::new("fit");
    let url = d.url();
    let n = name("fit");
    for extra in [
        &["--fixed-lease", "2s", "--kill-after", "1s"][..],
        &["--lease", "3s", "--kill-after", "1001ms"],
        &["--kill-after", "11s"],
    ] {
        let mut args = vec!["exec", n.as_str()];
        args.extend_from_slice(extra);
        args.extend(["--", "true"]);
        let o = run(lockkit(&url, &args), LIMIT);
        let (_, err) = text(&o);
        assert_eq!(code(&o), 64, "{extra:?}: {err}");
        assert!(
            err.contains("at most a third of the lease"),
            "{extra:?}: {err}"
        );
    }
    for extra in [
        &["--fixed-lease", "3s", "--kill-after", "1s"][..],
        &["--lease", "60s", "--kill-after", "20s"],
        &["--kill-after", "10s"],
        &["--fixed-lease", "1s"],
    ] {
        let mut args = vec!["exec", n.as_str()];
        args.extend_from_slice(extra);
        args.extend(["--", "true"]);
        let o = run(lockkit(&url, &args), LIMIT);
        assert_eq!(code(&o), 0, "{extra:?}: {:?}", text(&o));
    }
}

#[test]
fn file_fixed_lease_runs_out() {
    let d = TempDir::new("fixed");
    suite::fixed_lease_runs_out(&d.url());
}

#[test]
fn shared_and_semaphore_modes() {
    let d = TempDir::new("modes");
    let url = d.url();
    let n = name("modes");
    let dir = TempDir::new("modes-marks");
    // Two shared holders at once, while a writer is shut out.
    let (r1, g1) = (dir.path("r1"), dir.path("g1"));
    let c1 = trapping_cmd(&r1, &g1, 60);
    let mut args = vec!["exec", &n, "--shared", "--"];
    args.extend(c1.iter().map(String::as_str));
    let _reader = Bg::spawn(lockkit(&url, &args));
    wait_file(&r1, LIMIT);
    let o = run(
        lockkit(
            &url,
            &["exec", &n, "--shared", "--wait", "5s", "--", "true"],
        ),
        LIMIT,
    );
    assert_eq!(code(&o), 0, "a second reader was shut out: {:?}", text(&o));
    let o = run(
        lockkit(&url, &["exec", &n, "--write", "--wait", "0", "--", "true"]),
        LIMIT,
    );
    assert_eq!(code(&o), 75, "a writer got in under a reader");
    // Semaphore of 2: two holders, the third is busy.
    let s = name("sem");
    let (r2, g2, r3, g3) = (
        dir.path("r2"),
        dir.path("g2"),
        dir.path("r3"),
        dir.path("g3"),
    );
    let c2 = trapping_cmd(&r2, &g2, 60);
    let c3 = trapping_cmd(&r3, &g3, 60);
    let mut a2 = vec!["exec", &s, "--semaphore", "2", "--"];
    a2.extend(c2.iter().map(String::as_str));
    let mut a3 = vec!["exec", &s, "--semaphore", "2", "--"];
    a3.extend(c3.iter().map(String::as_str));
    let _h2 = Bg::spawn(lockkit(&url, &a2));
    let _h3 = Bg::spawn(lockkit(&url, &a3));
    wait_file(&r2, LIMIT);
    wait_file(&r3, LIMIT);
    let o = run(
        lockkit(
            &url,
            &["exec", &s, "--semaphore", "2", "--wait", "0", "--", "true"],
        ),
        LIMIT,
    );
    assert_eq!(code(&o), 75, "a third permit out of two");
}

/// A message to a stderr nobody reads any more (a closed pipe) is dropped, not a panic: the
/// exit code stays the one the message is about (here 64, a usage error). On the lost-lock
/// path a panic there skipped the awaited release and the command's grace.
#[test]
fn a_closed_stderr_does_not_change_the_exit_code() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut c = lockkit("mem://", &["exec", "x", "--semaphore", "0", "--", "true"]);
    c.stdout(std::process::Stdio::null()).stderr(writer);
    let status = c.status().unwrap();
    assert_eq!(status.code(), Some(64));
}

/// A stdout nobody reads any more (`lockkit leader NAME --watch | head -1`, `lockkit inspect X
/// | true`) ends the command quietly with its own exit code: `println!` panicked (exit 101).
#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    let d = TempDir::new("closed-stdout");
    for args in [
        &["leader", "e", "--watch"][..],
        &["inspect", "x"],
        &["leader", "e"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut c = lockkit(&d.url(), args);
        let mut child = c
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("{args:?} went on with its stdout closed");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A stdout that fails otherwise (a full disk) is an error: the output is incomplete.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut c = lockkit(&d.url(), &["inspect", "x"]);
    let o = c
        .stdout(full)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write to stdout"), "{err}");
}

#[test]
fn usage_errors_and_missing_command() {
    let o = run(
        lockkit(
            "mem://",
            &["exec", "x", "--", "/nonexistent/lockkit-test-cmd"],
        ),
        LIMIT,
    );
    assert_eq!(code(&o), 127);
    let mut c = std::process::Command::new(LOCKKIT);
    c.args(["exec", "x", "--", "true"])
        .env_remove("LOCKKIT_URL")
        .stdin(std::process::Stdio::null());
    let o = run(c, LIMIT);
    assert_eq!(code(&o), 1);
    assert!(text(&o).1.contains("no backend"), "{:?}", text(&o));
    let mut c = std::process::Command::new(LOCKKIT);
    c.args(["exec", "x", "--", "true"])
        .env("LOCKKIT_URL", "mem://");
    assert_eq!(code(&run(c, LIMIT)), 0, "LOCKKIT_URL is honoured");
    let d = TempDir::new("cfg");
    std::fs::write(d.path("c.toml"), format!("url = \"{}\"\n", d.url())).unwrap();
    let mut c = std::process::Command::new(LOCKKIT);
    c.arg("--config")
        .arg(d.path("c.toml"))
        .args(["exec", "x", "--", "true"]);
    assert_eq!(code(&run(c, LIMIT)), 0, "--config is honoured");
    let _ = Duration::ZERO;
}

#[test]
fn file_lost_lock_kills_a_command_that_ignores_sigterm() {
    let d = TempDir::new("kill");
    let url = d.url();
    let n = name("kill");
    let ready = d.path("ready");
    // An ignored signal stays ignored across exec, so `sleep` ignores SIGTERM here.
    let script = format!(
        "trap '' TERM; echo $LOCKKIT_FENCING_TOKEN > {}; exec sleep 60",
        ready.display()
    );
    let mut holder = Bg::spawn(lockkit(
        &url,
        &["exec", &n, "--kill-after", "1s", "--", "sh", "-c", &script],
    ));
    wait_file(&ready, LIMIT);
    let started = std::time::Instant::now();
    let o = run(lockkit(&url, &["force-unlock", &n, "--yes"]), LIMIT);
    assert_eq!(code(&o), 0);
    assert_eq!(holder.wait(Duration::from_secs(30)).code(), Some(70));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "SIGKILL came before --kill-after"
    );
    let err = holder.stderr();
    assert!(err.contains("SIGKILL"), "{err}");
}

/// `lockkit exec` in the foreground of a terminal (a pty, under `setsid --ctty`): the command's
/// group gets the terminal, so the command reads it (instead of stopping on SIGTTIN) and Ctrl-C
/// reaches it.
#[cfg(target_os = "linux")]
#[test]
fn on_a_terminal_the_command_gets_the_foreground() {
    use std::io::{Read, Write};
    let session = |script: &str, input: &[u8]| -> (Option<i32>, String) {
        let pty = nix::pty::openpty(None, None).unwrap();
        let slave = std::fs::File::from(pty.slave);
        let mut c = std::process::Command::new("setsid");
        c.args([
            "--ctty", "--wait", LOCKKIT, "--url", "mem://", "exec", "x", "--",
        ])
        .args(["sh", "-c", script])
        .env_remove("LOCKKIT_URL")
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave);
        let child = c.spawn().unwrap();
        drop(c);
        let mut master = std::fs::File::from(pty.master);
        let mut reader = master.try_clone().unwrap();
        let output = std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut buf = [0u8; 256];
            // EIO once every process holding the terminal has exited.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
            }
            String::from_utf8_lossy(&out).into_owned()
        });
        std::thread::sleep(Duration::from_millis(500));
        master.write_all(input).unwrap();
        let status = Bg(child).wait(Duration::from_secs(20));
        drop(master);
        (status.code(), output.join().unwrap())
    };
    let (code, out) = session("read line; echo got:$line; exit 4", b"hello\n");
    assert_eq!(code, Some(4), "{out}");
    assert!(out.contains("got:hello"), "{out}");
    let (code, out) = session("sleep 30 & wait", b"\x03");
    assert_eq!(
        code,
        Some(128 + 2),
        "Ctrl-C did not reach the command: {out}"
    );
}
