//! Bench output: the terminal table, and the self-contained HTML report (its charts are in
//! `charts.rs`).

use std::fmt::Write as _;

use super::charts;
use super::results::{Report, Row};
use super::text::{esc, us};

struct Cells {
    backend: String,
    scenario: String,
    clients: String,
    ops: String,
    ops_s: String,
    p50: String,
    p99: String,
    max: String,
    busiest: String,
    violations: String,
    note: String,
}

fn cells(r: &Row) -> Cells {
    let ok = r.status == "ok";
    let dash = || "-".to_string();
    Cells {
        backend: r.backend.clone(),
        scenario: r.scenario.clone(),
        clients: if ok { r.clients.to_string() } else { dash() },
        ops: if ok { r.ops.to_string() } else { dash() },
        ops_s: if ok {
            format!("{:.0}", r.ops_per_sec)
        } else {
            r.status.clone()
        },
        p50: if ok { us(r.p50_wait_us) } else { dash() },
        p99: if ok { us(r.p99_wait_us) } else { dash() },
        max: if ok { us(r.max_wait_us) } else { dash() },
        busiest: r
            .busiest_share
            .filter(|_| ok)
            .map_or_else(dash, |s| format!("{:.0}%", s * 100.0)),
        violations: if ok { r.violations.to_string() } else { dash() },
        note: r.note.clone().unwrap_or_default(),
    }
}

/// The terminal table.
pub(super) fn table(report: &Report) -> String {
    let header = [
        "backend",
        "scenario",
        "clients",
        "ops",
        "ops/s",
        "p50 wait",
        "p99 wait",
        "max wait",
        "busiest",
        "violations",
        "note",
    ];
    let rows: Vec<[String; 11]> = report
        .rows
        .iter()
        .map(|r| {
            let c = cells(r);
            [
                c.backend,
                c.scenario,
                c.clients,
                c.ops,
                c.ops_s,
                c.p50,
                c.p99,
                c.max,
                c.busiest,
                c.violations,
                c.note,
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cols: &[String]| {
        let mut l = String::new();
        for (i, (c, w)) in cols.iter().zip(&widths).enumerate() {
            let pad = w - c.chars().count();
            // Text left, numbers right.
            if i < 2 || i == 10 {
                let _ = write!(l, "{c}{}  ", " ".repeat(pad));
            } else {
                let _ = write!(l, "{}{c}  ", " ".repeat(pad));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut out, &header.map(String::from));
    line(
        &mut out,
        &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
    );
    for r in &rows {
        line(&mut out, r);
    }
    out
}

/// The self-contained HTML report: no external scripts, styles or fonts.
pub(super) fn html(report: &Report) -> String {
    let mut h = String::from(
        r#"<!DOCTYPE html><html><head><meta charset="utf-8"><title>lockkit bench</title><style>
body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px}td.n{text-align:right}th{background:#f4f4f4}
.bad{color:#b00;font-weight:bold}section{margin:18px 0}</style></head><body><h1>lockkit bench</h1>"#,
    );
    let _ = write!(
        h,
        "<p>{} clients, {} ops per scenario and backend, hold {} µs. Wait = acquire latency. Busiest = the busiest client's share of the ops (1/clients is even). Violations = entries that broke exclusion (overlap detector).</p>",
        report
            .clients
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        report.ops,
        report.hold_us
    );
    h.push_str("<table><tr><th>backend</th><th>url</th><th>scenario</th><th>clients</th><th>ops</th><th>ops/s</th><th>p50 wait</th><th>p99 wait</th><th>max wait</th><th>busiest</th><th>violations</th><th>note</th></tr>");
    for r in &report.rows {
        let c = cells(r);
        let vclass = if r.violations > 0 { " bad" } else { "" };
        let _ = write!(
            h,
            r#"<tr><td>{}</td><td>{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n{vclass}">{}</td><td>{}</td></tr>"#,
            esc(&c.backend),
            esc(&r.url),
            esc(&c.scenario),
            c.clients,
            c.ops,
            esc(&c.ops_s),
            esc(&c.p50),
            esc(&c.p99),
            esc(&c.max),
            c.busiest,
            c.violations,
            esc(&c.note)
        );
    }
    h.push_str("</table>");
    let _ = write!(h, "<section>{}</section>", charts::throughput(report));
    if report.clients.len() > 1 {
        for s in charts::sweep_scenarios(report) {
            let _ = write!(h, "<section>{}</section>", charts::sweep(report, &s));
        }
    }
    for g in charts::groups(report) {
        let _ = write!(h, "<section>{}</section>", charts::latency(report, &g));
    }
    h.push_str("</body></html>\n");
    h
}
