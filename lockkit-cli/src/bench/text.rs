//! Text helpers of the bench output: durations for people, escaping for HTML.

/// Microseconds for people: `12.3µs`, `4.56ms`, `1.20s`.
pub(super) fn us(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.2}s", v / 1_000_000.0)
    } else if v >= 1000.0 {
        format!("{:.2}ms", v / 1000.0)
    } else {
        format!("{v:.1}µs")
    }
}

/// Escapes text for HTML.
pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
