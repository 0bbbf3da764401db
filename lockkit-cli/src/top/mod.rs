//! `lockkit top`: a live view of the locks under a name prefix, or one plain table (`--once`)
//! or JSON (`--json`) for scripts.

mod model;
mod ui;

use std::time::{Duration, Instant};

use clap::Args;

use crate::target::Target;
use crate::{complain, error_code, parse_duration};
use model::{arrange, cells, snapshot, Sort, Tracker, COLUMNS, HEADER};

/// `lockkit top`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// Show the locks whose names start with this prefix (all when empty).
    #[arg(default_value = "")]
    prefix: String,
    /// Time between refreshes.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Print one plain table and exit.
    #[arg(long)]
    once: bool,
    /// Print one JSON array (`[{"name","primitive","holders","waiters"}]`) and exit.
    #[arg(long, conflicts_with = "once")]
    json: bool,
    /// Inspect at most this many locks per refresh.
    #[arg(long, default_value_t = 200)]
    limit: usize,
}

pub(crate) async fn run(target: &Target, args: TopArgs) -> u8 {
    if args.interval < Duration::from_millis(100) {
        complain("--interval must be at least 100ms");
        return crate::code::USAGE;
    }
    let (cfg, locks) = match target.connect().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !locks.capabilities().list {
        complain(format!("the {} backend cannot list locks", locks.backend()));
        return crate::code::UNSUPPORTED;
    }
    if args.once || args.json {
        return match snapshot(&locks, &args.prefix, args.limit).await {
            Ok(found) if args.json => {
                println!("{}", serde_json::to_string(&found).unwrap_or_default());
                0
            }
            Ok(found) => {
                let rows = Tracker::default().update(Instant::now(), found);
                print!("{}", plain(&arrange(rows, Sort::Name, "")));
                0
            }
            Err(e) => {
                complain(format!("top: {e}"));
                error_code(&e)
            }
        };
    }
    let title = format!("{} {}", lockkit::redact(&cfg.url), args.prefix);
    ui::run(&locks, &title, &args.prefix, args.interval, args.limit).await
}

/// The table as plain text, columns padded to their widest cell.
fn plain(rows: &[model::Row]) -> String {
    let lines: Vec<[String; COLUMNS]> = std::iter::once(HEADER.map(String::from))
        .chain(rows.iter().map(cells))
        .collect();
    let mut widths = [0usize; COLUMNS];
    for l in &lines {
        for (w, c) in widths.iter_mut().zip(l) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for l in &lines {
        let cols: Vec<String> = l
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cols.join("  ").trim_end());
        out.push('\n');
    }
    if rows.is_empty() {
        out.push_str("(no held or waited-for locks)\n");
    }
    out
}
