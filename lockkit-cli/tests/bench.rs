//! A `lockkit bench` smoke run: table, JSON and HTML on `mem://` and `file://`.

mod common;

use common::*;

#[test]
fn bench_smoke_table_json_and_html() {
    let d = TempDir::new("bench");
    let file_url = d.url();
    let report = d.path("report.html");
    let mut c = std::process::Command::new(LOCKKIT);
    c.args([
        "bench",
        "--url",
        "mem://",
        "--url",
        &file_url,
        "--ops",
        "40",
        "--clients",
        "3",
    ])
    .arg("--report")
    .arg(&report);
    let o = run(c, LIMIT);
    let (out, err) = text(&o);
    assert_eq!(code(&o), 0, "{err}");
    for s in [
        "raw-floor",
        "uncontended",
        "contended",
        "many",
        "rw",
        "semaphore",
    ] {
        assert_eq!(
            out.matches(&format!(" {s} ")).count(),
            2,
            "{s} rows in\n{out}"
        );
    }
    assert!(out.contains("violations"), "{out}");
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.matches("<svg").count() >= 2, "charts missing");
    assert!(
        !html.contains("<script"),
        "the report must be self-contained"
    );

    let mut c = std::process::Command::new(LOCKKIT);
    c.args([
        "bench",
        "--url",
        "mem://",
        "--ops",
        "20",
        "--scenario",
        "contended",
        "--scenario",
        "rw",
        "--json",
    ]);
    let o = run(c, LIMIT);
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_eq!(r["status"], "ok");
        assert_eq!(r["ops"], 20);
        assert_eq!(r["violations"], 0);
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn bench_reports_a_bad_url_as_an_error_row() {
    // A URL that does not parse is an error row, and the run fails.
    let mut c = std::process::Command::new(LOCKKIT);
    c.args([
        "bench",
        "--url",
        "nosuch://x",
        "--ops",
        "5",
        "--scenario",
        "uncontended",
    ]);
    let o = run(c, LIMIT);
    assert_eq!(code(&o), 1);
    assert!(text(&o).0.contains("error"), "{:?}", text(&o));
}

#[test]
fn bench_sweeps_client_counts() {
    // `--clients 1,3` runs each multi-client scenario once per count (the uncontended one
    // once), and the report charts throughput against clients.
    let d = TempDir::new("bench-sweep");
    let report = d.path("sweep.html");
    let mut c = std::process::Command::new(LOCKKIT);
    c.args([
        "bench",
        "--url",
        "mem://",
        "--ops",
        "30",
        "--clients",
        "1,3",
        "--scenario",
        "contended",
        "--scenario",
        "uncontended",
        "--json",
    ])
    .arg("--report")
    .arg(&report);
    let o = run(c, LIMIT);
    assert_eq!(code(&o), 0, "{}", text(&o).1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["clients"], serde_json::json!([1, 3]));
    let rows: Vec<(String, u64)> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["scenario"].as_str().unwrap().to_string(),
                r["clients"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("contended".to_string(), 1),
            ("contended".to_string(), 3),
            ("uncontended".to_string(), 1)
        ]
    );
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(
        html.contains("Throughput against clients: contended"),
        "no sweep chart"
    );
    assert!(html.contains("contended ×3"), "no per-count latency chart");

    let mut c = std::process::Command::new(LOCKKIT);
    c.args(["bench", "--url", "mem://", "--clients", "2,0"]);
    assert_eq!(
        code(&run(c, LIMIT)),
        64,
        "a zero client count is a usage error"
    );
}
