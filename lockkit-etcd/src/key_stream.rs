//! The one watch stream of a client that carries every mutex name's narrow watches (what they
//! are and why is in `key_watch.rs`). Its task sends the registry's creates and cancels and
//! routes what comes back. There is no stream while nothing is registered: the first create
//! opens one. Like a name's prefix watch (`watch.rs`), a stream that goes silent is asked for
//! progress and given up, a failover of the pool moves it, and each new life creates every
//! registration again.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use etcd_client::{Client, EventType, GetOptions, WatchOptions, WatchStream};
use lockkit_core::{Backoff, Error, ErrorKind, Result};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::Pool;
use crate::key_watch::{Cmd, KeyWatches};
use crate::strays::Strays;
use crate::stream::{self, cancelled, Heard, Listen};
use crate::watch_ids::WatchIds;

/// A client's key stream: the registry of its mutex names' narrow watches and the task that
/// keeps them on one gRPC stream.
#[derive(Debug)]
pub(crate) struct KeyStream {
    keys: Mutex<KeyWatches>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for KeyStream {
    fn drop(&mut self) {
        self.abort();
    }
}

impl KeyStream {
    /// Starts the stream's task; stray keys of the handle's sessions (see `strays.rs`) go to
    /// `strays`.
    pub(crate) fn start(pool: Arc<Pool>, strays: Strays) -> Arc<KeyStream> {
        let (cmds, rx) = mpsc::unbounded_channel();
        let ks = Arc::new(KeyStream {
            keys: Mutex::new(KeyWatches::new(cmds)),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(run(Arc::downgrade(&ks), pool, strays, rx));
        *ks.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        ks
    }

    pub(crate) fn keys(&self) -> MutexGuard<'_, KeyWatches> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn abort(&self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            t.abort();
        }
    }

    /// The handle closed: the stream ends, holders turn Lost, waiters are woken.
    pub(crate) fn stop(&self) {
        self.abort();
        self.keys().stop();
    }
}

async fn run(
    ks: Weak<KeyStream>,
    pool: Arc<Pool>,
    strays: Strays,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
) {
    let mut retry = Backoff::WATCH.start();
    loop {
        // No stream while nothing is to be watched (a life that found nothing to create ends at
        // once, and would spin): the next create opens one.
        loop {
            let empty = match ks.upgrade() {
                Some(k) => k.keys().is_idle(),
                None => return,
            };
            if !empty {
                break;
            }
            match cmds.recv().await {
                None => return,
                // Its watch is gone (else the registry would not be idle).
                Some(Cmd::Retry(id)) => match ks.upgrade() {
                    Some(k) => k.keys().read_done(id),
                    None => return,
                },
                Some(_) => {}
            }
        }
        let ended = life(&ks, &pool, &strays, &mut cmds).await;
        let Some(k) = ks.upgrade() else { return };
        if !matches!(ended, Ok(Ended::Idle)) {
            k.keys().restart();
        }
        drop(k);
        match ended {
            Ok(_) => retry.reset(),
            Err(e) => {
                tracing::debug!(
                    backend = "etcd",
                    error = %e,
                    "lockkit: the lock key watch stream broke; restarting it"
                );
                retry.wait().await;
            }
        }
    }
}

/// How a life of the stream ended well.
enum Ended {
    /// Nothing was left to watch: no watch broke.
    Idle,
    /// The pool moved, or the registry went away.
    Gone,
}

/// One life of the stream: what it has sent, on which endpoint.
struct Life<'a> {
    pool: &'a Arc<Pool>,
    strays: &'a Strays,
    idx: usize,
    client: Client,
    /// Opened by the first create.
    stream: Option<WatchStream>,
    /// Watches created (or asked for, or held back) on this stream.
    live: HashSet<i64>,
    /// Whose ids the stream speaks in, and the creates in flight.
    ids: WatchIds,
    /// The watch that probes a silent stream, while it is asked for.
    probe: Option<i64>,
}

impl Life<'_> {
    /// Sends the create of watch `id`, unless it is in place on this stream or was cancelled.
    /// A stray watch's keys are read first: the strays among them are reaped, and the watch
    /// starts after that read.
    /// `retried`: the create comes from its retry (its read before failed); others wait for
    /// that retry.
    async fn create(&mut self, ks: &KeyStream, id: i64, retried: bool) -> Result<()> {
        if self.live.contains(&id) || (!retried && ks.keys().is_retrying(id)) {
            return Ok(());
        }
        if let Err(e) = self.read_first(ks, id).await {
            // Only this watch waits: the others on the stream are not its read's business.
            tracing::debug!(
                backend = "etcd",
                error = %e,
                "lockkit: a read before a lock key watch failed; trying it again"
            );
            ks.keys().create_later(id);
            return Ok(());
        }
        ks.keys().read_done(id);
        self.live.insert(id);
        if self.ids.may_send() {
            self.send_create(ks, id).await
        } else {
            self.ids.hold(id);
            Ok(())
        }
    }

    async fn send_create(&mut self, ks: &KeyStream, id: i64) -> Result<()> {
        let Some((key, opts)) = ks.keys().create_request(id) else {
            self.live.remove(&id);
            return Ok(());
        };
        self.ids.sent(id);
        self.send(key, opts).await
    }

    /// Sends the held creates that may go now.
    async fn send_held(&mut self, ks: &KeyStream) -> Result<()> {
        while let Some(id) = self.ids.next_held() {
            self.send_create(ks, id).await?;
        }
        Ok(())
    }

    /// Behind a gRPC proxy, a silent stream: a watch that hears nothing, created and cancelled
    /// again, shows the stream is alive. Not while a create is in flight (its answer will
    /// show it) or a probe is.
    async fn probe(&mut self, ks: &KeyStream) -> Result<()> {
        if self.probe.is_some() || !self.ids.settled() {
            return Ok(());
        }
        let Some((id, key)) = ks.keys().probe() else {
            return Ok(());
        };
        let opts = stream::probe(id);
        self.live.insert(id);
        self.ids.sent(id);
        self.probe = Some(id);
        self.send(key, opts).await
    }

    /// What watch `id` reads before it is created: a stray watch's keys (the strays among them
    /// are reaped, and the watch starts after that read), and an own key whose watch's start
    /// was compacted away (see `KeyWatches::own_to_check`).
    async fn read_first(&mut self, ks: &KeyStream, id: i64) -> Result<()> {
        let range = ks.keys().stray_range(id);
        if let Some((start, end, scope)) = range {
            let mut resp = self
                .pool
                .run("range", true, move |mut c| {
                    let (start, end) = (start.clone(), end.clone());
                    async move { c.get(start, Some(GetOptions::new().with_range(end))).await }
                })
                .await?;
            let rev = resp.take_header().map(|h| h.revision()).ok_or_else(|| {
                Error::new(
                    ErrorKind::Connection,
                    "an etcd range answer without a header",
                )
            })?;
            for kv in resp.kvs() {
                if let Some((key, created)) = self.strays.stray(&scope.name, &scope.slots, kv) {
                    self.strays.reap(self.pool, key, created);
                }
            }
            ks.keys().start_at(id, rev + 1);
        }
        let check = ks.keys().own_to_check(id);
        if let Some((key, rev)) = check {
            let mut resp = self
                .pool
                .run("read a lock key", true, move |mut c| {
                    let key = key.clone();
                    async move { c.get(key, None).await }
                })
                .await?;
            let at = resp.take_header().map(|h| h.revision()).ok_or_else(|| {
                Error::new(
                    ErrorKind::Connection,
                    "an etcd range answer without a header",
                )
            })?;
            let there = resp
                .kvs()
                .first()
                .is_some_and(|kv| kv.create_revision() == rev);
            ks.keys().own_checked(id, there, at);
        }
        Ok(())
    }

    async fn send(&mut self, key: Vec<u8>, opts: WatchOptions) -> Result<()> {
        match self.stream.as_mut() {
            Some(stream) => stream::create(stream, key, opts, self.pool.timeout()).await,
            None => {
                let opened = stream::open(self.pool, self.idx, &mut self.client, key, opts);
                self.stream = Some(opened.await?);
                Ok(())
            }
        }
    }

    async fn cancel(&mut self, id: i64) -> Result<()> {
        if !self.live.remove(&id) {
            return Ok(());
        }
        match self.ids.cancel(id) {
            Some(server_id) => self.send_cancel(server_id).await,
            None => Ok(()),
        }
    }

    /// Sends a cancel of the server's watch `server_id`.
    async fn send_cancel(&mut self, server_id: i64) -> Result<()> {
        match self.stream.as_mut() {
            Some(stream) => stream::cancel(stream, server_id, self.pool.timeout()).await,
            None => Ok(()),
        }
    }
}

/// One life of the stream: every registration created, then the registry's creates and
/// cancels sent and what comes back routed, until the stream ends.
async fn life(
    ks: &Weak<KeyStream>,
    pool: &Arc<Pool>,
    strays: &Strays,
    cmds: &mut mpsc::UnboundedReceiver<Cmd>,
) -> Result<Ended> {
    // Subscribed first, so a failover during the setup is seen too.
    let mut moves = pool.moves();
    moves.mark_unchanged();
    let (idx, client) = match pool.current_watcher().await {
        Ok(c) => c,
        Err(e) => {
            pool.failed(pool.current().0);
            return Err(e);
        }
    };
    // The login whose token the stream carries (noted before it opens).
    let login = pool.watcher_login(idx);
    let mut life = Life {
        pool,
        strays,
        idx,
        client,
        stream: None,
        live: HashSet::new(),
        ids: WatchIds::default(),
        probe: None,
    };
    {
        let Some(k) = ks.upgrade() else {
            return Ok(Ended::Gone);
        };
        let ids = k.keys().ids();
        for id in ids {
            life.create(&k, id, false).await?;
        }
    }
    let mut listen = Listen::new(pool, idx, moves);
    loop {
        let idle = life.live.is_empty();
        listen.idle(idle);
        // Every watch was cancelled (or never sent): the stream closes, and the next create
        // opens one.
        if idle && life.ids.settled() && ks.upgrade().is_none_or(|k| k.keys().is_idle()) {
            return Ok(Ended::Idle);
        }
        let heard = match life.stream.as_mut() {
            Some(stream) => listen.next(stream, Some(cmds)).await?,
            // Nothing sent yet (the reads before the creates are tried again later): the next
            // create opens the stream.
            None => cmds.recv().await.map_or(Heard::Moved, Heard::Command),
        };
        let Some(k) = ks.upgrade() else {
            return Ok(Ended::Gone);
        };
        let r = match heard {
            Heard::Moved => return Ok(Ended::Gone),
            Heard::Command(Cmd::Create(id)) => {
                life.create(&k, id, false).await?;
                continue;
            }
            Heard::Command(Cmd::Retry(id)) => {
                life.create(&k, id, true).await?;
                continue;
            }
            Heard::Command(Cmd::Cancel(id)) => {
                life.cancel(id).await?;
                continue;
            }
            Heard::Quiet => {
                life.probe(&k).await?;
                continue;
            }
            Heard::Message(r) => r,
        };
        if life.ids.overdue(pool.timeout() * 2) {
            pool.failed(idx);
            return Err(Error::new(
                ErrorKind::Timeout,
                "a lock key watch's create was not answered",
            ));
        }
        let mut id = r.watch_id();
        if r.created() {
            let refused = id == -1 && r.canceled();
            let answer = life.ids.created(id, refused);
            if life.ids.proxied() {
                // A gRPC proxy (which answers no progress request).
                listen.probe();
            }
            if let Some(server_id) = answer.cancel {
                life.send_cancel(server_id).await?;
            }
            life.send_held(&k).await?;
            match answer.id {
                Some(ours) => id = ours,
                None if r.canceled() => {
                    return Err(stream::refusal(pool, idx, login, r.cancel_reason()).await)
                }
                None => continue,
            }
            if answer.cancel.is_some() || (refused && !life.live.contains(&id)) {
                // Cancelled while its create was in flight.
                continue;
            }
            if life.probe == Some(id) {
                life.probe = None;
                if refused {
                    life.live.remove(&id);
                } else {
                    life.cancel(id).await?;
                }
                continue;
            }
        } else {
            // A compacted watch keeps its id until we cancel it.
            id = life
                .ids
                .route(id, r.canceled() && r.compact_revision() <= 0);
        }
        if id <= 0 {
            // A progress report, or a refusal of a create we cannot place.
            if r.canceled() {
                return Err(stream::refusal(pool, idx, login, r.cancel_reason()).await);
            }
            continue;
        }
        // A stream whose token lapsed is opened again once logged in.
        if r.canceled() {
            if let Some(e) = stream::lapsed(pool, idx, login, r.cancel_reason()).await {
                return Err(e);
            }
        }
        let mut found = Vec::new();
        {
            let mut keys = k.keys();
            if r.canceled() {
                let reason = r.cancel_reason();
                let refused = stream::refused(reason);
                if refused {
                    tracing::debug!(
                        backend = "etcd",
                        reason,
                        "lockkit: etcd refused a lock key watch"
                    );
                }
                if keys.cancelled(id, r.compact_revision(), refused) {
                    return Err(cancelled(reason));
                }
                if r.compact_revision() <= 0 {
                    life.live.remove(&id);
                }
                continue;
            }
            if r.created() {
                keys.created(id, r.header().map(|h| h.revision()));
            }
            for ev in r.events() {
                let deleted = ev.event_type() == EventType::Delete;
                let rev = ev.kv().map_or(0, |kv| kv.mod_revision());
                let Some(scope) = keys.event(id, deleted, rev) else {
                    continue;
                };
                if let Some(kv) = ev.kv() {
                    found.extend(strays.stray(&scope.name, &scope.slots, kv));
                }
            }
        }
        for (key, rev) in found {
            strays.reap(pool, key, rev);
        }
    }
}
