//! Wake-ups over pub/sub: one subscription per lock channel per client, shared by its local
//! waiters and dropped when the last one leaves (after a short linger, so a client that waits
//! again at once does not pay SUBSCRIBE + UNSUBSCRIBE per acquisition); one local waiter woken
//! per message.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lockkit_core::Result;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, Notify};

use crate::conn::PubSubConn;
use crate::error;

/// How long a subscription outlives its last waiter.
pub(crate) const LINGER: Duration = Duration::from_millis(500);

#[derive(Debug)]
struct Entry {
    waiters: usize,
    /// Woken by `0` messages, one local waiter per message.
    notify: Arc<Notify>,
    /// Fair waiters, woken by a message carrying their owner id.
    named: HashMap<String, Arc<Notify>>,
}

/// The subscriptions of one backend.
pub(crate) struct Subscriptions {
    conn: PubSubConn,
    entries: Mutex<HashMap<String, Entry>>,
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
    notify: Arc<Notify>,
    /// The owner id a fair waiter is woken by.
    name: Option<String>,
}

impl Subscription {
    /// Resolves when a release message for this channel picked this waiter.
    pub(crate) async fn notified(&self) {
        self.notify.notified().await
    }

    /// Passes a wake-up on to another local waiter (this one took it but did not use it).
    pub(crate) fn forward(&self) {
        self.notify.notify_one();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let rt = tokio::runtime::Handle::try_current().ok();
        let last = {
            let mut entries = self.subs.lock();
            if let (Some(name), Some(e)) = (&self.name, entries.get_mut(&self.channel)) {
                e.named.remove(name);
            }
            match entries.get_mut(&self.channel) {
                Some(e) if e.waiters > 1 => {
                    e.waiters -= 1;
                    false
                }
                Some(e) => {
                    e.waiters = 0;
                    if rt.is_none() {
                        entries.remove(&self.channel);
                    }
                    true
                }
                None => false,
            }
        };
        if let (true, Some(rt)) = (last, rt) {
            let (subs, channel) = (self.subs.clone(), std::mem::take(&mut self.channel));
            rt.spawn(async move {
                tokio::time::sleep(LINGER).await;
                let idle = {
                    let mut entries = subs.lock();
                    let idle = entries.get(&channel).is_some_and(|e| e.waiters == 0);
                    if idle {
                        entries.remove(&channel);
                    }
                    idle
                };
                if idle {
                    let _ = subs.sync(&channel).await;
                }
            });
        }
    }
}

impl Subscriptions {
    /// A subscription manager over `conn`, a RESP3 connection whose pushes go to `pushes`.
    /// Returns it and the dispatcher future (run it as a background task).
    pub(crate) fn new(
        conn: PubSubConn,
        pushes: mpsc::UnboundedReceiver<PushInfo>,
    ) -> (
        Arc<Self>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let subs = Arc::new(Subscriptions {
            conn,
            entries: Mutex::new(HashMap::new()),
            server: tokio::sync::Mutex::new(HashSet::new()),
        });
        let dispatch = dispatch(Arc::downgrade(&subs), pushes);
        (subs, dispatch)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins the channel's subscription, subscribing on the server if this is its first waiter.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the registration; the unsubscribe follows when it is dropped.
    pub(crate) async fn subscribe(self: &Arc<Self>, channel: &str) -> Result<Subscription> {
        self.subscribe_as(channel, None).await
    }

    /// Like [`subscribe`](Self::subscribe); with a `name`, the waiter is woken only by messages
    /// carrying that name (fair waiters), not by `0`.
    pub(crate) async fn subscribe_as(
        self: &Arc<Self>,
        channel: &str,
        name: Option<&str>,
    ) -> Result<Subscription> {
        let notify = {
            let mut entries = self.lock();
            let e = entries.entry(channel.to_string()).or_insert_with(|| Entry {
                waiters: 0,
                notify: Arc::new(Notify::new()),
                named: HashMap::new(),
            });
            e.waiters += 1;
            match name {
                Some(n) => e
                    .named
                    .entry(n.to_string())
                    .or_insert_with(|| Arc::new(Notify::new()))
                    .clone(),
                None => e.notify.clone(),
            }
        };
        let sub = Subscription {
            subs: self.clone(),
            channel: channel.to_string(),
            notify,
            name: name.map(str::to_string),
        };
        self.sync(channel).await?;
        Ok(sub)
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

    /// Wakes one local non-fair waiter of `channel`, if any: a mutex release made here hands
    /// the lock's wake-up to this client's own waiters without a message, since a release only
    /// publishes when a busy acquire raised the lock's wake flag.
    pub(crate) fn wake_local(&self, channel: &str) {
        if let Some(e) = self.lock().get(channel).filter(|e| e.waiters > 0) {
            e.notify.notify_one();
        }
    }

    /// How many channels have local waiters (for tests and inspection).
    pub(crate) fn active_channels(&self) -> usize {
        self.lock().values().filter(|e| e.waiters > 0).count()
    }
}

async fn dispatch(
    subs: std::sync::Weak<Subscriptions>,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
) {
    while let Some(push) = pushes.recv().await {
        if push.kind != PushKind::Message {
            continue;
        }
        let Some(Value::BulkString(channel)) = push.data.first() else {
            continue;
        };
        let Some(subs) = subs.upgrade() else {
            return;
        };
        let Ok(channel) = std::str::from_utf8(channel) else {
            continue;
        };
        let payload = match push.data.get(1) {
            Some(Value::BulkString(p)) => p.as_slice(),
            _ => b"0",
        };
        // Any other number is Redisson's (redisson_compat): its read-write lock's `1` and its
        // semaphore's free-permit count wake every local waiter. Owner ids are never numeric.
        let wake_all = payload != b"0" && payload.iter().all(u8::is_ascii_digit);
        let notify = subs.lock().get(channel).and_then(|e| {
            if payload == b"0" || wake_all {
                Some(e.notify.clone())
            } else {
                let name = std::str::from_utf8(payload).ok()?;
                e.named.get(name).cloned()
            }
        });
        if let Some(n) = notify {
            if wake_all {
                n.notify_waiters();
            }
            n.notify_one();
        }
    }
}
