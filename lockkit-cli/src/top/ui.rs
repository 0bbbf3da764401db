//! The terminal UI of `lockkit top` (ratatui over crossterm): a table of locks refreshed every
//! interval, the selected lock's holders and waiters below it, and keys to sort, filter, pause
//! and quit.

use std::time::{Duration, Instant};

use lockkit::Locks;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Style, Stylize};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row as TableRow, Table, TableState};
use ratatui::{DefaultTerminal, Frame};
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinHandle;

use super::model::{self, arrange, cells, snapshot, Row, Snapshot, Sort, Tracker, HEADER};
use crate::exit::complain;

const HELP: &str = "q quit   p pause   s sort   / filter   ↑↓ select";

/// Restores the terminal however `run` ends (ratatui's panic hook covers panics).
struct Screen(DefaultTerminal);

impl Drop for Screen {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

#[derive(Default)]
struct View {
    limit: usize,
    listed: usize,
    sort: Option<Sort>,
    filter: String,
    editing: bool,
    paused: bool,
    rows: Vec<Row>,
    table: TableState,
    error: Option<String>,
    refreshed: Option<Instant>,
}

impl View {
    fn show(&mut self, tracker: &mut Tracker, snap: Snapshot) {
        let now = Instant::now();
        self.listed = snap.listed;
        self.rows = tracker.update(now, snap.locks);
        self.refreshed = Some(now);
        self.error = None;
    }

    fn sort(&self) -> Sort {
        self.sort.unwrap_or(Sort::Name)
    }

    fn shown(&self) -> Vec<Row> {
        arrange(self.rows.clone(), self.sort(), &self.filter)
    }

    /// Applies one key; `false` to quit.
    fn key(&mut self, k: KeyEvent) -> bool {
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            return false;
        }
        if self.editing {
            match k.code {
                KeyCode::Enter => self.editing = false,
                KeyCode::Esc => {
                    self.editing = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) => self.filter.push(c),
                _ => {}
            }
            return true;
        }
        match k.code {
            KeyCode::Char('q') | KeyCode::Esc => return false,
            KeyCode::Char('p') | KeyCode::Char(' ') => self.paused = !self.paused,
            KeyCode::Char('s') => self.sort = Some(self.sort().next()),
            KeyCode::Char('/') => self.editing = true,
            KeyCode::Down | KeyCode::Char('j') => self.table.select_next(),
            KeyCode::Up | KeyCode::Char('k') => self.table.select_previous(),
            _ => {}
        }
        true
    }

    fn draw(&mut self, f: &mut Frame<'_>, title: &str) {
        let shown = self.shown();
        let selected = self
            .table
            .selected()
            .map(|i| i.min(shown.len().saturating_sub(1)));
        self.table.select(if shown.is_empty() {
            None
        } else {
            selected.or(Some(0))
        });
        let [top, table, detail, help] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(3),
            Constraint::Length(9),
            Constraint::Length(1),
        ])
        .areas(f.area());

        let mut status = format!(
            "lockkit top  {title}  {} locks  sort: {}",
            shown.len(),
            self.sort().label()
        );
        if self.listed > self.limit {
            status.push_str(&format!(
                "  (first {} of {} listed)",
                self.limit, self.listed
            ));
        }
        if self.editing || !self.filter.is_empty() {
            status.push_str(&format!(
                "  filter: {}{}",
                self.filter,
                if self.editing { "_" } else { "" }
            ));
        }
        if self.paused {
            status.push_str("  PAUSED");
        } else if let Some(t) = self.refreshed {
            status.push_str(&format!("  refreshed {} ago", model::short(t.elapsed())));
        }
        let status = match &self.error {
            Some(e) => Line::from(format!("{status}  error: {e}")).red(),
            None => Line::from(status),
        };
        f.render_widget(Paragraph::new(status.bold()), top);

        let widths = [
            Constraint::Length(9),
            Constraint::Fill(3),
            Constraint::Length(7),
            Constraint::Fill(1),
            Constraint::Length(11),
            Constraint::Length(17),
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(6),
        ];
        let rows: Vec<TableRow<'_>> = shown.iter().map(|r| TableRow::new(cells(r))).collect();
        let t = Table::new(rows, widths)
            .header(TableRow::new(HEADER).style(Style::new().bold().underlined()))
            .row_highlight_style(Style::new().reversed())
            .block(Block::bordered().title(" locks "));
        f.render_stateful_widget(t, table, &mut self.table);

        let lines = match self.table.selected().and_then(|i| shown.get(i)) {
            Some(r) => details(r),
            None => vec![Line::from("no held or waited-for locks under this prefix")],
        };
        let title = self
            .table
            .selected()
            .and_then(|i| shown.get(i))
            .map_or(" details ".to_string(), |r| {
                format!(" {} {} ", r.entry.primitive.as_str(), r.entry.name)
            });
        f.render_widget(
            Paragraph::new(lines).block(Block::bordered().title(title)),
            detail,
        );
        f.render_widget(Paragraph::new(HELP).dim(), help);
    }
}

fn details(r: &Row) -> Vec<Line<'static>> {
    let mut out = vec![Line::from("holders:").bold()];
    for h in &r.info.holders {
        out.push(Line::from(format!(
            "  {}  {}  token {}  lease left {}",
            h.owner,
            h.mode,
            h.token.map_or("-".into(), |t| t.to_string()),
            h.remaining_lease.map_or("-".into(), model::short),
        )));
    }
    out.push(Line::from("waiters (in queue order):").bold());
    if r.info.waiters.is_empty() {
        out.push(Line::from("  none"));
    }
    for (i, w) in r.info.waiters.iter().enumerate() {
        out.push(Line::from(format!("  {}. {}  {}", i + 1, w.owner, w.mode)));
    }
    out
}

/// What the live view shows and how often.
pub(super) struct Setup {
    pub(super) title: String,
    pub(super) prefix: String,
    pub(super) interval: Duration,
    pub(super) limit: usize,
}

/// Runs the live view until `q` (or Ctrl-C, SIGINT, SIGTERM, SIGHUP), starting from `first`.
pub(super) async fn run(locks: Locks, setup: Setup, first: Snapshot) -> u8 {
    let mut screen = match ratatui::try_init() {
        Ok(t) => Screen(t),
        Err(e) => {
            ratatui::restore();
            complain(format!("top: cannot take over the terminal: {e}"));
            return crate::exit::code::FAILURE;
        }
    };
    let signals = [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
    ]
    .map(signal);
    let [Ok(mut int), Ok(mut term), Ok(mut hup)] = signals else {
        drop(screen);
        complain("top: cannot listen for signals");
        return crate::exit::code::FAILURE;
    };
    let (tx, mut keys) = tokio::sync::mpsc::unbounded_channel();
    // crossterm's reads block: a thread of their own, ending when the view is gone.
    std::thread::spawn(move || loop {
        let sent = match event::poll(Duration::from_millis(200)) {
            Ok(true) => match event::read() {
                Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => tx.send(Ok(k)),
                Ok(_) => Ok(()),
                Err(e) => tx.send(Err(e.to_string())),
            },
            Ok(false) if tx.is_closed() => break,
            Ok(false) => Ok(()),
            Err(e) => tx.send(Err(e.to_string())),
        };
        if sent.is_err() {
            break;
        }
    });
    let mut view = View {
        limit: setup.limit,
        ..View::default()
    };
    let mut tracker = Tracker::default();
    view.show(&mut tracker, first);
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + setup.interval, setup.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // The refresh runs on its own task, so keys are served while it waits on the server.
    let mut refresh: Option<JoinHandle<lockkit::Result<Snapshot>>> = None;
    let failed = loop {
        if let Err(e) = screen.0.draw(|f| view.draw(f, &setup.title)) {
            break Some(format!("cannot draw: {e}"));
        }
        tokio::select! {
            _ = tick.tick(), if refresh.is_none() && !view.paused => {
                let (locks, prefix, limit) = (locks.clone(), setup.prefix.clone(), setup.limit);
                refresh = Some(tokio::spawn(async move { snapshot(&locks, &prefix, limit).await }));
            }
            done = async { refresh.as_mut().expect("guarded").await }, if refresh.is_some() => {
                refresh = None;
                match done {
                    Ok(Ok(snap)) => view.show(&mut tracker, snap),
                    Ok(Err(e)) => view.error = Some(e.to_string()),
                    Err(e) => view.error = Some(format!("the refresh failed: {e}")),
                }
            }
            k = keys.recv() => match k {
                Some(Ok(k)) if view.key(k) => {}
                Some(Ok(_)) => break None,
                Some(Err(e)) => break Some(format!("cannot read the keyboard: {e}")),
                None => break Some("the keyboard reader stopped".into()),
            },
            _ = int.recv() => break None,
            _ = term.recv() => break None,
            _ = hup.recv() => break None,
        }
    };
    if let Some(r) = refresh {
        r.abort();
    }
    drop(screen);
    match failed {
        Some(e) => {
            complain(format!("top: {e}"));
            crate::exit::code::FAILURE
        }
        None => 0,
    }
}
