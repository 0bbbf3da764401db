//! `lockkit top` against real servers and `file://`: the plain table (`--once`), the JSON, and
//! the live view in a real terminal (tmux: start it, send keys, read the screen).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// A private tmux server (its own socket), killed on drop.
struct Tmux(String);

impl Tmux {
    fn new() -> Self {
        Tmux(format!("lockkit-top-{:x}", rand_u64()))
    }

    fn cmd(&self, args: &[&str]) -> std::process::Output {
        // No user config: its options (remain-on-exit, sizes) must not change what we read.
        Command::new("tmux")
            .arg("-L")
            .arg(&self.0)
            .args(["-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux runs")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Waits until the screen satisfies `ok`, and returns it.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < end, "the screen never showed {what}:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// Holds `<base>job` (with a second client waiting for it), a read lock on `<base>cfg` and a
/// permit of `<base>pool`, then checks what `top <base>` shows.
fn top_on(url: &str, queue_visible: bool) {
    let base = format!("{}/", name("top"));
    let (job, cfg, lead, pool) = (
        format!("{base}job"),
        format!("{base}cfg"),
        format!("{base}lead"),
        format!("{base}pool"),
    );
    let dir = TempDir::new("top");
    let (ready, got) = (dir.path("ready"), dir.path("got"));
    // Longer than every wait below; the holders are killed on drop anyway.
    let cmd = trapping_cmd(&ready, &got, 300);
    let with = |extra: &[&str], n: &str| {
        let mut args = vec!["exec"];
        args.extend_from_slice(extra);
        args.push(n);
        args.push("--");
        args.extend(cmd.iter().map(String::as_str));
        lockkit(url, &args)
    };
    let _holder = Bg::spawn(with(&[], &job));
    let token = wait_file(&ready, LIMIT);
    std::fs::remove_file(&ready).unwrap();
    let _reader = Bg::spawn(with(&["--shared"], &cfg));
    wait_file(&ready, LIMIT);
    std::fs::remove_file(&ready).unwrap();
    let _permit = Bg::spawn(with(&["--semaphore", "3"], &pool));
    wait_file(&ready, LIMIT);
    std::fs::remove_file(&ready).unwrap();
    let mut elect = vec!["elect", lead.as_str(), "--value", "top-leader", "--"];
    elect.extend(cmd.iter().map(String::as_str));
    let _leader = Bg::spawn(lockkit(url, &elect));
    wait_file(&ready, LIMIT);
    let _waiter = Bg::spawn(lockkit(url, &["exec", &job, "--", "true"]));

    // --json: both locks, the holder's token, the waiter where the backend shows its queue.
    let end = Instant::now() + Duration::from_secs(20);
    let v = loop {
        let o = run(lockkit(url, &["top", &base, "--json"]), LIMIT);
        let (out, err) = text(&o);
        assert_eq!(code(&o), 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        if !queue_visible || v[1]["waiters"].as_array().is_some_and(|w| w.len() == 1) {
            break v;
        }
        assert!(Instant::now() < end, "the waiter never showed: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(v.as_array().unwrap().len(), 4, "{v}");
    assert_eq!(
        (v[2]["name"].as_str(), v[2]["primitive"].as_str()),
        (Some(lead.as_str()), Some("election")),
        "{v}"
    );
    assert_eq!(v[2]["holders"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(
        (v[3]["name"].as_str(), v[3]["primitive"].as_str()),
        (Some(pool.as_str()), Some("semaphore")),
        "{v}"
    );
    assert_eq!(
        (&v[3]["holders"][0]["mode"], &v[3]["holders"][0]["permits"]),
        (&serde_json::json!("permits"), &serde_json::json!(1)),
        "{v}"
    );
    assert_eq!(
        (v[0]["name"].as_str(), v[0]["primitive"].as_str()),
        (Some(cfg.as_str()), Some("rwlock")),
        "{v}"
    );
    assert_eq!(v[0]["holders"][0]["mode"], "shared", "{v}");
    assert_eq!(
        (v[1]["name"].as_str(), v[1]["primitive"].as_str()),
        (Some(job.as_str()), Some("mutex")),
        "{v}"
    );
    assert_eq!(
        v[1]["holders"][0]["token"].as_u64().map(|t| t.to_string()),
        Some(token.clone()),
        "{v}"
    );

    // --once: one plain table.
    let o = run(lockkit(url, &["top", &base, "--once"]), LIMIT);
    let (out, err) = text(&o);
    assert_eq!(code(&o), 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("KIND") && lines[0].contains("LEASE LEFT"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("rwlock") && lines[1].contains(&cfg) && lines[1].contains("shared"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("mutex") && lines[2].contains(&job) && lines[2].contains(&token),
        "{out}"
    );
    assert!(
        lines[3].starts_with("election") && lines[3].contains(&lead),
        "{out}"
    );
    assert!(
        lines[4].starts_with("semaphore")
            && lines[4].contains(&pool)
            && lines[4].contains("permits:1"),
        "{out}"
    );

    // The live view.
    let tmux = Tmux::new();
    let started = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "250",
        "-y",
        "40",
        "--",
        LOCKKIT,
        "--url",
        url,
        "top",
        &base,
        "--interval",
        "200ms",
    ]);
    assert!(started.status.success(), "{started:?}");
    let s = tmux.wait_for("every lock", |s| {
        s.contains(&job)
            && s.contains(&cfg)
            && s.contains(&lead)
            && s.contains(&pool)
            && s.contains("4 locks")
    });
    assert!(s.contains(&token), "{s}");
    assert!(s.contains("waiters (in queue order)"), "{s}");
    for column in [
        "TOKEN",
        "LEASE LEFT",
        "HELD FOR",
        "WAITERS",
        "ACQ/S",
        "LOST/S",
    ] {
        assert!(s.contains(column), "no {column} column:\n{s}");
    }
    let at = |s: &str, n: &str| s.find(n).unwrap_or(usize::MAX);
    assert!(at(&s, &cfg) < at(&s, &job), "sorted by name:\n{s}");
    // Seen at two refreshes, a holder has been holding for at least their distance.
    tmux.wait_for("a hold time", |s| s.contains('≥'));
    // The details follow the selection: first the first row (cfg), then the next (job).
    let s = tmux.wait_for("cfg's details", |s| s.contains(&format!(" rwlock {cfg} ")));
    assert!(!s.contains(&format!(" mutex {job} ")), "{s}");
    tmux.keys(&["Down"]);
    tmux.wait_for("job's details", |s| s.contains(&format!(" mutex {job} ")));
    tmux.keys(&["s"]);
    let s = tmux.wait_for("the waiters sort", |s| s.contains("sort: waiters"));
    if queue_visible {
        // The lock with a waiter comes first now.
        assert!(at(&s, &job) < at(&s, &cfg), "sorted by waiters:\n{s}");
    }
    tmux.keys(&["/", "c", "f", "g", "Enter"]);
    let s = tmux.wait_for("the filter", |s| {
        s.contains("filter: cfg") && s.contains("1 locks")
    });
    assert!(!s.contains(&job), "the filter left {job} on screen:\n{s}");
    tmux.keys(&["p"]);
    tmux.wait_for("the pause", |s| s.contains("PAUSED"));
    tmux.keys(&["q"]);
    let end = Instant::now() + Duration::from_secs(10);
    while tmux.cmd(&["has-session", "-t", "top"]).status.success() {
        assert!(
            Instant::now() < end,
            "q did not end top:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tmux_available() -> bool {
    lockkit_testing::tool_available("tmux", "-V", "top")
}

#[test]
fn file_top() {
    if !tmux_available() {
        eprintln!("skipping: no tmux (scripts/services.sh install)");
        return;
    }
    let d = TempDir::new("top-file");
    top_on(&d.url(), false);
}

fn server_top(backend: &str) {
    let Some(url) = lockkit_testing::server_url(backend) else {
        return;
    };
    if !tmux_available() {
        eprintln!("skipping: no tmux (scripts/services.sh install)");
        return;
    }
    top_on(&url, true);
}

#[test]
fn redis_top() {
    server_top("redis");
}

#[test]
fn zk_top() {
    server_top("zk");
}

#[test]
fn etcd_top() {
    server_top("etcd");
}

#[test]
fn mem_top_sees_no_other_process() {
    let o = run(lockkit("mem://", &["top", "--once"]), LIMIT);
    let (out, err) = text(&o);
    assert_eq!(code(&o), 0, "{err}");
    assert!(out.contains("(no held or waited-for locks)"), "{out}");
}
