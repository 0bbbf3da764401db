//! What an election's observers see: [`Leader`] (the leader's value and term) and
//! [`LeaderChanges`], the stream of every change of leader, fed by a backend through its
//! [`LeaderFeed`](crate::spi::LeaderFeed).

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::backoff::Backoff;
use crate::error::{ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::telemetry::{self, Identity};

/// An election's leader as the backend shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Leader {
    value: Vec<u8>,
    term: FencingToken,
}

impl Leader {
    /// A leader proclaiming `value` in `term`.
    pub fn new(value: impl Into<Vec<u8>>, term: FencingToken) -> Self {
        Leader {
            value: value.into(),
            term,
        }
    }

    /// What the leader proclaims (its campaign value, or its last `proclaim`).
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The value as UTF-8, lossily.
    pub fn value_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.value)
    }

    /// The term: a fencing token, strictly increasing per election name across every change of
    /// leader. Pass it to what the leader writes to, as with a lock's token.
    pub fn term(&self) -> FencingToken {
        self.term
    }
}

impl fmt::Debug for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("value", &self.value_str())
            .field("term", &self.term.0)
            .finish()
    }
}

/// The changes of an election's leader, in order, from
/// [`Election::observe`](crate::Election::observe): first the leader at the time of the call
/// (`None`: no leader), then each change (a new leader, a new value, `None` when nobody leads),
/// with no polling; the last item is always the state as it is. Every change the backend sees
/// is sent (mem://, etcd: every one); ZooKeeper watches fire once, a Redis observer reads the
/// leader again on each announcement, and a `file://` observer looks every 50 ms (an OS lock
/// freed by a dead process sends no event: the one exception to "no polling"), so changes that
/// come and go between two reads there are seen as one. An `Err` item says the backend could not follow
/// for a while (a watch restarted) and may have missed changes; the item after it is the state
/// as it then is. The stream ends (`None` from [`next`](Self::next)) when its handle is closed.
///
/// Also a [`futures::Stream`].
pub struct LeaderChanges {
    rx: mpsc::UnboundedReceiver<Result<Option<Leader>>>,
    /// Counts the changes after the first state (`lockkit_leader_changes_total`), once the
    /// core knows whose they are.
    counter: Option<(Identity, bool)>,
    /// What feeds it (a backend's watch), kept alive as long as the stream.
    _source: Option<Box<dyn Any + Send + Sync>>,
}

impl fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderChanges").finish_non_exhaustive()
    }
}

impl LeaderChanges {
    /// The stream, keeping `source` (what feeds it) alive as long as itself.
    pub fn keeping(mut self, source: impl Any + Send + Sync) -> Self {
        self._source = Some(Box::new(source));
        self
    }

    /// Counts the changes it yields after the first state, for `id`.
    pub(crate) fn counted(mut self, id: Identity) -> Self {
        self.counter = Some((id, false));
        self
    }

    fn count(&mut self, item: &Option<Result<Option<Leader>>>) {
        let Some((id, first_seen)) = &mut self.counter else {
            return;
        };
        match item {
            Some(Ok(_)) if std::mem::replace(first_seen, true) => telemetry::leader_changed(id),
            // After an error the state is sent again whatever it is: it starts afresh.
            Some(Err(_)) => *first_seen = false,
            _ => {}
        }
    }

    /// The next change.
    pub async fn next(&mut self) -> Option<Result<Option<Leader>>> {
        let item = self.rx.recv().await;
        self.count(&item);
        item
    }
}

impl futures::Stream for LeaderChanges {
    type Item = Result<Option<Leader>>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = std::task::ready!(self.rx.poll_recv(cx));
        self.count(&item);
        Poll::Ready(item)
    }
}

/// A backend's end of one [`LeaderChanges`]: it sends each state it sees; a state equal to the
/// last one sent is not repeated.
#[derive(Debug)]
pub struct LeaderFeed {
    tx: mpsc::UnboundedSender<Result<Option<Leader>>>,
    last: Option<Option<Leader>>,
}

impl LeaderFeed {
    /// A feed and the stream it feeds.
    pub fn channel() -> (LeaderFeed, LeaderChanges) {
        let (tx, rx) = mpsc::unbounded_channel();
        let changes = LeaderChanges {
            rx,
            counter: None,
            _source: None,
        };
        (LeaderFeed { tx, last: None }, changes)
    }

    /// Sends the state `leader` unless it is the one sent last; `false` once nobody listens.
    pub fn send(&mut self, leader: Option<Leader>) -> bool {
        if self.last.as_ref() == Some(&leader) {
            return !self.tx.is_closed();
        }
        self.last = Some(leader.clone());
        self.tx.send(Ok(leader)).is_ok()
    }

    /// Sends an error: the backend could not follow; the next state is sent whatever it is.
    pub fn fail(&mut self, e: crate::Error) -> bool {
        self.last = None;
        self.tx.send(Err(e)).is_ok()
    }

    /// Whether nobody listens any more.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// A future that resolves once nobody listens any more (a backend's observer task ends
    /// then); it does not borrow the feed.
    pub fn on_close(&self) -> impl Future<Output = ()> + Send + 'static {
        let tx = self.tx.clone();
        async move { tx.closed().await }
    }

    /// Runs an election observer on this feed: `look` after `look`, until nobody listens,
    /// `stop` resolves (the handle closed), or a look fails with
    /// [`Closed`](ErrorKind::Closed). A look that fails otherwise is sent as an error (so the
    /// next state is sent whatever it is), and the next one comes after a pause on
    /// [`Backoff::WATCH`]; the pauses grow while looks keep failing. The one observer loop:
    /// a backend supplies only its look.
    pub async fn follow<L: Look>(mut self, mut look: L, stop: impl Future<Output = ()> + Send) {
        let gone = self.on_close();
        tokio::pin!(gone, stop);
        let mut retry = Backoff::WATCH.start();
        loop {
            let step = tokio::select! {
                step = look.look(&mut self) => step,
                () = &mut gone => return,
                () = &mut stop => return,
            };
            if self.is_closed() {
                return;
            }
            match step {
                Ok(()) => retry.reset(),
                Err(e) if e.kind() == ErrorKind::Closed => return,
                Err(e) => {
                    if !self.fail(e) {
                        return;
                    }
                    tokio::select! {
                        () = retry.wait() => {}
                        () = &mut gone => return,
                        () = &mut stop => return,
                    }
                }
            }
        }
    }
}

/// One look of a backend's election observer, run by [`LeaderFeed::follow`].
#[async_trait]
pub trait Look: Send {
    /// Sends the leader as it stands now ([`LeaderFeed::send`]; an unchanged one is not sent
    /// again), then returns once it may have changed (a watch fired, an announcement came, a
    /// lease ran out, a poll's period passed). An error says the look failed: the observer
    /// is told, and looks again after a pause.
    async fn look(&mut self, feed: &mut LeaderFeed) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::Error;

    /// Answers from a script, one answer per look, then waits for ever.
    struct Scripted(std::collections::VecDeque<Result<Option<Leader>>>);

    #[async_trait]
    impl Look for Scripted {
        async fn look(&mut self, feed: &mut LeaderFeed) -> Result<()> {
            match self.0.pop_front() {
                Some(Ok(leader)) => {
                    feed.send(leader);
                    Ok(())
                }
                Some(Err(e)) => Err(e),
                None => std::future::pending().await,
            }
        }
    }

    fn leader(term: u64) -> Option<Leader> {
        Some(Leader::new("a", FencingToken(term)))
    }

    #[tokio::test(start_paused = true)]
    async fn follow_tells_failures_resends_after_them_and_ends_when_stopped() {
        let away = || Err(Error::new(ErrorKind::Connection, "away"));
        let script =
            Scripted(vec![Ok(leader(1)), Ok(leader(1)), away(), away(), Ok(leader(1))].into());
        let (feed, mut changes) = LeaderFeed::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(feed.follow(script, async move {
            let _ = stop_rx.await;
        }));
        let started = tokio::time::Instant::now();
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(changes.next().await.unwrap().map(|l| l.map(|l| l.term().0)));
        }
        assert!(matches!(seen[0], Ok(Some(1))), "{seen:?}");
        assert!(seen[1].is_err() && seen[2].is_err(), "{seen:?}");
        // After a failure the unchanged leader is sent again.
        assert!(matches!(seen[3], Ok(Some(1))), "{seen:?}");
        assert!(
            started.elapsed() >= Duration::from_millis(25),
            "failed looks are paced"
        );
        stop_tx.send(()).unwrap();
        task.await.unwrap();
        assert!(changes.next().await.is_none(), "the feed is gone");
    }

    #[tokio::test(start_paused = true)]
    async fn follow_ends_when_nobody_listens_or_a_look_finds_the_handle_closed() {
        let (feed, changes) = LeaderFeed::channel();
        drop(changes);
        let script = Scripted(vec![].into());
        feed.follow(script, std::future::pending()).await;

        let (feed, mut changes) = LeaderFeed::channel();
        let closed = Err(Error::new(ErrorKind::Closed, "closed"));
        feed.follow(Scripted(vec![closed].into()), std::future::pending())
            .await;
        assert!(changes.next().await.is_none(), "closed is not sent");
    }
}
