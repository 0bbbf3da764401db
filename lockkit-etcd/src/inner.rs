//! What one `Locks` handle on etcd shares: the connection pool, the sessions, the per-name
//! watches and the mutexes' key stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{GetOptions, SortOrder, SortTarget};
use lockkit_core::spi::{Reaper, SessionPool};
use lockkit_core::{encode_name, Error, ErrorKind, Result};

use crate::client::Pool;
use crate::key_stream::KeyStream;
use crate::sem_size::is_size_key;
use crate::session::Session;
use crate::strays::Strays;
use crate::watch::{Kind, NameWatch};

/// A name's watch and when it was last asked for.
type WatchEntry = (Arc<NameWatch>, std::time::Instant);

/// Keys read per page when listing locks.
const LIST_PAGE: i64 = 1000;

/// The end of the range of keys starting with `prefix` (etcd's `prefix + 1`).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0] // every key
}

/// How long an unused name's watch is kept.
pub(crate) const WATCH_LINGER: Duration = Duration::from_secs(60);

/// The most session leases (distinct watchdog lease lengths) one handle keeps.
const MAX_SESSIONS: usize = 16;

/// Everything one `Locks` handle shares: the pool, the sessions and the per-name watches.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) pool: Arc<Pool>,
    pub(crate) root: String,
    /// The handle's default lease: its main session's TTL.
    pub(crate) lease: Duration,
    /// One session per watchdog lease length asked for (the default one first).
    sessions: SessionPool<Session>,
    /// Every name's watch, kept for a while after its last use (see `name_watch`).
    /// (Keyed by the watch's own prefix, shared.)
    names: Mutex<HashMap<Arc<[u8]>, WatchEntry>>,
    /// The one stream of every mutex name's watches, started by the first.
    keys: Mutex<Option<Arc<KeyStream>>>,
    closed: AtomicBool,
    /// Deletes the server did not take at once, retried until done.
    pub(crate) reaper: Reaper,
    /// The session leases, whose keys no acquisition owns are deleted (see `strays.rs`).
    strays: Strays,
}

impl Inner {
    pub(crate) fn new(pool: Pool, root: String, lease: Duration) -> Arc<Inner> {
        let reaper = Reaper::default();
        Arc::new(Inner {
            pool: Arc::new(pool),
            root,
            lease,
            sessions: SessionPool::new("session leases", MAX_SESSIONS),
            names: Mutex::new(HashMap::new()),
            keys: Mutex::new(None),
            closed: AtomicBool::new(false),
            strays: Strays::new(reaper.clone()),
            reaper,
        })
    }

    /// The names of the locks of `kind` whose encoded name starts with `encoded` and that have a
    /// key (a holder or a waiter), read keys-only in pages of [`LIST_PAGE`].
    pub(crate) async fn names(&self, kind: Kind, encoded: &str) -> Result<Vec<String>> {
        let base = self.prefix(kind, "");
        // `prefix(kind, "")` ends in `//`: the base is everything before the empty name.
        let base = base[..base.len() - 1].to_vec();
        let mut start = [base.as_slice(), encoded.as_bytes()].concat();
        let end = prefix_end(&start);
        let mut names: Vec<String> = Vec::new();
        loop {
            let (from, to) = (start.clone(), end.clone());
            let mut resp = self
                .pool
                .run("range", true, move |mut c| {
                    let (from, to) = (from.clone(), to.clone());
                    async move {
                        c.get(
                            from,
                            Some(
                                GetOptions::new()
                                    .with_range(to)
                                    .with_keys_only()
                                    .with_limit(LIST_PAGE),
                            ),
                        )
                        .await
                    }
                })
                .await?;
            let more = resp.more();
            let kvs = resp.take_kvs();
            for kv in &kvs {
                let Some(rest) = kv.key().strip_prefix(base.as_slice()) else {
                    continue;
                };
                let Ok(rest) = std::str::from_utf8(rest) else {
                    continue;
                };
                // A mutex range also sees the `%rw/` and `%sem/` keys: a name segment never
                // starts with `%` followed by a letter other than hex.
                let Some((enc, _)) = rest.split_once('/') else {
                    continue;
                };
                // A semaphore's size key is no holder or waiter.
                if kind == Kind::Semaphore && is_size_key(kv.key()) {
                    continue;
                }
                if let Some(name) = lockkit_core::decode_name(enc) {
                    if names.last() != Some(&name) {
                        names.push(name);
                    }
                }
            }
            match kvs.last() {
                Some(last) if more => start = [last.key(), &[0]].concat(),
                _ => break,
            }
        }
        Ok(names)
    }

    /// The key prefix of a lock (ends with `/`). A mutex uses `<root>/<encoded name>/`, the
    /// prefix Go's `concurrency.NewMutex(session, "<root>/<encoded name>")` uses; RW locks and
    /// semaphores use `<root>/%rw/…` and `<root>/%sem/…`, elections `<root>/%election/…`
    /// (Go's `concurrency.NewElection(session, "<root>/%election/<encoded name>")`), which no
    /// encoded name can equal
    /// (`encode_name` never leaves a `%` without two hex digits).
    pub(crate) fn prefix(&self, kind: Kind, name: &str) -> Vec<u8> {
        let enc = encode_name(name);
        match kind {
            Kind::Mutex => format!("{}/{enc}/", self.root),
            Kind::RwLock => format!("{}/%rw/{enc}/", self.root),
            Kind::Semaphore => format!("{}/%sem/{enc}/", self.root),
            Kind::Election => format!("{}/%election/{enc}/", self.root),
        }
        .into_bytes()
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::new(
                ErrorKind::Closed,
                "this etcd Locks handle was closed",
            ))
        } else {
            Ok(())
        }
    }

    /// The live session of TTL `ttl`, granting a new lease when there is none or the last one
    /// was lost. A TTL etcd cannot keep exactly is an `InvalidArgument`.
    pub(crate) async fn session(&self, ttl: Duration) -> Result<Arc<Session>> {
        self.check_open()?;
        // A session past its guards' deadline is not handed out any more, though its keepalive
        // may not have noticed yet: that task still marks it dead and revokes its lease (or
        // renews it for the guards it has), and it stays one of our leases while it lives.
        let got = self
            .sessions
            .get(ttl, || Session::grant(&self.pool, ttl, &self.strays))
            .await?;
        if got.replaced {
            // The last lease of this TTL was lost: a new session, as a reconnect is for others.
            lockkit_core::telemetry::reconnected("etcd");
        }
        Ok(got.session)
    }

    /// Forgets `dead` (after the server said its lease is gone).
    pub(crate) async fn drop_session(&self, dead: &Arc<Session>) {
        dead.retire("the server does not know the lease");
        self.strays.disown(dead.id());
        self.sessions.forget(dead).await;
    }

    /// The watch of `prefix`, created (and awaited until in place) if this client has none.
    ///
    /// A watch lives while a handle, an acquire or a guard of its name uses it, and
    /// [`WATCH_LINGER`] after that, so that code creating a fresh handle for every acquire does
    /// not create a watcher on every acquire either.
    pub(crate) async fn name_watch(&self, prefix: &[u8], kind: Kind) -> Result<Arc<NameWatch>> {
        self.check_open()?;
        let nw = {
            let now = std::time::Instant::now();
            let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
            // Checked again under the lock `close` takes the watches under: no watch (nor key
            // stream) starts after they were stopped.
            self.check_open()?;
            let nw = match names.get_mut(prefix) {
                Some((nw, used)) => {
                    *used = now;
                    nw.clone()
                }
                None => {
                    let keys = || {
                        let mut ks = self.keys.lock().unwrap_or_else(|e| e.into_inner());
                        ks.get_or_insert_with(|| {
                            KeyStream::start(self.pool.clone(), self.strays.clone())
                        })
                        .clone()
                    };
                    let prefix: Arc<[u8]> = prefix.into();
                    let nw = NameWatch::start(
                        self.pool.clone(),
                        prefix.clone(),
                        kind,
                        self.strays.clone(),
                        keys,
                    );
                    names.insert(prefix, (nw.clone(), now));
                    nw
                }
            };
            names.retain(|_, (nw, used)| {
                let keep = Arc::strong_count(nw) > 1 || now.duration_since(*used) < WATCH_LINGER;
                if !keep {
                    nw.stop();
                }
                keep
            });
            nw
        };
        nw.ready(self.pool.timeout()).await?;
        Ok(nw)
    }

    /// Stops everything: the watches end, every session lease is revoked.
    pub(crate) async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        self.stop_watches();
        let sessions = self.sessions.drain().await;
        let mut first_error = None;
        for s in sessions {
            if let Err(e) = s.revoke(&self.pool).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Nothing uses this handle any more: stop the watches now, and revoke the session leases
    /// in the background (or, outside a runtime, just stop keeping them alive).
    pub(crate) fn shut_down(self: Arc<Self>) {
        self.closed.store(true, Ordering::Release);
        self.stop_watches();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = self.close().await;
            });
        } else if let Some(sessions) = self.sessions.try_drain() {
            for s in sessions {
                s.retire("the Locks handle was dropped");
            }
        }
    }

    fn stop_watches(&self) {
        let names = std::mem::take(&mut *self.names.lock().unwrap_or_else(|e| e.into_inner()));
        for (nw, _) in names.values() {
            nw.stop();
        }
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(ks) = keys {
            ks.stop();
        }
    }

    /// The keys on `prefix`, oldest first.
    pub(crate) async fn keys_by_create(
        &self,
        prefix: &[u8],
        limit: i64,
    ) -> Result<Vec<etcd_client::KeyValue>> {
        Ok(self.range_by_create(prefix, limit).await?.take_kvs())
    }

    /// The oldest key on `prefix`, and the revision of the (linearizable) read.
    pub(crate) async fn first_by_create(
        &self,
        prefix: &[u8],
    ) -> Result<(Option<etcd_client::KeyValue>, i64)> {
        let mut resp = self.range_by_create(prefix, 1).await?;
        let rev = resp.take_header().map(|h| h.revision()).ok_or_else(|| {
            Error::new(
                ErrorKind::Connection,
                "an etcd range answer without a header",
            )
        })?;
        Ok((resp.take_kvs().into_iter().next(), rev))
    }

    async fn range_by_create(&self, prefix: &[u8], limit: i64) -> Result<etcd_client::GetResponse> {
        let p = prefix.to_vec();
        self.pool
            .run("range", true, move |mut c| {
                let p = p.clone();
                async move {
                    c.get(
                        p,
                        Some(
                            GetOptions::new()
                                .with_prefix()
                                .with_sort(SortTarget::Create, SortOrder::Ascend)
                                .with_limit(limit),
                        ),
                    )
                    .await
                }
            })
            .await
    }
}

/// The name's watch, set up on first use and kept by the handle.
pub(crate) async fn watch_of(
    inner: &Inner,
    cell: &tokio::sync::OnceCell<Arc<NameWatch>>,
    prefix: &[u8],
    kind: Kind,
) -> Result<Arc<NameWatch>> {
    inner.check_open()?;
    cell.get_or_try_init(|| inner.name_watch(prefix, kind))
        .await
        .cloned()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;

    /// A session whose deadline passed (its guards read Lost) while its keepalive has not yet
    /// noticed is never handed to a new acquire: a new lease is granted instead.
    #[tokio::test]
    async fn a_session_whose_guards_read_lost_is_not_reused() {
        let Some(url) = lockkit_testing::server_url("etcd") else {
            return;
        };
        let endpoint = url.replacen("etcd://", "http://", 1);
        let timeout = Duration::from_secs(2);
        let pool = Pool::connect(&[endpoint], None, None, timeout, timeout)
            .await
            .unwrap();
        let ttl = Duration::from_secs(2);
        let inner = Inner::new(pool, lockkit_testing::unique_name("sessions"), ttl);
        let first = inner.session(ttl).await.unwrap();
        assert!(Arc::ptr_eq(&first, &inner.session(ttl).await.unwrap()));
        // As if the last keepalive were a margin late: the guards' deadline has passed, the
        // server's has not, and the keepalive task has not marked the session dead yet.
        first.clock().set_deadline(Some(Instant::now()));
        let next = inner.session(ttl).await.unwrap();
        assert_ne!(
            next.id(),
            first.id(),
            "a session whose guards read Lost was handed to a new acquire"
        );
        assert!(!first.is_alive());
        // Out of the map, but one of the handle's leases (a late create on it is a stray of
        // ours) for as long as a guard may keep it; no longer once it is dropped.
        let first_id = first.id();
        assert!(inner.strays.owns(first_id) && inner.strays.owns(next.id()));
        first.retire("test over");
        drop(first);
        assert!(
            !inner.strays.owns(first_id),
            "a dropped session stays owned"
        );
        inner.close().await.unwrap();
    }
}
