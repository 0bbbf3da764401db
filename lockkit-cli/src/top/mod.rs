//! `lockkit top`: a live view of the locks under a name prefix, or one plain table (`--once`)
//! or JSON (`--json`) for scripts.

mod model;
mod ui;

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::Args;

use crate::exit::{complain, error_code, say};
use crate::target::Target;
use model::{arrange, cells, snapshot, Sort, Tracker, COLUMNS, HEADER};

/// `lockkit top`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// Show the locks whose names start with this prefix (all when empty).
    #[arg(default_value = "")]
    prefix: String,
    /// Time between refreshes (at least 100ms).
    #[arg(
        long,
        default_value = "1s",
        value_parser = crate::duration::interval,
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    interval: Duration,
    /// Print one plain table and exit.
    #[arg(long, conflicts_with = "interval")]
    once: bool,
    /// Print one JSON array (`[{"name","primitive","holders","waiters"}]`) and exit.
    #[arg(long, conflicts_with_all = ["once", "interval"])]
    json: bool,
    /// Inspect at most this many locks per refresh (the first by name).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
}

pub(crate) async fn run(target: &Target, args: TopArgs) -> u8 {
    let (cfg, locks) = match target.connect().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !locks.capabilities().list {
        complain(format!("the {} backend cannot list locks", locks.backend()));
        return crate::exit::code::UNSUPPORTED;
    }
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    // One refresh first: a bad prefix or an unreachable server is reported plainly, before any
    // terminal is taken over.
    let first = match snapshot(&locks, &args.prefix, limit).await {
        Ok(s) => s,
        Err(e) => {
            complain(format!("top: {e}"));
            return error_code(&e);
        }
    };
    if args.once || args.json {
        if first.listed > limit {
            complain(format!(
                "showing the first {limit} of {} locks (--limit)",
                first.listed
            ));
        }
        if args.json {
            say!(
                "{}",
                serde_json::to_string(&first.locks).expect("lock views serialize")
            );
        } else {
            let rows = Tracker::default().update(Instant::now(), first.locks);
            use std::io::Write;
            let _ = write!(
                std::io::stdout().lock(),
                "{}",
                plain(&arrange(rows, Sort::Name, ""))
            );
        }
        return 0;
    }
    if !std::io::stdout().is_terminal() {
        complain("top needs a terminal on stdout (use --once or --json in scripts)");
        return crate::exit::code::USAGE;
    }
    let title = format!("{} {}", lockkit::redact(&cfg.url), args.prefix);
    let view = ui::Setup {
        title,
        prefix: args.prefix,
        interval: args.interval,
        limit,
    };
    ui::run(locks, view, first).await
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
