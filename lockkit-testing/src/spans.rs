//! A process-wide tracing subscriber that keeps the fields of lockkit's acquire and release
//! spans and of lockkit's events, so that a case can check that every backend traces the same
//! way.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One span as it ended up: its name and every field recorded on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanRecord {
    /// `lockkit.acquire` or `lockkit.release`.
    pub name: &'static str,
    /// Field name -> value, as `Debug` text.
    pub fields: BTreeMap<String, String>,
}

/// One event: where it came from, its level and every field (the text is `message`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// The module that emitted it, such as `lockkit_core::telemetry`.
    pub target: &'static str,
    /// Its level.
    pub level: Level,
    /// Field name -> value, as `Debug` text (strings as they are).
    pub fields: BTreeMap<String, String>,
}

#[derive(Default)]
struct Store {
    /// Open spans by id, and the finished ones in order.
    open: BTreeMap<u64, SpanRecord>,
    done: Vec<SpanRecord>,
    /// lockkit's events, in order.
    events: Vec<EventRecord>,
}

static STORE: OnceLock<Mutex<Store>> = OnceLock::new();

fn store() -> std::sync::MutexGuard<'static, Store> {
    STORE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

struct Capture;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let name = attrs.metadata().name();
        if !name.starts_with("lockkit.") {
            return;
        }
        let mut fields = BTreeMap::new();
        // Declared but not yet recorded fields count too: they are the span's shape.
        for f in attrs.metadata().fields() {
            fields.insert(f.name().to_string(), String::new());
        }
        attrs.record(&mut Fields(&mut fields));
        store()
            .open
            .insert(id.into_u64(), SpanRecord { name, fields });
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let target = event.metadata().target();
        if !target.starts_with("lockkit") {
            return;
        }
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        store().events.push(EventRecord {
            target,
            level: *event.metadata().level(),
            fields,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(r) = store().open.get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut r.fields));
        }
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        let mut s = store();
        if let Some(r) = s.open.remove(&id.into_u64()) {
            s.done.push(r);
        }
    }
}

/// Installs the capturing subscriber for the whole process (once); `false` if another
/// subscriber was there first.
pub fn capture() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        let subscriber = tracing_subscriber::registry().with(Capture);
        tracing::subscriber::set_global_default(subscriber).is_ok()
    })
}

/// The finished lockkit spans whose `lock` field is `lock`, in the order they ended.
pub fn of_lock(lock: &str) -> Vec<SpanRecord> {
    store()
        .done
        .iter()
        .filter(|r| r.fields.get("lock").is_some_and(|l| l == lock))
        .cloned()
        .collect()
}

/// The lockkit events whose `lock` field is `lock`, in the order they were emitted.
pub fn events_of_lock(lock: &str) -> Vec<EventRecord> {
    store()
        .events
        .iter()
        .filter(|r| r.fields.get("lock").is_some_and(|l| l == lock))
        .cloned()
        .collect()
}

/// How many lockkit events so far about lock `lock` (their `lock` field) have a message
/// containing `text`: what one test's lock went through, whatever runs beside it.
pub fn events_of_lock_mentioning(lock: &str, text: &str) -> usize {
    events_of_lock(lock)
        .iter()
        .filter(|e| e.fields.get("message").is_some_and(|m| m.contains(text)))
        .count()
}

/// How many lockkit events so far have a field (the message, an error) containing `text`.
pub fn events_mentioning(text: &str) -> usize {
    store()
        .events
        .iter()
        .filter(|r| r.fields.values().any(|v| v.contains(text)))
        .count()
}
