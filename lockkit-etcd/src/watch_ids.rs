//! Whose watch ids a key stream (`key_stream.rs`) speaks in. etcd 3.4 and later take the id a
//! client chooses in its create, and answer creates in order. etcd's gRPC proxy numbers watches
//! itself, answers a create it refuses at once and one it accepts later, and ignores a cancel of
//! an id it does not know. So until the first create is answered (and for good behind a proxy),
//! one create is in flight at a time: its answer is unambiguous, its id maps to ours, and a
//! cancel asked for while it is in flight is sent, under the proxy's id, once it is answered.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// The ids of one life of a stream.
#[derive(Debug, Default)]
pub(crate) struct WatchIds {
    /// Whether the server takes our ids; `None` until a create was answered.
    taken: Option<bool>,
    /// Creates sent and not yet answered, oldest first, with when they were sent.
    asked: VecDeque<(i64, Instant)>,
    /// Creates waiting for the one in flight to be answered.
    held: VecDeque<i64>,
    /// The server's id of each of our watches whose id it did not take, and ours of each of its.
    theirs: HashMap<i64, i64>,
    ours: HashMap<i64, i64>,
    /// Watches cancelled while their create was in flight.
    cancel_answered: HashSet<i64>,
}

/// The answer to a create.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Created {
    /// Our id of the watch; `None` when nothing was asked (an answer we cannot place).
    pub id: Option<i64>,
    /// The server's id of a watch cancelled while its create was in flight: cancel it now.
    pub cancel: Option<i64>,
}

impl WatchIds {
    /// Whether a create may be sent now (else it is held, see [`WatchIds::hold`]).
    pub(crate) fn may_send(&self) -> bool {
        self.taken == Some(true) || self.asked.is_empty()
    }

    /// The create of `id` was sent.
    pub(crate) fn sent(&mut self, id: i64) {
        self.asked.push_back((id, Instant::now()));
    }

    /// Whether a create has waited longer than `limit` for its answer: the stream is stuck
    /// (others' events may still flow, so its silence check does not see it).
    pub(crate) fn overdue(&self, limit: Duration) -> bool {
        self.asked
            .front()
            .is_some_and(|(_, at)| at.elapsed() > limit)
    }

    /// The create of `id` waits for the one in flight.
    pub(crate) fn hold(&mut self, id: i64) {
        self.held.push_back(id);
    }

    /// The next held create to send, once one may be sent.
    pub(crate) fn next_held(&mut self) -> Option<i64> {
        if self.may_send() {
            self.held.pop_front()
        } else {
            None
        }
    }

    /// Whether the server numbers watches itself (a proxy, which answers no progress request).
    pub(crate) fn proxied(&self) -> bool {
        self.taken == Some(false)
    }

    /// Whether no create is in flight or held.
    pub(crate) fn settled(&self) -> bool {
        self.asked.is_empty() && self.held.is_empty()
    }

    /// Our watch `id` is cancelled: the server's id to send a cancel for now, if any (a held
    /// create is just dropped; one in flight is cancelled once answered).
    pub(crate) fn cancel(&mut self, id: i64) -> Option<i64> {
        if let Some(at) = self.held.iter().position(|h| *h == id) {
            self.held.remove(at);
            return None;
        }
        if self.taken != Some(true) && self.asked.iter().any(|(a, _)| *a == id) {
            self.cancel_answered.insert(id);
            return None;
        }
        Some(self.theirs.get(&id).copied().unwrap_or(id))
    }

    /// A create's answer, with the server's id `got` (-1 and `refused` when it refused it).
    pub(crate) fn created(&mut self, got: i64, refused: bool) -> Created {
        let Some((ours, _)) = self.asked.pop_front() else {
            return Created {
                id: None,
                cancel: None,
            };
        };
        let cancelled = self.cancel_answered.remove(&ours);
        if refused {
            return Created {
                id: Some(ours),
                cancel: None,
            };
        }
        if got != ours {
            self.taken = Some(false);
            self.theirs.insert(ours, got);
            self.ours.insert(got, ours);
        } else if self.taken.is_none() {
            self.taken = Some(true);
        }
        Created {
            id: Some(ours),
            cancel: cancelled.then_some(got),
        }
    }

    /// Our id of the server's watch `got` on a message that is not a create's answer; a watch
    /// cancelled for good (`ended`) is forgotten.
    pub(crate) fn route(&mut self, got: i64, ended: bool) -> i64 {
        let Some(ours) = self.ours.get(&got).copied() else {
            return got;
        };
        if ended {
            self.ours.remove(&got);
            self.theirs.remove(&ours);
        }
        ours
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Behind a proxy: one create at a time, its id mapped, a refusal placed right.
    #[test]
    fn behind_a_proxy_creates_go_one_at_a_time_and_map() {
        let mut ids = WatchIds::default();
        assert!(ids.may_send());
        ids.sent(5);
        assert!(!ids.may_send(), "nothing else until the first is answered");
        ids.hold(6);
        ids.hold(7);
        assert_eq!(ids.next_held(), None);
        assert_eq!(
            ids.created(0, false),
            Created {
                id: Some(5),
                cancel: None
            }
        );
        assert!(ids.proxied());
        assert_eq!(ids.next_held(), Some(6));
        ids.sent(6);
        assert_eq!(ids.next_held(), None, "still one at a time");
        // 6 is refused: the answer is 6's, whatever comes after.
        assert_eq!(ids.created(-1, true).id, Some(6));
        assert_eq!(ids.next_held(), Some(7));
        ids.sent(7);
        assert_eq!(ids.created(1, false).id, Some(7));
        assert_eq!(ids.route(0, false), 5);
        assert_eq!(ids.route(1, false), 7);
        assert_eq!(ids.cancel(5), Some(0));
        assert_eq!(ids.route(0, true), 5);
        assert_eq!(ids.route(0, false), 0, "forgotten once cancelled");
        assert!(ids.settled());
        assert!(!ids.overdue(Duration::ZERO));
        ids.sent(9);
        std::thread::sleep(Duration::from_millis(2));
        assert!(
            ids.overdue(Duration::from_millis(1)),
            "an unanswered create"
        );
    }

    /// A cancel while the create is in flight waits for its answer, and goes out under the
    /// server's id; a held create is just dropped.
    #[test]
    fn a_cancel_before_the_answer_goes_out_under_the_servers_id() {
        let mut ids = WatchIds::default();
        ids.sent(3);
        ids.hold(4);
        assert_eq!(ids.cancel(3), None);
        assert_eq!(ids.cancel(4), None);
        assert_eq!(
            ids.created(0, false),
            Created {
                id: Some(3),
                cancel: Some(0)
            }
        );
        assert_eq!(ids.next_held(), None, "4 was dropped");
        // Refused while cancelled: nothing to cancel.
        ids.sent(8);
        assert_eq!(ids.cancel(8), None);
        assert_eq!(ids.created(-1, true).cancel, None);
    }

    /// etcd itself: once it took an id, creates and cancels go out at once.
    #[test]
    fn etcd_takes_our_ids_and_creates_pipeline() {
        let mut ids = WatchIds::default();
        ids.sent(1);
        assert!(!ids.may_send());
        assert_eq!(ids.created(1, false).id, Some(1));
        assert!(!ids.proxied());
        ids.sent(2);
        assert!(ids.may_send());
        ids.sent(3);
        assert_eq!(ids.cancel(3), Some(3));
        assert_eq!(ids.created(2, false).id, Some(2));
        assert_eq!(ids.created(3, false).id, Some(3));
        assert_eq!(ids.route(2, false), 2);
    }
}
