//! `lockkit inspect` and `lockkit force-unlock` on `mem://` and `file://`.

mod common;

use common::suite::inspect_held;
use common::*;

fn json(o: &std::process::Output) -> serde_json::Value {
    let (out, err) = text(o);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?} / {err}"))
}

#[test]
fn mem_inspect_shows_a_free_lock() {
    let o = run(lockkit("mem://", &["inspect", "orders/1"]), LIMIT);
    let (out, err) = text(&o);
    assert_eq!(code(&o), 0, "{err}");
    assert!(out.contains("mutex \"orders/1\" on mem: free"), "{out}");
    assert!(out.contains("waiters: none"), "{out}");
    let o = run(
        lockkit(
            "mem://",
            &["inspect", "orders/1", "--json", "--kind", "rwlock"],
        ),
        LIMIT,
    );
    let v = json(&o);
    assert_eq!(v["name"], "orders/1");
    assert_eq!(v["kind"], "rwlock");
    assert_eq!(v["backend"], "mem");
    assert_eq!(v["locked"], false);
    assert_eq!(v["holders"].as_array().unwrap().len(), 0);
}

#[test]
fn file_semaphore_size() {
    let d = TempDir::new("sem-size-file");
    common::suite::semaphore_size_from_the_shell(&d.url(), file_keeps_sizes());
}

/// Whether `file://` keeps a semaphore's size.
fn file_keeps_sizes() -> bool {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = TempDir::new("caps-file");
        lockkit::connect(&d.url())
            .await
            .unwrap()
            .capabilities()
            .semaphore_size
    })
}

#[test]
fn mem_semaphore_set_in_one_run() {
    let o = run(
        lockkit("mem://", &["semaphore", "pool", "--set", "4", "--json"]),
        LIMIT,
    );
    let v = json(&o);
    assert_eq!(v["previous"], serde_json::Value::Null, "{v}");
    assert_eq!(
        (v["size"].clone(), v["available"].clone()),
        (4.into(), 4.into()),
        "{v}"
    );
}

#[test]
fn file_inspect_held_mutex() {
    let d = TempDir::new("inspect-file");
    inspect_held(&d.url());
}

#[test]
fn file_inspect_readers_and_permits() {
    let d = TempDir::new("inspect-kinds");
    let url = d.url();
    let marks = TempDir::new("inspect-kinds-m");
    let (n, s) = (name("rw"), name("sem"));
    let (r1, g1, r2, g2) = (
        marks.path("r1"),
        marks.path("g1"),
        marks.path("r2"),
        marks.path("g2"),
    );
    let c1 = trapping_cmd(&r1, &g1, 60);
    let c2 = trapping_cmd(&r2, &g2, 60);
    let mut a1 = vec!["exec", n.as_str(), "--shared", "--"];
    a1.extend(c1.iter().map(String::as_str));
    let mut a2 = vec!["exec", s.as_str(), "--semaphore", "3", "--"];
    a2.extend(c2.iter().map(String::as_str));
    let _h1 = Bg::spawn(lockkit(&url, &a1));
    let _h2 = Bg::spawn(lockkit(&url, &a2));
    wait_file(&r1, LIMIT);
    wait_file(&r2, LIMIT);
    let v = json(&run(
        lockkit(&url, &["inspect", &n, "--kind", "rwlock", "--json"]),
        LIMIT,
    ));
    assert_eq!(v["holders"][0]["mode"], "shared", "{v}");
    let v = json(&run(
        lockkit(&url, &["inspect", &s, "--kind", "semaphore", "--json"]),
        LIMIT,
    ));
    assert_eq!(v["holders"][0]["mode"], "permits", "{v}");
    assert_eq!(v["holders"][0]["permits"], 1, "{v}");
}

#[test]
fn force_unlock_needs_confirmation() {
    let d = TempDir::new("force");
    let url = d.url();
    let n = name("force");
    let marks = TempDir::new("force-m");
    let (ready, got) = (marks.path("ready"), marks.path("got"));
    let cmd = trapping_cmd(&ready, &got, 60);
    let mut args = vec!["exec", n.as_str(), "--"];
    args.extend(cmd.iter().map(String::as_str));
    let mut holder = Bg::spawn(lockkit(&url, &args));
    wait_file(&ready, LIMIT);
    // stdin is not a terminal: refused without --yes, and the lock is still held.
    let o = run(lockkit(&url, &["force-unlock", &n]), LIMIT);
    assert_eq!(code(&o), 1);
    assert!(text(&o).1.contains("--yes"), "{:?}", text(&o));
    let v = json(&run(lockkit(&url, &["inspect", &n, "--json"]), LIMIT));
    assert_eq!(v["locked"], true);
    let o = run(lockkit(&url, &["force-unlock", &n, "--yes"]), LIMIT);
    assert_eq!(code(&o), 0);
    assert_eq!(holder.wait(LIMIT).code(), Some(70));
    let o = run(lockkit(&url, &["force-unlock", &n, "--yes"]), LIMIT);
    assert!(text(&o).0.contains("was not held"), "{:?}", text(&o));
    let o = run(
        lockkit(&url, &["force-unlock", &n, "--yes", "--kind", "semaphore"]),
        LIMIT,
    );
    assert_eq!(code(&o), 69);
}
