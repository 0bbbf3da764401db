//! Wake-ups over pub/sub: one subscription per lock channel per client, shared by its local
//! waiters and dropped when the last one leaves (after a short linger, so a client that waits
//! again at once does not pay SUBSCRIBE + UNSUBSCRIBE per acquisition); one local waiter woken
//! per message. A message naming a waiter (`<owner>`, or `<owner> <token>` for a hand-off of the
//! lock itself) reaches that waiter only. Each client also hears on its holder channel which of
//! its ownerships a force-unlock took (`<owner> <key>`, [`Subscriptions::hear_holder`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use lockkit_core::{Backoff, Result};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;

use crate::conn::PubSubConn;
use crate::error;

/// How long a subscription outlives its last waiter.
pub(crate) const LINGER: Duration = Duration::from_millis(500);

/// How long connect waits for the holder channel's subscribe before leaving it to the keeper
/// task.
const HOLDER_WAIT: Duration = Duration::from_millis(500);

/// Where a client's holder channel stands on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HolderState {
    /// To be subscribed (not yet, or a try failed).
    Wanted,
    Subscribed,
    /// Refused for good (logged): a force-unlock is heard at the next renewal.
    Refused,
}

/// Where messages for a waiter land: a wake-up, and the token of a lock handed to it.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    notify: Notify,
    grant: Mutex<Option<u64>>,
    /// Counts the messages that woke this slot: a wake-up is passed on once per message by
    /// each waiter ([`Subscription::pass_on`]).
    messages: AtomicU64,
}

impl Slot {
    fn wake(&self, grant: Option<u64>) {
        if grant.is_some() {
            *self.grant.lock().unwrap_or_else(|e| e.into_inner()) = grant;
        }
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.notify.notify_one();
    }

    /// Wakes every waiter of this slot (and the next one to wait on it).
    fn wake_every(&self) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.notify.notify_waiters();
        self.notify.notify_one();
    }
}

#[derive(Debug)]
struct Entry {
    waiters: usize,
    /// Waiters that ever joined (so a linger task can tell whether the channel stayed idle).
    joins: u64,
    /// A linger task is watching this channel.
    lingering: bool,
    /// Woken by `0` messages, one local waiter per message.
    any: Arc<Slot>,
    /// Waiters woken only by a message carrying their owner id.
    named: HashMap<String, Arc<Slot>>,
}

impl Entry {
    fn wake_all(&self) {
        self.any.wake_every();
        for slot in self.named.values() {
            slot.wake(None);
        }
    }
}

/// What a client does with an `<owner> <key>` message on its holder channel: a force-unlock took
/// that ownership.
pub(crate) type Taken = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// A client's holder channel (see [`crate::keys::holder_channels`]) and what to do with each
/// message on it.
#[derive(Clone)]
pub(crate) struct Holder {
    pub(crate) channel: String,
    pub(crate) taken: Taken,
}

/// The subscriptions of one backend.
pub(crate) struct Subscriptions {
    conn: PubSubConn,
    entries: Mutex<HashMap<String, Entry>>,
    /// The client's holder channel, subscribed for the client's life (no waiter keeps it).
    holder: OnceLock<Holder>,
    /// Where the holder channel stands on the server.
    holder_state: Mutex<HolderState>,
    /// The keeper task's side: told to subscribe the holder channel again.
    route: Pushes,
    /// The channels subscribed on the server. Changes are made under this lock and decided from
    /// `entries` at that moment, so a late unsubscribe never undoes a newer subscribe.
    server: tokio::sync::Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Subscriptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriptions")
            .field("channels", &self.lock().len())
            .finish()
    }
}

/// One local waiter's share of a channel subscription.
#[derive(Debug)]
pub(crate) struct Subscription {
    subs: Arc<Subscriptions>,
    channel: String,
    slot: Arc<Slot>,
    /// The owner id a named waiter is woken by.
    name: Option<String>,
}

impl Subscription {
    /// Resolves when a message for this channel picked this waiter.
    pub(crate) async fn notified(&self) {
        self.slot.notify.notified().await
    }

    /// The token of a lock handed to this (named) waiter, if a message said so.
    pub(crate) fn take_grant(&self) -> Option<u64> {
        self.slot
            .grant
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Passes a wake-up on to another local waiter (this one took it but did not use it).
    pub(crate) fn forward(&self) {
        self.slot.notify.notify_one();
    }

    /// Passes on a wake-up this waiter took and found no use for, unless it passed one on since
    /// the last message (`passed`: the message count it last passed on at). Waiters are woken
    /// in the order they wait, so a wake-up goes round every waiter once and stops, instead of
    /// going back and forth between two that cannot use it.
    pub(crate) fn pass_on(&self, passed: &mut u64) {
        let messages = self.slot.messages.load(Ordering::Relaxed);
        if *passed != messages {
            *passed = messages;
            self.slot.notify.notify_one();
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let rt = tokio::runtime::Handle::try_current().ok();
        let linger = {
            let mut entries = self.subs.lock();
            let Some(e) = entries.get_mut(&self.channel) else {
                return;
            };
            if let Some(name) = &self.name {
                e.named.remove(name);
            }
            e.waiters -= 1;
            if e.waiters > 0 {
                return;
            }
            if rt.is_none() {
                entries.remove(&self.channel);
                return;
            }
            // One linger task per channel at a time; it re-arms itself while waiters come and go.
            (!std::mem::replace(&mut e.lingering, true)).then_some(e.joins)
        };
        if let (Some(joins), Some(rt)) = (linger, rt) {
            let (subs, channel) = (self.subs.clone(), std::mem::take(&mut self.channel));
            rt.spawn(linger_then_unsubscribe(subs, channel, joins));
        }
    }
}

/// Unsubscribes from `channel` once it has had no local waiter for a whole [`LINGER`]: a client
/// that waits on a lock again and again (it holds it in between) keeps its subscription.
async fn linger_then_unsubscribe(subs: Arc<Subscriptions>, channel: String, mut seen: u64) {
    loop {
        tokio::time::sleep(LINGER).await;
        let idle = {
            let mut entries = subs.lock();
            let Some(e) = entries.get_mut(&channel) else {
                return;
            };
            if e.waiters > 0 {
                e.lingering = false;
                return;
            }
            // Nobody now; but did anyone come and go since the last look?
            let idle = seen == e.joins;
            seen = e.joins;
            if idle {
                entries.remove(&channel);
            }
            idle
        };
        if idle {
            let _ = subs.sync(&channel).await;
            return;
        }
    }
}

impl Subscriptions {
    /// A subscription manager over `conn`, a RESP3 connection whose messages go to `pushes`.
    pub(crate) fn new(conn: PubSubConn, pushes: &Pushes) -> Arc<Self> {
        let subs = Arc::new(Subscriptions {
            conn,
            entries: Mutex::new(HashMap::new()),
            holder: OnceLock::new(),
            holder_state: Mutex::new(HolderState::Wanted),
            route: pushes.clone(),
            server: tokio::sync::Mutex::new(HashSet::new()),
        });
        let _ = pushes.0.subs.set(Arc::downgrade(&subs));
        subs
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins the channel's subscription, subscribing on the server if this is its first waiter.
    /// With a `name`, the waiter is woken only by messages carrying that name, not by `0`.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the registration; the unsubscribe follows when it is dropped.
    async fn subscribe_as(
        self: &Arc<Self>,
        channel: &str,
        name: Option<&str>,
    ) -> Result<Subscription> {
        let sub = self.register(channel, name);
        self.sync(channel).await?;
        Ok(sub)
    }

    /// Subscribes to the client's holder channel for as long as the client lives (and after
    /// every reconnect, as every channel): each message there, `<owner> <key>`, goes to
    /// `holder.taken`. The first try waits [`HOLDER_WAIT`] at most; one that fails or takes
    /// longer is left to the keeper task ([`keep_connected`]), which tries again on the
    /// [`Backoff::WATCH`] schedule until the server takes it or refuses it for good (an ACL
    /// without the channel, a server without pub/sub: logged once). Meanwhile, and for a
    /// message lost with a connection, the next renewal finds the ownership gone.
    pub(crate) async fn hear_holder(&self, holder: Holder) {
        let _ = self.holder.set(holder);
        if self.subscribe_holder(Some(HOLDER_WAIT)).await == HolderState::Wanted {
            self.route.0.holder_wanted.notify_one();
        }
    }

    /// Subscribes the holder channel if it is wanted and not yet subscribed (within `wait`, if
    /// given); where it stands after.
    async fn subscribe_holder(&self, wait: Option<Duration>) -> HolderState {
        let state = *self.holder_state.lock().unwrap_or_else(|e| e.into_inner());
        // No holder channel set: nothing is wanted (the keeper does not retry for nothing).
        let Some(h) = self.holder.get() else {
            return HolderState::Subscribed;
        };
        if state != HolderState::Wanted {
            return state;
        }
        let subscribe = self.conn.subscribe(&h.channel);
        let answer = match wait {
            Some(wait) => tokio::time::timeout(wait, subscribe).await.ok(),
            None => Some(subscribe.await),
        };
        let state = match answer {
            Some(Ok(())) => HolderState::Subscribed,
            None => HolderState::Wanted,
            Some(Err(e)) => {
                let e = error::map(e, "SUBSCRIBE");
                if e.is_retryable() {
                    tracing::debug!(backend = "redis", channel = %h.channel, error = %e, "lockkit: holder channel not subscribed yet");
                    HolderState::Wanted
                } else {
                    tracing::warn!(backend = "redis", channel = %h.channel, error = %e, "lockkit: the holder channel was refused; a force-unlock is heard at the next renewal");
                    HolderState::Refused
                }
            }
        };
        *self.holder_state.lock().unwrap_or_else(|e| e.into_inner()) = state;
        state
    }

    /// A subscription to `channel` for one named listener, once the server has it, that every
    /// `!` message and every reconnect wake: an election's observer or leader.
    pub(crate) async fn follow(
        self: &Arc<Self>,
        channel: &str,
        name: &str,
    ) -> Result<Subscription> {
        self.subscribe_as(channel, Some(name)).await
    }

    /// One wait of a waiter on `channel` (as `name`, see [`subscribe_as`](Self::subscribe_as)).
    /// With no subscription in `sub` yet, it subscribes and answers `None` at once: a message
    /// published before the subscription was not seen, so the waiter looks again. Otherwise it
    /// listens until a message (`Some(true)`) or `wake` (`Some(false)`).
    pub(crate) async fn listen(
        self: &Arc<Self>,
        sub: &mut Option<Subscription>,
        channel: &str,
        name: Option<&str>,
        wake: tokio::time::Instant,
    ) -> Result<Option<bool>> {
        let Some(s) = sub.as_ref() else {
            *sub = Some(self.subscribe_as(channel, name).await?);
            return Ok(None);
        };
        Ok(Some(
            tokio::time::timeout_at(wake, s.notified()).await.is_ok(),
        ))
    }

    /// Joins the channel's subscription as waiter `name` if the server is already subscribed
    /// to it (no round trip); `None` otherwise. A message published from now on reaches the
    /// waiter, so it can queue first and listen after.
    pub(crate) fn join_active(self: &Arc<Self>, channel: &str, name: &str) -> Option<Subscription> {
        // Held while registering, so no unsubscribe can be decided meanwhile.
        let server = self.server.try_lock().ok()?;
        server
            .contains(channel)
            .then(|| self.register(channel, Some(name)))
    }

    fn register(self: &Arc<Self>, channel: &str, name: Option<&str>) -> Subscription {
        let slot = {
            let mut entries = self.lock();
            let e = entries.entry(channel.to_string()).or_insert_with(|| Entry {
                waiters: 0,
                joins: 0,
                lingering: false,
                any: Arc::default(),
                named: HashMap::new(),
            });
            e.waiters += 1;
            e.joins += 1;
            match name {
                Some(n) => e.named.entry(n.to_string()).or_default().clone(),
                None => e.any.clone(),
            }
        };
        Subscription {
            subs: self.clone(),
            channel: channel.to_string(),
            slot,
            name: name.map(str::to_string),
        }
    }

    /// Makes the server's subscription to `channel` match whether local waiters want it.
    async fn sync(&self, channel: &str) -> Result<()> {
        let mut server = self.server.lock().await;
        let wanted = self.lock().contains_key(channel);
        let have = server.contains(channel);
        if wanted && !have {
            self.conn
                .subscribe(channel)
                .await
                .map_err(|e| error::map(e, "SUBSCRIBE"))?;
            server.insert(channel.to_string());
        } else if !wanted && have {
            server.remove(channel);
            // A failure leaves a stray subscription whose messages nobody reads: harmless.
            let _ = self.conn.unsubscribe(channel).await;
        }
        Ok(())
    }

    /// How many channels have local waiters (for tests and inspection).
    pub(crate) fn active_channels(&self) -> usize {
        self.lock().values().filter(|e| e.waiters > 0).count()
    }
}

/// The push sender of every pub/sub connection of one backend: delivers each message from the
/// connection's reader straight to the waiters it is for, with no task in between (a hand-off
/// reaches its waiter one task switch after the bytes arrive), and reports a lost connection.
#[derive(Clone, Default)]
pub(crate) struct Pushes(Arc<Route>);

#[derive(Default)]
struct Route {
    subs: OnceLock<Weak<Subscriptions>>,
    /// Signalled when the pub/sub connection dropped.
    disconnected: Notify,
    /// Signalled when the holder channel's first subscribe did not get through.
    holder_wanted: Notify,
}

impl Pushes {
    /// The subscriptions, while their backend lives.
    fn subs(&self) -> Option<Arc<Subscriptions>> {
        self.0.subs.get().and_then(Weak::upgrade)
    }
}

/// Brings the pub/sub connection back after it dropped, with its subscriptions, however long
/// the server is away. redis-rs reconnects a few times at once and then only when a command is
/// sent, and none is while the subscriptions stand, so this task pings until the connection
/// answers (the reconnect resubscribes), then wakes every waiter once more: a release or a
/// hand-off published while we were away was lost. It also subscribes the holder channel
/// until the server has it (after a failed first try, and after a reconnect that found it not
/// subscribed). Runs until aborted or the backend is gone.
pub(crate) async fn keep_connected(pushes: Pushes) {
    loop {
        let mut lost = tokio::select! {
            _ = pushes.0.disconnected.notified() => true,
            _ = pushes.0.holder_wanted.notified() => false,
        };
        let mut retry = Backoff::WATCH.start();
        loop {
            let Some(subs) = pushes.subs() else {
                return;
            };
            if lost {
                if let Err(e) = subs.conn.ping().await {
                    drop(subs);
                    tracing::debug!(backend = "redis", error = %e, "lockkit: pub/sub connection not back yet");
                    retry.wait().await;
                    continue;
                }
                lockkit_core::telemetry::reconnected("redis");
                subs.wake_everyone();
                lost = false;
            }
            if subs.subscribe_holder(None).await != HolderState::Wanted {
                break;
            }
            drop(subs);
            retry.wait().await;
        }
    }
}

impl crate::push::PushSink for Pushes {
    /// Wakes every local waiter of every channel (messages may have been missed, as after a
    /// Sentinel failover).
    fn wake_everyone(&self) {
        if let Some(subs) = self.subs() {
            subs.wake_everyone();
        }
    }
}

impl redis::aio::AsyncPushSender for Pushes {
    /// Wakes the waiters `push` is for. A lost connection wakes every waiter (messages may be
    /// lost with it) and is reported to [`keep_connected`].
    fn send(&self, push: PushInfo) -> std::result::Result<(), redis::aio::SendError> {
        if push.kind == PushKind::Disconnection {
            self.0.disconnected.notify_one();
        }
        if let Some(subs) = self.subs() {
            subs.route(&push);
        }
        Ok(())
    }
}

impl Subscriptions {
    /// Wakes every local waiter of every channel: each tries again (and takes up a lock handed
    /// to it whose message it missed).
    fn wake_everyone(&self) {
        for e in self.lock().values() {
            e.wake_all();
        }
    }

    fn route(&self, push: &PushInfo) {
        if push.kind == PushKind::Disconnection {
            self.wake_everyone();
            return;
        }
        if push.kind != PushKind::Message {
            return;
        }
        let Some(Value::BulkString(channel)) = push.data.first() else {
            return;
        };
        let Ok(channel) = std::str::from_utf8(channel) else {
            return;
        };
        let payload = match push.data.get(1) {
            Some(Value::BulkString(p)) => p.as_slice(),
            _ => b"0",
        };
        if let Some(h) = self.holder.get().filter(|h| h.channel == channel) {
            let taken = std::str::from_utf8(payload).ok();
            if let Some((owner, key)) = taken.and_then(|p| p.split_once(' ')) {
                (h.taken)(owner, key);
            }
            return;
        }
        let entries = self.lock();
        let Some(e) = entries.get(channel) else {
            return;
        };
        match payload {
            b"0" => e.any.wake(None),
            // An election's leader changed: every observer looks again.
            b"!" => e.wake_all(),
            // Any other number is Redisson's (redisson_compat): its read-write lock's `1` and
            // its semaphore's free-permit count wake every local waiter. Owner ids are never
            // numeric.
            p if p.iter().all(u8::is_ascii_digit) => e.any.wake_every(),
            p => {
                let Ok(p) = std::str::from_utf8(p) else {
                    return;
                };
                // `<owner> <token>`: the lock was handed to that waiter; `<owner>`: its turn.
                let (name, grant) = match p.split_once(' ') {
                    Some((name, token)) => (name, token.parse().ok()),
                    None => (p, None),
                };
                if let Some(slot) = e.named.get(name) {
                    slot.wake(grant);
                }
            }
        }
    }
}
