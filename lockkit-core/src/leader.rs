//! What an election's observers see: [`Leader`] (the leader's value and term) and
//! [`LeaderChanges`], the stream of every change of leader, fed by a backend through its
//! [`LeaderFeed`](crate::spi::LeaderFeed).

use std::any::Any;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc;

use crate::error::Result;
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
    pub fn on_close(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let tx = self.tx.clone();
        async move { tx.closed().await }
    }
}
