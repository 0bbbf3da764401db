//! The HTML report's charts, drawn by `plotters` as inline SVG: throughput per scenario, a
//! client-count sweep per scenario, and the wait-latency distribution per scenario.

use plotters::coord::ranged1d::SegmentValue;
use plotters::coord::CoordTranslate;
use plotters::prelude::*;

use super::results::{Report, Row};
use super::text::{esc, us};

const WIDTH: u32 = 760;
const FONT: &str = "sans-serif";
const COLORS: [RGBColor; 8] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0x9c, 0x75, 0x5f),
];

type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Draws one chart of `height` pixels into an SVG string; a chart that fails to draw becomes a
/// line saying why, so the rest of the report still renders.
fn render(
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Drawn,
) -> String {
    let mut svg = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(Into::into)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(Into::into))
    };
    match drawn {
        Ok(()) => svg,
        Err(e) => format!("<p>chart not drawn: {}</p>", esc(&e.to_string())),
    }
}

/// Draws the series' legend at `at`, on a light box.
fn legend<'a, 'b: 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, CT>,
    at: SeriesLabelPosition,
) -> Drawn {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// The backends measured, each with the URL it ran against, in the order first seen.
fn backends(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in &report.rows {
        let key = backend_key(r);
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

fn backend_key(r: &Row) -> String {
    if r.url.is_empty() {
        r.backend.clone()
    } else {
        format!("{} ({})", r.backend, r.url)
    }
}

/// What a row is charted under: its scenario, with its client count in a sweep.
pub(super) fn group(report: &Report, r: &Row) -> String {
    if report.clients.len() > 1 && r.clients > 1 {
        format!("{} ×{}", r.scenario, r.clients)
    } else {
        r.scenario.clone()
    }
}

/// Every group, in the order first seen.
pub(super) fn groups(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in &report.rows {
        let g = group(report, r);
        if !out.contains(&g) {
            out.push(g);
        }
    }
    out
}

/// The scenarios run at more than one client count.
pub(super) fn sweep_scenarios(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in report.rows.iter().filter(|r| r.clients > 1) {
        if !out.contains(&r.scenario) {
            out.push(r.scenario.clone());
        }
    }
    out
}

/// Horizontal bars: ops/s of every row (log scale), grouped by scenario, coloured by backend;
/// a row that did not run says why instead.
pub(super) fn throughput(report: &Report) -> String {
    let keys = backends(report);
    // One bar per (group, backend), the first group at the top.
    let mut bars: Vec<(String, usize, &Row)> = Vec::new();
    for g in groups(report) {
        for (k, key) in keys.iter().enumerate() {
            if let Some(r) = report
                .rows
                .iter()
                .find(|r| group(report, r) == g && &backend_key(r) == key)
            {
                bars.push((g.clone(), k, r));
            }
        }
    }
    let n = bars.len().max(1);
    let max = bars
        .iter()
        .filter(|b| b.2.status == "ok")
        .map(|b| b.2.ops_per_sec)
        .fold(10.0f64, f64::max);
    let height = 70 + 16 * n as u32 + 16 * keys.len() as u32;
    render(height, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("Throughput (ops/s, log scale)", (FONT, 16))
            .margin(10)
            .x_label_area_size(24)
            .y_label_area_size(150)
            .build_cartesian_2d((1f64..max * 3.0).log_scale(), (0..n).into_segmented())?;
        // Row `i` of `bars` sits at position `n - 1 - i`, so the first is at the top.
        let label = |v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(p) if *p < n => {
                let i = n - 1 - p;
                let first = i == 0 || bars[i - 1].0 != bars[i].0;
                if first {
                    bars[i].0.clone()
                } else {
                    String::new()
                }
            }
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&label)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()?;
        let at = |i: usize| n - 1 - i;
        for (k, key) in keys.iter().enumerate() {
            let c = color(k);
            chart
                .draw_series(
                    bars.iter()
                        .enumerate()
                        .filter(|(_, b)| b.1 == k && b.2.status == "ok")
                        .map(|(i, b)| {
                            let y0 = SegmentValue::Exact(at(i));
                            let y1 = SegmentValue::Exact(at(i) + 1);
                            let mut r = Rectangle::new(
                                [(1.0, y0), (b.2.ops_per_sec.max(1.0), y1)],
                                c.filled(),
                            );
                            r.set_margin(2, 2, 0, 0);
                            r
                        }),
                )?
                .label(key.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
        }
        chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
            let (text, x, style) = if b.2.status == "ok" {
                let v = b.2.ops_per_sec.max(1.0);
                (format!("{:.0}", b.2.ops_per_sec), v * 1.05, BLACK)
            } else {
                (b.2.status.clone(), 1.2, RGBColor(0x88, 0x88, 0x88))
            };
            Text::new(
                text,
                (x, SegmentValue::CenterOf(at(i))),
                (FONT, 10).into_font().color(&style),
            )
        }))?;
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
}

/// One scenario's sweep: ops/s (log scale) against the client count, one line per backend.
pub(super) fn sweep(report: &Report, scenario: &str) -> String {
    let keys = backends(report);
    let counts = &report.clients;
    let points = |k: &String| -> Vec<(usize, f64)> {
        report
            .rows
            .iter()
            .filter(|r| r.scenario == scenario && r.status == "ok" && &backend_key(r) == k)
            .filter_map(|r| {
                let i = counts.iter().position(|c| *c == r.clients)?;
                Some((i, r.ops_per_sec.max(1.0)))
            })
            .collect()
    };
    let max = keys
        .iter()
        .flat_map(&points)
        .map(|(_, v)| v)
        .fold(10.0f64, f64::max);
    let last = counts.len().saturating_sub(1).max(1);
    render(320, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("Throughput against clients: {scenario} (ops/s, log scale)"),
                (FONT, 16),
            )
            .margin(12)
            // Room for the last point's value label.
            .margin_right(48)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(0usize..last, (1f64..max * 3.0).log_scale())?;
        chart
            .configure_mesh()
            .x_labels(counts.len())
            .x_label_formatter(&|i| counts.get(*i).map_or_else(String::new, usize::to_string))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .x_desc("clients")
            .draw()?;
        for (k, key) in keys.iter().enumerate() {
            let c = color(k);
            let pts = points(key);
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
                .label(key.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], c.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&(i, v)| Circle::new((i, v), 3, c.filled())))?;
            chart.draw_series(
                pts.iter()
                    .map(|&(i, v)| Text::new(format!("{v:.0}"), (i, v * 1.15), (FONT, 10))),
            )?;
        }
        legend(&mut chart, SeriesLabelPosition::LowerLeft)?;
        Ok(())
    })
}

/// One group's wait-latency distribution: the share of acquisitions in each power-of-two
/// bucket of microseconds, one line per backend.
pub(super) fn latency(report: &Report, group_name: &str) -> String {
    let keys = backends(report);
    let rows: Vec<(usize, &Row)> = report
        .rows
        .iter()
        .filter(|r| group(report, r) == group_name && r.status == "ok" && r.ops > 0)
        .filter_map(|r| Some((keys.iter().position(|k| *k == backend_key(r))?, r)))
        .collect();
    let buckets = rows
        .iter()
        .map(|(_, r)| r.histogram.len())
        .max()
        .unwrap_or(0)
        .max(4);
    render(320, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("Wait latency: {group_name} (share of acquires per bucket)"),
                (FONT, 16),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(50)
            .build_cartesian_2d(0usize..buckets - 1, 0f64..1.0)?;
        chart
            .configure_mesh()
            .x_labels(buckets)
            .x_label_formatter(&|b| us((1u64 << (*b).min(62)) as f64))
            .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
            .x_desc("wait (power-of-two buckets, from)")
            .draw()?;
        for (k, r) in &rows {
            let c = color(*k);
            let total = r.histogram.iter().sum::<u64>().max(1) as f64;
            let pts =
                (0..buckets).map(|b| (b, r.histogram.get(b).copied().unwrap_or(0) as f64 / total));
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
                .label(keys[*k].as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], c.stroke_width(2)));
        }
        if rows.is_empty() {
            chart.draw_series(std::iter::once(Text::new(
                "no measured rows",
                (0, 0.5),
                (FONT, 12).into_font().color(&RGBColor(0x88, 0x88, 0x88)),
            )))?;
        } else {
            legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        }
        Ok(())
    })
}
