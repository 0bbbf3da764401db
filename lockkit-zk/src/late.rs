//! Creates whose reply was lost, looked for again for a while: the ensemble may apply one late
//! (held up behind a partitioned follower, say) after the acquire that sent it has given up, or
//! has taken the node its protected prefix found. Such a node sits on our live session, which
//! the heartbeat keeps alive, so without this every other client would queue behind it for as
//! long as the session lives. The heartbeat deletes it (see [`LateCreates::sweep`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lockkit_core::Result;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::ops::{delete_node, find_protected};

/// How long after the lost reply a late node is looked for.
pub(crate) const LOOK_FOR: Duration = Duration::from_secs(600);

/// How many creates are looked for at once; the oldest is forgotten first.
const MOST: usize = 64;

/// One create whose reply was lost.
#[derive(Debug, Clone)]
struct Unsure {
    id: u64,
    /// The session that sent it: its nodes die with it.
    session: i64,
    dir: String,
    prefix: String,
    /// Its caller may still take a node carrying the prefix: not swept yet.
    pending: bool,
    /// The node carrying the prefix that its caller took (its own to delete).
    kept: Option<String>,
    until: Instant,
}

/// The creates of one [`Session`](crate::session::Session) whose reply was lost.
#[derive(Debug, Default)]
pub(crate) struct LateCreates {
    unsure: Mutex<(u64, VecDeque<Unsure>)>,
}

/// A remembered create whose caller has not yet said which node it took; once it has (or is
/// dropped: it took none), the sweep deletes every other node carrying the prefix.
pub(crate) struct Pending {
    late: Arc<LateCreates>,
    id: u64,
}

impl Pending {
    /// The caller took node `name` (in the create's directory), or none.
    pub(crate) fn took(self, name: Option<&str>) {
        self.late.settle(self.id, name);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.late.settle(self.id, None);
    }
}

impl LateCreates {
    fn lock(&self) -> MutexGuard<'_, (u64, VecDeque<Unsure>)> {
        self.unsure.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers that a create in `dir` with protected prefix `prefix`, sent on `session`,
    /// lost its reply. Nodes carrying the prefix are left alone until the returned [`Pending`]
    /// says which one its caller took.
    pub(crate) fn remember(
        self: &Arc<Self>,
        session: zk::SessionId,
        dir: &str,
        prefix: &str,
    ) -> Pending {
        let mut guard = self.lock();
        let (next, unsure) = &mut *guard;
        *next += 1;
        if unsure.len() == MOST {
            unsure.pop_front();
        }
        unsure.push_back(Unsure {
            id: *next,
            session: session.0,
            dir: dir.to_string(),
            prefix: prefix.to_string(),
            pending: true,
            kept: None,
            until: Instant::now() + LOOK_FOR,
        });
        Pending {
            late: self.clone(),
            id: *next,
        }
    }

    fn settle(&self, id: u64, kept: Option<&str>) {
        if let Some(u) = self.lock().1.iter_mut().find(|u| u.id == id && u.pending) {
            u.pending = false;
            u.kept = kept.map(str::to_string);
        }
    }

    /// The creates of `session` to look for now: those whose caller has said which node it
    /// took. Creates of another session (gone, with its nodes) or past [`LOOK_FOR`] are
    /// forgotten.
    fn due(&self, session: zk::SessionId) -> Vec<Unsure> {
        let mut guard = self.lock();
        let now = Instant::now();
        guard.1.retain(|u| u.session == session.0 && u.until > now);
        guard.1.iter().filter(|u| !u.pending).cloned().collect()
    }

    /// Deletes every node of `client`'s session that carries a remembered prefix, but the one
    /// its caller took; what is not forgotten (see `due`) is looked for again on the next sweep.
    pub(crate) async fn sweep(&self, client: &zk::Client, limit: Duration) -> Result<()> {
        for u in self.due(client.session_id()) {
            for name in find_protected(client, &u.dir, &u.prefix, limit).await? {
                if u.kept.as_deref() != Some(name.as_str()) {
                    delete_node(client, &format!("{}/{name}", u.dir), limit).await?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: zk::SessionId = zk::SessionId(1);

    fn prefixes(late: &LateCreates, session: zk::SessionId) -> Vec<(String, Option<String>)> {
        let due = late.due(session).into_iter();
        due.map(|u| (u.prefix, u.kept)).collect()
    }

    #[test]
    fn a_create_is_looked_for_once_its_caller_said_what_it_took() {
        let late = Arc::new(LateCreates::default());
        let taken = late.remember(ONE, "/d", "_c_a-lock-");
        let dropped = late.remember(ONE, "/d", "_c_b-lock-");
        assert_eq!(prefixes(&late, ONE), vec![], "still pending");
        taken.took(Some("_c_a-lock-0000000001"));
        drop(dropped);
        assert_eq!(
            prefixes(&late, ONE),
            vec![
                ("_c_a-lock-".into(), Some("_c_a-lock-0000000001".into())),
                ("_c_b-lock-".into(), None)
            ]
        );
    }

    #[test]
    fn another_session_forgets_them() {
        let late = Arc::new(LateCreates::default());
        late.remember(ONE, "/d", "_c_a-lock-").took(None);
        assert_eq!(prefixes(&late, zk::SessionId(2)), vec![]);
        assert_eq!(prefixes(&late, ONE), vec![], "forgotten for good");
    }

    #[test]
    fn the_oldest_is_forgotten_past_the_most() {
        let late = Arc::new(LateCreates::default());
        for i in 0..=MOST {
            late.remember(ONE, "/d", &format!("_c_{i}-lock-"))
                .took(None);
        }
        let due = prefixes(&late, ONE);
        assert_eq!(due.len(), MOST);
        assert_eq!(due[0].0, "_c_1-lock-");
    }

    #[tokio::test(start_paused = true)]
    async fn a_create_is_looked_for_for_a_while() {
        let late = Arc::new(LateCreates::default());
        late.remember(ONE, "/d", "_c_a-lock-").took(None);
        tokio::time::advance(LOOK_FOR - Duration::from_secs(1)).await;
        assert_eq!(prefixes(&late, ONE).len(), 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(prefixes(&late, ONE), vec![]);
    }
}
