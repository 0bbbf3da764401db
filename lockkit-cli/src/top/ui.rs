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

use super::model::{self, arrange, cells, snapshot, Row, Sort, Tracker, HEADER};
use crate::complain;

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
                format!(" {} {} ", model::kind(r.entry.primitive), r.entry.name)
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
            model::mode(&h.mode),
            h.token.map_or("-".into(), |t| t.to_string()),
            h.remaining_lease.map_or("-".into(), model::short),
        )));
    }
    out.push(Line::from("waiters (in queue order):").bold());
    if r.info.waiters.is_empty() {
        out.push(Line::from("  none"));
    }
    for (i, w) in r.info.waiters.iter().enumerate() {
        out.push(Line::from(format!(
            "  {}. {}  {}",
            i + 1,
            w.owner,
            model::mode(&w.mode)
        )));
    }
    out
}

/// Runs the live view until `q`.
pub(super) async fn run(
    locks: &Locks,
    title: &str,
    prefix: &str,
    interval: Duration,
    limit: usize,
) -> u8 {
    let mut screen = match ratatui::try_init() {
        Ok(t) => Screen(t),
        Err(e) => {
            complain(format!(
                "top needs a terminal: {e} (use --once or --json in scripts)"
            ));
            return crate::code::FAILURE;
        }
    };
    let (tx, mut keys) = tokio::sync::mpsc::unbounded_channel();
    // crossterm's reads block: a thread of their own, ending when the view is gone.
    std::thread::spawn(move || loop {
        match event::poll(Duration::from_millis(200)) {
            Ok(true) => match event::read() {
                Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => {
                    if tx.send(k).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            },
            Ok(false) if tx.is_closed() => break,
            Ok(false) => {}
            Err(_) => break,
        }
    });
    let mut view = View::default();
    let mut tracker = Tracker::default();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        if let Err(e) = screen.0.draw(|f| view.draw(f, title)) {
            drop(screen);
            complain(format!("top: cannot draw: {e}"));
            return crate::code::FAILURE;
        }
        tokio::select! {
            _ = tick.tick() => {
                if view.paused {
                    continue;
                }
                match snapshot(locks, prefix, limit).await {
                    Ok(found) => {
                        let now = Instant::now();
                        view.rows = tracker.update(now, found);
                        view.refreshed = Some(now);
                        view.error = None;
                    }
                    Err(e) => view.error = Some(e.to_string()),
                }
            }
            k = keys.recv() => match k {
                Some(k) if view.key(k) => {}
                _ => break,
            },
        }
    }
    0
}
