//! Creates whose reply was lost or never awaited, looked for again for a while: the ensemble
//! may apply one late (held up behind a partitioned follower, say) after the acquire that sent
//! it has given up, or has taken the node its protected prefix found. Such a node sits on our
//! live session, which the heartbeat keeps alive, so without this every other client would
//! queue behind it for as long as the session lives. The heartbeat deletes it (see
//! [`LateCreates::sweep`]). etcd's `strays.rs` does the same job there, where the name's watch
//! sees every key arrive; a ZooKeeper waiter watches only the node ahead of it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lockkit_core::Result;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::ops::{delete_node, find_own};

/// How long after the lost reply a late node is looked for.
pub(crate) const LOOK_FOR: Duration = Duration::from_secs(600);

/// How many creates are looked for at once; the oldest whose caller has said what it took is
/// forgotten first (one still pending never is: its caller may take a node and leave the rest).
const MOST: usize = 64;

/// One create whose reply was lost or never awaited.
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

/// The creates of one [`Session`](crate::session::Session) whose reply was lost or never
/// awaited.
#[derive(Debug, Default)]
pub(crate) struct LateCreates {
    unsure: Mutex<(u64, VecDeque<Unsure>)>,
    /// Sweeps so far: each starts at another directory, so a slow one cannot starve the rest.
    sweeps: AtomicUsize,
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
        if unsure.len() >= MOST {
            if let Some(i) = unsure.iter().position(|u| !u.pending) {
                unsure.remove(i);
            }
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

    /// The creates of `session` to look for now, by directory: those whose caller has said
    /// which node it took. Those past [`LOOK_FOR`] are forgotten; those of another session (one
    /// that ended, with its nodes, or the next one, if this sweep is late) are left alone.
    fn due(&self, session: zk::SessionId) -> BTreeMap<String, Vec<Unsure>> {
        let mut guard = self.lock();
        let now = Instant::now();
        guard.1.retain(|u| u.until > now);
        let mut due: BTreeMap<String, Vec<Unsure>> = BTreeMap::new();
        for u in guard
            .1
            .iter()
            .filter(|u| u.session == session.0 && !u.pending)
        {
            due.entry(u.dir.clone()).or_default().push(u.clone());
        }
        due
    }

    /// Deletes every node of `client`'s session that carries a remembered prefix, but the one
    /// its caller took: one listing per directory, starting at another directory each sweep. A
    /// directory that fails is looked at again on the next sweep, as are all of them until
    /// [`LOOK_FOR`] has passed; the first error is returned once every directory was tried.
    pub(crate) async fn sweep(&self, client: &zk::Client, limit: Duration) -> Result<()> {
        let mut dirs: Vec<_> = self.due(client.session_id()).into_iter().collect();
        if !dirs.is_empty() {
            let first = self.sweeps.fetch_add(1, Ordering::Relaxed) % dirs.len();
            dirs.rotate_left(first);
        }
        let mut first_error = None;
        for (dir, unsure) in dirs {
            if let Err(e) = sweep_dir(client, &dir, &unsure, limit).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Deletes the nodes of `dir` of `client`'s session that carry one of `unsure`'s prefixes, but
/// the ones their callers took.
async fn sweep_dir(
    client: &zk::Client,
    dir: &str,
    unsure: &[Unsure],
    limit: Duration,
) -> Result<()> {
    let late = |name: &str| {
        unsure
            .iter()
            .any(|u| name.starts_with(&u.prefix) && u.kept.as_deref() != Some(name))
    };
    for name in find_own(client, dir, late, limit).await? {
        delete_node(client, &format!("{dir}/{name}"), limit).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: zk::SessionId = zk::SessionId(1);

    fn prefixes(late: &LateCreates, session: zk::SessionId) -> Vec<(String, Option<String>)> {
        let due = late.due(session).into_values().flatten();
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
    fn another_sessions_creates_are_not_looked_for() {
        let late = Arc::new(LateCreates::default());
        late.remember(ONE, "/d", "_c_a-lock-").took(None);
        assert_eq!(prefixes(&late, zk::SessionId(2)), vec![]);
        assert_eq!(
            prefixes(&late, ONE).len(),
            1,
            "a late sweep forgets nothing"
        );
    }

    #[test]
    fn the_oldest_settled_is_forgotten_past_the_most_never_a_pending_one() {
        let late = Arc::new(LateCreates::default());
        let pending = late.remember(ONE, "/d", "_c_p-lock-");
        for i in 0..MOST {
            late.remember(ONE, "/d", &format!("_c_{i}-lock-"))
                .took(None);
        }
        pending.took(Some("_c_p-lock-0000000001"));
        let due = prefixes(&late, ONE);
        assert_eq!(due.len(), MOST);
        assert_eq!(due[0].0, "_c_p-lock-", "kept while pending");
        assert_eq!(due[1].0, "_c_1-lock-", "the oldest settled one went");
    }

    #[test]
    fn creates_are_looked_for_by_directory() {
        let late = Arc::new(LateCreates::default());
        for (dir, p) in [("/b", "_c_1-"), ("/a", "_c_2-"), ("/b", "_c_3-")] {
            late.remember(ONE, dir, p).took(None);
        }
        let due = late.due(ONE);
        let dirs: Vec<(&str, usize)> = due.iter().map(|(d, u)| (d.as_str(), u.len())).collect();
        assert_eq!(dirs, vec![("/a", 1), ("/b", 2)]);
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
