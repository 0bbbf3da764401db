//! What the per-backend benches share.

/// The counts of contending clients to sweep, from `LOCKKIT_BENCH_CLIENTS` (a comma-separated
/// list, default `8`; the sweep is `1,8,64,256`).
pub fn client_counts() -> Vec<usize> {
    std::env::var("LOCKKIT_BENCH_CLIENTS")
        .unwrap_or_else(|_| "8".into())
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .expect("LOCKKIT_BENCH_CLIENTS: counts like 1,8,64")
        })
        .collect()
}
