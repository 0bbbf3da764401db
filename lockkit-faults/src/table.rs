//! The README's results table, from runs' `report.json` files.

use std::path::PathBuf;

use serde_json::Value;

fn stats(v: &Value) -> String {
    match (v["p50"].as_f64(), v["max"].as_f64()) {
        (Some(p50), Some(max)) => format!("{p50:.0} / {max:.0}"),
        _ => "-".into(),
    }
}

/// `N (probe ms)`; `-` for a report from before blocked hand-offs were counted.
fn handoffs(o: &Value) -> String {
    let Some(n) = o["blocked_handoffs"].as_u64() else {
        return "-".into();
    };
    let probe = &o["final_probe"];
    match (probe["ms"].as_f64(), probe["error"].as_str()) {
        (Some(ms), _) => format!("{n} ({ms:.0})"),
        (None, Some(e)) => format!("{n} (probe: {e})"),
        (None, None) => format!("{n} (probe: -)"),
    }
}

/// Prints one Markdown row per report.
pub fn print(reports: &[PathBuf]) -> std::io::Result<()> {
    println!(
        "| backend | topology | holds | faults | overlapping holds | unsignalled overlaps | \
         stale writes accepted | stale writes rejected | token regressions | \
         lost-signal latency p50 / max (ms) | paused holder: lost() after resume, max (ms) | \
         recovery p50 / max (ms) | blocked hand-offs (final probe, ms) | leftovers | \
         history | linearizable |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for path in reports {
        let text = std::fs::read_to_string(path)?;
        let o: Value = serde_json::from_str(&text).map_err(std::io::Error::other)?;
        let r = &o["report"];
        let url = r["run"]["url"].as_str().unwrap_or("?");
        let backend = url.split("://").next().unwrap_or("?");
        let resume = r["faults"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["lost_after_resume_ms"].as_f64())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let left = &o["leftovers"];
        let leftovers = match left["error"].as_str() {
            Some(e) => format!("scan failed: {e}"),
            None => {
                let n = left["locks"].as_array().map_or(0, Vec::len)
                    + left["leases"].as_array().map_or(0, Vec::len);
                n.to_string()
            }
        };
        let h = &r["history"];
        let count = |k: &str| h[k].as_array().map_or(0, Vec::len);
        let history = match (
            count("overlaps"),
            count("token_regressions"),
            count("stale_writes_accepted"),
        ) {
            (0, 0, 0) => "clean".to_string(),
            (o, t, s) => format!("{o} overlaps, {t} regressions, {s} stale"),
        };
        let linearizable = o["linearizability"]["result"]
            .as_str()
            .filter(|r| !r.is_empty())
            .unwrap_or("-");
        println!(
            "| {backend} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r["run"]["topology"].as_str().unwrap_or("?"),
            r["holds"],
            r["faults"].as_array().map_or(0, Vec::len),
            r["overlapping_holds"],
            r["unsignalled_overlaps"],
            r["stale_writes_accepted"],
            r["writes_rejected"],
            r["token_regressions"],
            stats(&r["lost_latency_ms"]),
            resume.map_or("-".into(), |v| format!("{v:.0}")),
            stats(&r["recovery_ms"]),
            handoffs(&o),
            leftovers,
            history,
            linearizable,
        );
    }
    Ok(())
}
