//! Helpers for the CLI tests: run `lockkit`, wait with deadlines, temp dirs.
#![allow(dead_code, missing_docs)]

pub mod suite;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub const LOCKKIT: &str = env!("CARGO_BIN_EXE_lockkit");

/// A fresh directory under the system temp dir, created at once and removed on drop (a
/// [`lockkit_testing::ScratchDir`]).
pub struct TempDir(lockkit_testing::ScratchDir);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let d = lockkit_testing::ScratchDir::new(&format!("cli-{tag}"));
        std::fs::create_dir_all(d.path()).unwrap();
        TempDir(d)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
    pub fn url(&self) -> String {
        format!("file://{}", self.path("locks").display())
    }
}

pub fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

/// A unique lock name for one test.
pub fn name(tag: &str) -> String {
    format!("cli-test-{:x}/{tag}", rand_u64())
}

/// `lockkit --url URL ARGS…`, with no stdin.
pub fn lockkit(url: &str, args: &[&str]) -> Command {
    let mut c = Command::new(LOCKKIT);
    c.arg("--url").arg(url).args(args).stdin(Stdio::null());
    c.env_remove("LOCKKIT_URL");
    c
}

/// Runs to completion (at most `limit`) and returns the output.
pub fn run(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("lockkit did not finish within {limit:?}");
        }
    }
}

/// A background `lockkit` process, killed on drop.
pub struct Bg(pub Child);

impl Bg {
    pub fn spawn(mut cmd: Command) -> Self {
        Bg(cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap())
    }
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    /// Waits at most `limit` for the exit status.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let end = Instant::now() + limit;
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < end,
                "lockkit did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    pub fn stderr(&mut self) -> String {
        use std::io::Read;
        let mut s = String::new();
        if let Some(mut e) = self.0.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `path` exists and returns its trimmed content.
pub fn wait_file(path: &Path, limit: Duration) -> String {
    let end = Instant::now() + limit;
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.ends_with('\n') {
                return s.trim().to_string();
            }
        }
        assert!(
            Instant::now() < end,
            "{} did not appear within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A shell command that records its token in `ready`, records a TERM/INT in `got`, exits 3
/// on it, and otherwise runs for `secs` seconds.
pub fn trapping_cmd(ready: &Path, got: &Path, secs: u32) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "trap 'echo term > {got}; exit 3' TERM INT; echo $LOCKKIT_FENCING_TOKEN > {ready}; \
             i=0; while [ $i -lt {n} ]; do sleep 0.05; i=$((i+1)); done",
            got = got.display(),
            ready = ready.display(),
            n = secs * 20
        ),
    ]
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

pub const LIMIT: Duration = Duration::from_secs(60);
