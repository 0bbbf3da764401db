//! Our nodes of one ownership, and the one task per session that watches them for deletion.
//!
//! A held lock's deletion watch is one small future in its session's [`drive`] task (a
//! `FuturesUnordered`), not a task of its own: while it waits it keeps only what waiting needs
//! (the ZooKeeper watcher), and no client. A process holding 10 000 locks keeps 10 000 of them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use lockkit_core::spi::StateCell;
use lockkit_core::{Backoff, LostReason, Retry};
use tokio::sync::mpsc;
use tokio::time::Instant;
use zookeeper_client as zk;

/// Our nodes of one ownership: what its guard, its session's registry of guards and its
/// deletion watches share.
#[derive(Debug)]
pub(crate) struct Nodes {
    /// The session that created them: they live as long as it does.
    pub session: zk::SessionId,
    pub paths: Box<[String]>,
    /// Set once their deletion is ours (release, downgrade, close): no loss to report.
    pub released: AtomicBool,
}

/// A deletion watch to keep: node `node` of `nodes`, whose loss `state` hears of.
#[derive(Debug)]
pub(crate) struct LossWatch {
    pub nodes: Arc<Nodes>,
    pub node: usize,
    pub state: StateCell,
}

/// How long a guard holds before its node gets a deletion watch. Most holds are shorter, and they
/// then cost no extra request; a node deleted within this window is still reported (the watch
/// request finds it gone), at most this much later. Session loss is reported by the session task
/// at once either way.
const WATCH_AFTER: Duration = Duration::from_millis(100);

/// Runs the deletion watches sent on `watches` until the sender is gone. `client_of` gives the
/// client of a session while it is the current one (`None` once it ended or the handle
/// closed).
pub(crate) async fn drive<C>(mut watches: mpsc::UnboundedReceiver<LossWatch>, client_of: C)
where
    C: Fn(zk::SessionId) -> Option<zk::Client>,
{
    // Watches not yet due, in the order (and so the instants) they came.
    let mut due: VecDeque<(Instant, LossWatch)> = VecDeque::new();
    let mut running = FuturesUnordered::new();
    loop {
        let next = due.front().map(|(at, _)| *at);
        tokio::select! {
            w = watches.recv() => match w {
                Some(w) => due.push_back((Instant::now() + WATCH_AFTER, w)),
                None => return,
            },
            () = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                let now = Instant::now();
                while due.front().is_some_and(|(at, _)| *at <= now) {
                    if let Some((_, w)) = due.pop_front() {
                        if !w.nodes.released.load(Ordering::Acquire) {
                            running.push(watch(w, &client_of));
                        }
                    }
                }
            }
            Some(()) = running.next(), if !running.is_empty() => {}
        }
        if due.is_empty() && due.capacity() > 1024 {
            // After a burst of acquisitions.
            due.shrink_to(64);
        }
    }
}

/// Marks the state Lost when our node is deleted by someone else, until it is released.
async fn watch<C>(w: LossWatch, client_of: &C)
where
    C: Fn(zk::SessionId) -> Option<zk::Client>,
{
    // Boxed, and only once a watch could not be set: every held lock keeps this future.
    let mut retry: Option<Box<Retry>> = None;
    loop {
        if w.nodes.released.load(Ordering::Acquire) {
            return;
        }
        let Some(client) = client_of(w.nodes.session) else {
            // Our session ended (or the handle closed, which told its guards Closed before it
            // let the client go): our ephemeral nodes went with it. The session task reports
            // it too, but only to the guards it tracked when it saw the end.
            if !w.nodes.released.load(Ordering::Acquire) {
                w.state.mark_lost(LostReason::SessionExpired);
            }
            return;
        };
        // Boxed while it runs (it holds the client); the future keeps only what waiting needs.
        let lost = match Box::pin(set_watch(client, &w.nodes.paths[w.node])).await {
            Ok(Watch::Set(watcher)) => loss_of(watcher.changed().await),
            Ok(Watch::Lost(why)) => Some(why),
            Err(e) => {
                // Connection trouble: the session task reports Suspect; try again.
                tracing::debug!(
                    backend = "zk",
                    key = %w.nodes.paths[w.node],
                    error = %e,
                    "lockkit: deletion watch not set yet"
                );
                let retry = retry.get_or_insert_with(|| Box::new(Backoff::WATCH.start()));
                Box::pin(retry.wait()).await;
                continue;
            }
        };
        if let Some(why) = lost {
            // (The core reports the loss.)
            if !w.nodes.released.load(Ordering::Acquire) {
                w.state.mark_lost(why);
            }
            return;
        }
    }
}

enum Watch {
    Set(zk::OneshotWatcher),
    Lost(LostReason),
}

/// Sets a watch on our node at `path` with `client` (dropped once the watch is set), or says
/// why the node is already lost.
async fn set_watch(client: zk::Client, path: &str) -> Result<Watch, zk::Error> {
    match client.get_and_watch_data(path).await {
        Ok((_, stat, _)) if stat.ephemeral_owner != client.session_id().0 => {
            Ok(Watch::Lost(LostReason::Deleted))
        }
        Ok((_, _, watcher)) => Ok(Watch::Set(watcher)),
        Err(zk::Error::NoNode) => Ok(Watch::Lost(LostReason::Deleted)),
        Err(zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed) => {
            Ok(Watch::Lost(LostReason::SessionExpired))
        }
        Err(_) if client.state().is_terminated() => Ok(Watch::Lost(LostReason::SessionExpired)),
        Err(e) => Err(e),
    }
}

/// Why a watch event means our node is lost; `None` to watch again.
fn loss_of(event: zk::WatchedEvent) -> Option<LostReason> {
    match event.event_type {
        zk::EventType::NodeDeleted => Some(LostReason::Deleted),
        zk::EventType::Session if event.session_state.is_terminated() => {
            Some(LostReason::SessionExpired)
        }
        _ => None,
    }
}
