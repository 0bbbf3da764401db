//! Bench output: the terminal table, and the self-contained HTML report with SVG charts.

use std::fmt::Write as _;

use super::results::{Report, Row};

fn us(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.2}s", v / 1_000_000.0)
    } else if v >= 1000.0 {
        format!("{:.2}ms", v / 1000.0)
    } else {
        format!("{v:.1}µs")
    }
}

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

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const COLORS: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f",
];

fn backends(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in &report.rows {
        let key = format!("{} ({})", r.backend, r.url);
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

fn backend_key(r: &Row) -> String {
    format!("{} ({})", r.backend, r.url)
}

/// What a row is charted under: its scenario, with its client count in a sweep.
fn group(report: &Report, r: &Row) -> String {
    if report.clients.len() > 1 && r.clients > 1 {
        format!("{} ×{}", r.scenario, r.clients)
    } else {
        r.scenario.clone()
    }
}

fn groups(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in &report.rows {
        let g = group(report, r);
        if !out.contains(&g) {
            out.push(g);
        }
    }
    out
}

fn legend(svg: &mut String, keys: &[String], x: f64, y: f64) {
    for (i, k) in keys.iter().enumerate() {
        let yy = y + i as f64 * 16.0;
        let _ = write!(
            svg,
            r#"<rect x="{x}" y="{}" width="10" height="10" fill="{}"/><text x="{}" y="{}" font-size="11">{}</text>"#,
            yy - 9.0,
            COLORS[i % COLORS.len()],
            x + 14.0,
            yy,
            esc(k)
        );
    }
}

/// Grouped horizontal bars: ops/s per scenario, one bar per backend (log scale).
fn throughput_svg(report: &Report) -> String {
    let keys = backends(report);
    let scens = groups(report);
    let bar_h = 12.0;
    let group_h = bar_h * keys.len() as f64 + 14.0;
    let (left, width) = (110.0, 520.0);
    let height = 30.0 + group_h * scens.len() as f64 + 16.0 * keys.len() as f64 + 20.0;
    let max = report
        .rows
        .iter()
        .filter(|r| r.status == "ok")
        .map(|r| r.ops_per_sec)
        .fold(1.0f64, f64::max);
    let scale = |v: f64| {
        if v <= 1.0 {
            0.0
        } else {
            width * v.log10() / max.log10().max(1e-9)
        }
    };
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="sans-serif">"#,
        left + width + 120.0
    );
    let _ = write!(
        svg,
        r#"<text x="4" y="16" font-size="13" font-weight="bold">Throughput (ops/s, log scale)</text>"#
    );
    for (si, s) in scens.iter().enumerate() {
        let y0 = 30.0 + si as f64 * group_h;
        let _ = write!(
            svg,
            r#"<text x="4" y="{}" font-size="12">{}</text>"#,
            y0 + bar_h,
            esc(s)
        );
        for (bi, k) in keys.iter().enumerate() {
            let y = y0 + bi as f64 * bar_h;
            let row = report
                .rows
                .iter()
                .find(|r| &group(report, r) == s && &backend_key(r) == k);
            match row {
                Some(r) if r.status == "ok" => {
                    let w = scale(r.ops_per_sec).max(1.0);
                    let _ = write!(
                        svg,
                        r#"<rect x="{left}" y="{y}" width="{w:.1}" height="{}" fill="{}"><title>{}: {:.0} ops/s</title></rect><text x="{:.1}" y="{}" font-size="10">{:.0}</text>"#,
                        bar_h - 2.0,
                        COLORS[bi % COLORS.len()],
                        esc(k),
                        r.ops_per_sec,
                        left + w + 4.0,
                        y + bar_h - 3.0,
                        r.ops_per_sec
                    );
                }
                Some(r) => {
                    let _ = write!(
                        svg,
                        r##"<text x="{left}" y="{}" font-size="10" fill="#888">{}</text>"##,
                        y + bar_h - 3.0,
                        esc(&r.status)
                    );
                }
                None => {}
            }
        }
    }
    legend(
        &mut svg,
        &keys,
        left,
        30.0 + group_h * scens.len() as f64 + 12.0,
    );
    svg.push_str("</svg>");
    svg
}

/// Opens a chart's SVG: its title, and the axes of the plot area `(left, top, width, height)`,
/// with `right` spare on the right and room for a legend of `keys` lines below.
fn frame(
    title: &str,
    (left, top, width, height): (f64, f64, f64, f64),
    right: f64,
    keys: usize,
) -> String {
    let total_h = top + height + 40.0 + 16.0 * keys as f64;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{total_h}" font-family="sans-serif">"#,
        left + width + right
    );
    let _ = write!(
        svg,
        r##"<text x="4" y="16" font-size="13" font-weight="bold">{}</text><line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#333"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="#333"/>"##,
        esc(title),
        top + height,
        left + width,
        top + height,
        top + height
    );
    svg
}

/// Wait-latency distribution of one scenario: one line per backend over log2 µs buckets.
fn latency_svg(report: &Report, scenario: &str) -> String {
    // `scenario` is a group: a scenario, with its client count in a sweep.
    let keys = backends(report);
    let (left, top, width, height) = (50.0, 28.0, 560.0, 200.0);
    let rows: Vec<(usize, &Row)> = report
        .rows
        .iter()
        .filter(|r| group(report, r) == scenario && r.status == "ok" && r.ops > 0)
        .filter_map(|r| {
            keys.iter()
                .position(|k| *k == backend_key(r))
                .map(|i| (i, r))
        })
        .collect();
    let nb = rows
        .iter()
        .map(|(_, r)| r.histogram.iter().rposition(|&c| c > 0).unwrap_or(0) + 1)
        .max()
        .unwrap_or(1)
        .max(4);
    let mut svg = frame(
        &format!("Wait latency: {scenario} (share of acquires per bucket)"),
        (left, top, width, height),
        20.0,
        keys.len(),
    );
    let step = width / (nb.max(2) - 1) as f64;
    for b in 0..nb {
        if b % 2 == 0 {
            let label = us((1u64 << b) as f64);
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{}" font-size="9" text-anchor="middle">{}</text>"#,
                left + b as f64 * step,
                top + height + 12.0,
                esc(&label)
            );
        }
    }
    for pct in [0.25, 0.5, 0.75, 1.0] {
        let y = top + height - pct * height;
        let _ = write!(
            svg,
            r##"<text x="{}" y="{y:.1}" font-size="9" text-anchor="end">{:.0}%</text><line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/>"##,
            left - 4.0,
            pct * 100.0,
            left + width
        );
    }
    for (i, r) in &rows {
        let total: u64 = r.histogram.iter().sum();
        let pts: Vec<String> = (0..nb)
            .map(|b| {
                let c = r.histogram.get(b).copied().unwrap_or(0);
                let frac = c as f64 / total.max(1) as f64;
                format!(
                    "{:.1},{:.1}",
                    left + b as f64 * step,
                    top + height - frac * height
                )
            })
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"><title>{}</title></polyline>"#,
            COLORS[i % COLORS.len()],
            pts.join(" "),
            esc(&keys[*i])
        );
    }
    if rows.is_empty() {
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" font-size="12" fill="#888">no measured rows</text>"##,
            left + 10.0,
            top + 40.0
        );
    }
    legend(&mut svg, &keys, left, top + height + 34.0);
    svg.push_str("</svg>");
    svg
}

/// The scenarios run at more than one client count.
fn sweep_scenarios(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in report.rows.iter().filter(|r| r.clients > 1) {
        if !out.contains(&r.scenario) {
            out.push(r.scenario.clone());
        }
    }
    out
}

/// A sweep: ops/s (log scale) against the client count, one line per backend.
fn sweep_svg(report: &Report, scenario: &str) -> String {
    let keys = backends(report);
    let counts = &report.clients;
    let (left, top, width, height) = (60.0, 28.0, 520.0, 200.0);
    let points = |k: &String| -> Vec<(usize, f64)> {
        report
            .rows
            .iter()
            .filter(|r| r.scenario == scenario && r.status == "ok" && &backend_key(r) == k)
            .filter_map(|r| {
                counts
                    .iter()
                    .position(|c| *c == r.clients)
                    .map(|i| (i, r.ops_per_sec))
            })
            .collect()
    };
    let max = keys
        .iter()
        .flat_map(&points)
        .map(|(_, v)| v)
        .fold(10.0f64, f64::max);
    let y = |v: f64| top + height - height * v.max(1.0).log10() / max.log10();
    let step = width / (counts.len().max(2) - 1) as f64;
    let x = |i: usize| left + i as f64 * step;
    let mut svg = frame(
        &format!("Throughput against clients: {scenario} (ops/s, log scale)"),
        (left, top, width, height),
        80.0,
        keys.len(),
    );
    for (i, c) in counts.iter().enumerate() {
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{}" font-size="10" text-anchor="middle">{c}</text>"#,
            x(i),
            top + height + 14.0
        );
    }
    for (ki, k) in keys.iter().enumerate() {
        let pts = points(k);
        let color = COLORS[ki % COLORS.len()];
        let line: Vec<String> = pts
            .iter()
            .map(|&(i, v)| format!("{:.1},{:.1}", x(i), y(v)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            line.join(" ")
        );
        for &(i, v) in &pts {
            let _ = write!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"><title>{}: {v:.0} ops/s at {} clients</title></circle><text x="{:.1}" y="{:.1}" font-size="9">{v:.0}</text>"#,
                x(i),
                y(v),
                esc(k),
                counts[i],
                x(i) + 4.0,
                y(v) - 4.0
            );
        }
    }
    legend(&mut svg, &keys, left, top + height + 34.0);
    svg.push_str("</svg>");
    svg
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
    let _ = write!(h, "<section>{}</section>", throughput_svg(report));
    if report.clients.len() > 1 {
        for s in sweep_scenarios(report) {
            let _ = write!(h, "<section>{}</section>", sweep_svg(report, &s));
        }
    }
    for s in groups(report) {
        let _ = write!(h, "<section>{}</section>", latency_svg(report, &s));
    }
    h.push_str("</body></html>\n");
    h
}
