//! What lockkit tells operators: its metrics (through the [`metrics`] facade: install any
//! recorder, such as `metrics-exporter-prometheus`, to collect them) and the tracing events of a
//! guard's life. Every name and label is defined here, once, and the core emits them the same
//! way for every backend; backends report only what only they see (renewals, reconnects)
//! through [`renewal`] and [`reconnected`].
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `lockkit_acquire_duration_seconds` | histogram | `backend`, `primitive`, `outcome` (`acquired`, `timed_out`, `error`) |
//! | `lockkit_hold_duration_seconds` | histogram | `backend`, `primitive` |
//! | `lockkit_held` | gauge | `backend`, `primitive` |
//! | `lockkit_waiting` | gauge | `backend`, `primitive` |
//! | `lockkit_lost_total` | counter | `backend`, `primitive`, `reason` |
//! | `lockkit_suspect_total` | counter | `backend`, `primitive` |
//! | `lockkit_renewals_total` | counter | `backend`, `result` (`ok`, `failed`) |
//! | `lockkit_renewal_duration_seconds` | histogram | `backend`, `result` |
//! | `lockkit_release_errors_total` | counter | `backend`, `primitive` |
//! | `lockkit_reconnects_total` | counter | `backend` |
//! | `lockkit_force_unlocks_total` | counter | `backend`, `primitive` |
//! | `lockkit_leaderships_total` | counter | `backend`, `primitive` (campaigns won) |
//! | `lockkit_leader_term` | gauge | `backend`, `primitive` (the term of the last campaign won) |
//! | `lockkit_leader_changes_total` | counter | `backend`, `primitive` (changes observers saw) |
//!
//! A campaign is an acquire of primitive `election`: its duration, the leaderships held, their
//! hold time and their losses are in the acquire and hold metrics above.
//!
//! No label carries a lock name unless [`label_lock_names`] turns it on (a `lock` label on the
//! per-lock metrics): lock names are unbounded, and so would the series be.
//!
//! Tracing: one `lockkit.acquire` and one `lockkit.release` span per operation (fields
//! `backend`, `primitive`, `lock`, ...), one event per state change of a guard (`Suspect`,
//! `Held` again, `Lost` with its reason), and a `warn` audit event for every `force_unlock`.
//!
//! Every event of lockkit and its backends names the same things by the same fields:
//! `backend` (always, as in [`BackendKind::as_str`]), `lock` (the lock's name as the user gave
//! it, on every event about one lock), `key` (what the backend stores it under: a Redis key, an
//! etcd key or key prefix, a ZooKeeper node path), `primitive`, `token`, `error`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use metrics::{counter, histogram, Gauge, Histogram, Key, Label, Metadata};

use crate::inspect::Primitive;
use crate::kind::BackendKind;
use crate::reason::LostReason;

/// The metric names.
pub mod names {
    /// Time from an acquire's call to its result (histogram, seconds).
    pub const ACQUIRE_DURATION: &str = "lockkit_acquire_duration_seconds";
    /// Time from an acquire's result to its release (histogram, seconds).
    pub const HOLD_DURATION: &str = "lockkit_hold_duration_seconds";
    /// Ownerships held now (gauge).
    pub const HELD: &str = "lockkit_held";
    /// Acquires waiting now (gauge).
    pub const WAITING: &str = "lockkit_waiting";
    /// Guards that lost their lock (counter, by reason).
    pub const LOST: &str = "lockkit_lost_total";
    /// Guards that turned Suspect (counter).
    pub const SUSPECT: &str = "lockkit_suspect_total";
    /// Lease renewals (counter, by result).
    pub const RENEWALS: &str = "lockkit_renewals_total";
    /// How long renewals took (histogram, seconds, by result).
    pub const RENEWAL_DURATION: &str = "lockkit_renewal_duration_seconds";
    /// Releases that failed (counter).
    pub const RELEASE_ERRORS: &str = "lockkit_release_errors_total";
    /// Connections re-established, sessions replaced, endpoints failed over (counter).
    pub const RECONNECTS: &str = "lockkit_reconnects_total";
    /// Locks force-unlocked (counter).
    pub const FORCE_UNLOCKS: &str = "lockkit_force_unlocks_total";
    /// Campaigns won (counter).
    pub const LEADERSHIPS: &str = "lockkit_leaderships_total";
    /// The term of the last campaign won (gauge).
    pub const LEADER_TERM: &str = "lockkit_leader_term";
    /// Changes of leader that observers saw (counter).
    pub const LEADER_CHANGES: &str = "lockkit_leader_changes_total";
}

static LOCK_NAMES: AtomicBool = AtomicBool::new(false);

/// Adds a `lock` label (the lock's name) to the per-lock metrics of acquires from now on (an
/// ownership keeps the labels its acquire started with). Off by default: turn it on only where
/// the set of names is small and fixed.
pub fn label_lock_names(on: bool) {
    LOCK_NAMES.store(on, Ordering::Relaxed);
}

/// Which lock an event or a metric is about.
#[derive(Debug)]
pub(crate) struct Identity {
    pub(crate) backend: &'static str,
    pub(crate) primitive: &'static str,
    pub(crate) lock: Arc<str>,
    hot: &'static HotKeys,
    /// [`label_lock_names`] as it was when the acquire began: an ownership's gauge goes up and
    /// down in the same series even if the setting changes meanwhile.
    lock_label: bool,
}

impl Identity {
    pub(crate) fn new(kind: BackendKind, primitive: Primitive, lock: Arc<str>) -> Self {
        Identity {
            backend: kind.as_str(),
            primitive: primitive.as_str(),
            lock,
            hot: hot_keys(kind, primitive),
            lock_label: LOCK_NAMES.load(Ordering::Relaxed),
        }
    }

    fn labels(&self, extra: Option<(&'static str, &'static str)>) -> Vec<Label> {
        let mut labels = Vec::with_capacity(4);
        labels.push(Label::from_static_parts("backend", self.backend));
        labels.push(Label::from_static_parts("primitive", self.primitive));
        if let Some((k, v)) = extra {
            labels.push(Label::from_static_parts(k, v));
        }
        if self.lock_label {
            labels.push(Label::new("lock", self.lock.to_string()));
        }
        labels
    }

    /// The key of a metric on every acquire or release: built (and hashed) once per backend
    /// and primitive, so the hot path allocates nothing; with lock names on, built each time.
    fn key(
        &self,
        pick: impl Fn(&'static HotKeys) -> &'static Key,
        name: &'static str,
        extra: Option<(&'static str, &'static str)>,
    ) -> KeyRef {
        if self.lock_label {
            KeyRef::Owned(Key::from_parts(name, self.labels(extra)))
        } else {
            KeyRef::Static(pick(self.hot))
        }
    }
}

/// A metric key, precomputed or built for one use.
enum KeyRef {
    Static(&'static Key),
    Owned(Key),
}

impl KeyRef {
    fn get(&self) -> &Key {
        match self {
            KeyRef::Static(k) => k,
            KeyRef::Owned(k) => k,
        }
    }

    fn gauge(&self) -> Gauge {
        metrics::with_recorder(|r| r.register_gauge(self.get(), &METADATA))
    }

    fn histogram(&self) -> Histogram {
        metrics::with_recorder(|r| r.register_histogram(self.get(), &METADATA))
    }
}

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// The keys the kernel touches on every acquire and release, for one backend and primitive.
#[derive(Debug)]
struct HotKeys {
    waiting: Key,
    held: Key,
    /// By [`Outcome`], in its order.
    acquire: [Key; 3],
    hold: Key,
}

/// The hot keys of every (backend, primitive) seen so far: a few dozen at most, built once
/// each and kept for the life of the process.
static HOT: RwLock<Vec<(BackendKind, Primitive, &'static HotKeys)>> = RwLock::new(Vec::new());

fn hot_keys(kind: BackendKind, primitive: Primitive) -> &'static HotKeys {
    let find = |all: &[(BackendKind, Primitive, &'static HotKeys)]| {
        all.iter()
            .find(|(k, p, _)| *k == kind && *p == primitive)
            .map(|(_, _, h)| *h)
    };
    if let Some(h) = find(&HOT.read().unwrap_or_else(PoisonError::into_inner)) {
        return h;
    }
    let mut all = HOT.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(h) = find(&all) {
        return h;
    }
    let h: &'static HotKeys = Box::leak(Box::new(build_hot_keys(kind, primitive)));
    all.push((kind, primitive, h));
    h
}

fn build_hot_keys(kind: BackendKind, primitive: Primitive) -> HotKeys {
    let base = [
        Label::from_static_parts("backend", kind.as_str()),
        Label::from_static_parts("primitive", primitive.as_str()),
    ];
    let key = |name: &'static str, extra: Option<Label>| {
        let mut labels = base.to_vec();
        labels.extend(extra);
        Key::from_parts(name, labels)
    };
    let outcome = |o: Outcome| Some(Label::from_static_parts("outcome", o.as_str()));
    HotKeys {
        waiting: key(names::WAITING, None),
        held: key(names::HELD, None),
        acquire: [Outcome::Acquired, Outcome::TimedOut, Outcome::Error]
            .map(|o| key(names::ACQUIRE_DURATION, outcome(o))),
        hold: key(names::HOLD_DURATION, None),
    }
}

/// How an acquire ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    TimedOut,
    Error,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::TimedOut => "timed_out",
            Outcome::Error => "error",
        }
    }

    fn index(self) -> usize {
        match self {
            Outcome::Acquired => 0,
            Outcome::TimedOut => 1,
            Outcome::Error => 2,
        }
    }
}

/// An acquire under way: counted in `lockkit_waiting` until it is dropped.
pub(crate) struct Waiting<'a>(&'a Identity);

impl<'a> Waiting<'a> {
    pub(crate) fn start(id: &'a Identity) -> Self {
        id.key(|h| &h.waiting, names::WAITING, None)
            .gauge()
            .increment(1.0);
        Waiting(id)
    }

    /// The acquire ended after `took`.
    pub(crate) fn finish(self, outcome: Outcome, took: Duration) {
        self.0
            .key(
                |h| &h.acquire[outcome.index()],
                names::ACQUIRE_DURATION,
                Some(("outcome", outcome.as_str())),
            )
            .histogram()
            .record(took.as_secs_f64());
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0
            .key(|h| &h.waiting, names::WAITING, None)
            .gauge()
            .decrement(1.0);
    }
}

/// A new ownership is held.
pub(crate) fn held(id: &Identity) {
    id.key(|h| &h.held, names::HELD, None)
        .gauge()
        .increment(1.0);
}

/// An ownership ended (its release started, or it became another one) after `held_for`.
pub(crate) fn ended(id: &Identity, held_for: Duration) {
    id.key(|h| &h.held, names::HELD, None)
        .gauge()
        .decrement(1.0);
    id.key(|h| &h.hold, names::HOLD_DURATION, None)
        .histogram()
        .record(held_for.as_secs_f64());
}

/// A campaign won: this candidate leads in `term`.
pub(crate) fn elected(id: &Identity, term: u64) {
    counter!(names::LEADERSHIPS, id.labels(None)).increment(1);
    // Exact: terms stay below 2^53 (etcd revisions, ZooKeeper zxids, microsecond clocks).
    metrics::gauge!(names::LEADER_TERM, id.labels(None)).set(term as f64);
    tracing::info!(
        backend = id.backend,
        lock = %id.lock,
        primitive = id.primitive,
        token = term,
        "lockkit: elected"
    );
}

/// An observer saw the leader change.
pub(crate) fn leader_changed(id: &Identity) {
    counter!(names::LEADER_CHANGES, id.labels(None)).increment(1);
}

/// A release failed (the backend did not take it; the reaper goes on trying).
pub(crate) fn release_failed(id: &Identity) {
    counter!(names::RELEASE_ERRORS, id.labels(None)).increment(1);
}

/// A change of a guard's state that operators hear of.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Change {
    /// Held -> Suspect.
    Suspect,
    /// Suspect -> Held.
    Restored,
    /// -> Lost, for this reason.
    Lost(LostReason),
}

/// A guard's state changed, as the core first saw it.
pub(crate) fn state_changed(id: &Identity, token: u64, change: Change) {
    let (backend, primitive, lock) = (id.backend, id.primitive, &*id.lock);
    match change {
        Change::Suspect => {
            counter!(names::SUSPECT, id.labels(None)).increment(1);
            tracing::info!(
                backend,
                primitive,
                lock,
                token,
                state = "suspect",
                "lockkit: lost contact with the backend; the lock may still be held"
            );
        }
        Change::Restored => tracing::info!(
            backend,
            primitive,
            lock,
            token,
            state = "held",
            "lockkit: contact with the backend restored"
        ),
        Change::Lost(reason) => {
            counter!(names::LOST, id.labels(Some(("reason", reason.as_str())))).increment(1);
            let closed = reason == LostReason::Closed;
            let reason = reason.as_str();
            macro_rules! lost {
                ($level:ident) => {
                    tracing::$level!(
                        backend,
                        primitive,
                        lock,
                        token,
                        state = "lost",
                        reason,
                        "lockkit: lock lost"
                    )
                };
            }
            // A handle closed on purpose is no cause for alarm.
            if closed {
                lost!(debug);
            } else {
                lost!(warn);
            }
        }
    }
}

/// An operator force-unlocked `lock` (`unlocked`: it was held): an audit event and a count.
pub(crate) fn force_unlocked(id: &Identity, unlocked: bool) {
    if unlocked {
        counter!(names::FORCE_UNLOCKS, id.labels(None)).increment(1);
    }
    tracing::warn!(
        backend = id.backend,
        primitive = id.primitive,
        lock = &*id.lock,
        unlocked,
        "lockkit: force_unlock"
    );
}

/// A backend renewed a lease (or a session) in `took`; `ok`: it was renewed.
pub fn renewal(backend: &'static str, ok: bool, took: Duration) {
    let result = if ok { "ok" } else { "failed" };
    counter!(names::RENEWALS, "backend" => backend, "result" => result).increment(1);
    histogram!(names::RENEWAL_DURATION, "backend" => backend, "result" => result)
        .record(took.as_secs_f64());
}

/// A backend re-established a connection, replaced a session or failed over to another
/// endpoint. (Redis counts its pub/sub connection coming back and Sentinel failovers; its
/// command connection reconnects inside redis-rs, unseen.)
pub fn reconnected(backend: &'static str) {
    counter!(names::RECONNECTS, "backend" => backend).increment(1);
}
