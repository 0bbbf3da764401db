//! The queue of sequential nodes every primitive is built on: create our node in protected mode,
//! then wait, watching only the node that stands in our way, until a rule says we hold it.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::{drive, Armed, Exit, Failures, Queue, Request, Standing, Undo, Woken};
use lockkit_core::{async_trait, Error, ErrorKind, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{dropped_connection, is_transient, map, session_ended};
use crate::node::{self, Participant};
use crate::ops::{delete_node, find_protected, list_or_empty, retry, within, TRANSIENT};
use crate::session::Session;

/// What decides that a node holds the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Holds when it is the first participant (mutex, write lock).
    Exclusive,
    /// Holds when no writer (marker index 1) comes before it (read lock).
    Shared,
}

/// What a lock's node holds (Curator's recipes write their client's address; nothing reads it).
pub(crate) const NODE_DATA: &[u8] = b"lockkit";

/// One queue: a directory, the markers of its participants, our marker, the rule, and what
/// our node holds (an election candidate's value).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec<'a> {
    /// The lock's name, for the driver's trace events.
    pub name: &'a str,
    pub dir: &'a str,
    pub marker: &'static str,
    pub markers: &'static [&'static str],
    pub rule: Rule,
    pub data: &'a [u8],
}

/// A node of ours that holds its place.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub client: zk::Client,
    pub path: String,
    pub czxid: i64,
    /// Its protected prefix: any other node carrying it is a duplicate of ours.
    pub prefix: String,
}

/// Whatever node of ours carries protected prefix `prefix` in `dir`.
struct Item {
    dir: String,
    prefix: String,
    /// The create (or multi) was answered: the cleanup sees whatever it made (a copy made late
    /// after a lost reply is the [`late`](crate::late) registry's).
    answered: bool,
}

/// Deletes the nodes of an unfinished acquire or downgrade when dropped (cancelled or failed),
/// in order; what the server does not take at once goes to the handle's reaper, which retries
/// until the nodes are gone or their session has ended (with it, its ephemeral nodes).
/// Disarmed once its nodes belong to a guard.
pub(crate) type Cleanup = Armed<Unclaimed>;

/// The nodes a [`Cleanup`] deletes.
pub(crate) struct Unclaimed {
    session: Arc<Session>,
    client: zk::Client,
    items: Vec<Item>,
}

impl Unclaimed {
    /// None yet, armed: nodes `client` creates for `session` are added before their create.
    pub(crate) fn armed(session: &Arc<Session>, client: zk::Client) -> Cleanup {
        Armed::new(Unclaimed {
            session: session.clone(),
            client,
            items: Vec::new(),
        })
    }

    /// Adds whatever node of ours in `dir` carries protected prefix `prefix`: armed before the
    /// create is sent, since a create whose reply never comes may still be applied.
    pub(crate) fn push_prefix(&mut self, dir: &str, prefix: &str) {
        self.items.push(Item {
            dir: dir.to_string(),
            prefix: prefix.to_string(),
            answered: false,
        });
    }

    /// The create with protected prefix `prefix` was answered: no node carrying it can be made
    /// after the cleanup has looked (a reply lost before the answer is the
    /// [`late`](crate::late) registry's).
    pub(crate) fn answered(&mut self, prefix: &str) {
        for item in self.items.iter_mut().filter(|i| i.prefix == prefix) {
            item.answered = true;
        }
    }

    /// A create still unanswered when its acquire ended may be applied after the cleanup has
    /// looked: the session's heartbeat looks for its node for a while longer.
    fn look_for_late(&mut self) {
        let session = self.client.session_id();
        for item in self.items.iter_mut().filter(|i| !i.answered) {
            let late = self.session.late.remember(session, &item.dir, &item.prefix);
            late.took(None);
            item.answered = true;
        }
    }
}

impl Undo for Unclaimed {
    fn undo(mut self) {
        self.look_for_late();
        if !self.items.is_empty() {
            reap(&self.session, &self.client, self.items);
        }
    }
}

/// Deletes `cleanup`'s nodes now (awaited) and disarms it; nodes the server does not delete
/// now go to the reaper. Armed until done: if this future is dropped half-way (the core keeps
/// the wait budget), the drop hands the nodes to the reaper.
pub(crate) async fn delete_now(mut cleanup: Cleanup) {
    cleanup.look_for_late();
    let timeout = cleanup.session.cfg.command_timeout;
    let deleted = delete_items(&cleanup.client, &cleanup.items, timeout).await;
    let nodes = cleanup.disarm();
    if deleted.is_err() {
        nodes.undo();
    }
}

/// Retries deleting `items` in the reaper until they are gone or the session that made them
/// has ended.
fn reap(session: &Arc<Session>, client: &zk::Client, items: Vec<Item>) {
    let (items, timeout) = (Arc::new(items), session.cfg.command_timeout);
    session.reap(
        "delete the nodes no guard took",
        client.session_id(),
        move |client| {
            let items = items.clone();
            async move { delete_items(&client, &items, timeout).await }
        },
    );
}

/// Deletes in reverse order of creation: a semaphore's leases before its entry lock.
async fn delete_items(client: &zk::Client, items: &[Item], timeout: Duration) -> Result<()> {
    for Item { dir, prefix, .. } in items.iter().rev() {
        for name in find_protected(client, dir, prefix, timeout).await? {
            delete_node(client, &format!("{dir}/{name}"), timeout).await?;
        }
    }
    Ok(())
}

/// The child whose name starts with our protected prefix (Curator's `findProtectedNodeInForeground`).
pub fn find_by_prefix(children: &[String], prefix: &str) -> Option<String> {
    children.iter().find(|c| c.starts_with(prefix)).cloned()
}

/// Creates our node `dir/_c_<uuid>-<marker><seq>` and lists the directory in the same round
/// trip (ZooKeeper answers one session's requests in order, so the listing includes the node).
/// Our node is the path the create returned. A create that fails with a connection loss is
/// looked up by its protected prefix (after a `sync`) and retried only if it did not happen; a
/// second node of ours (a late create of the lost connection) is deleted, now or, should it come
/// later still, by the session's heartbeat ([`crate::late`]).
pub(crate) async fn create(
    session: &Session,
    client: &zk::Client,
    cleanup: &mut Cleanup,
    dir: &str,
    marker: &str,
    data: &[u8],
) -> Result<(Node, Vec<String>)> {
    let prefix = format!("{}{marker}", node::protected_prefix(&uuid::Uuid::new_v4()));
    let full = format!("{dir}/{prefix}");
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&session.acls));
    let limit = session.cfg.command_timeout;
    let until = Instant::now() + limit;
    // Whatever node carries the prefix is deleted if the acquire ends without the lock.
    cleanup.push_prefix(dir, &prefix);
    let mut made_dir = 0;
    let mut lost_reply = TRANSIENT.start();
    // Set once a reply was lost: told which node we took, if any.
    let mut unsure = None;
    loop {
        let created = client.create(&full, data, &options);
        let listed = client.list_children(dir);
        // A create cut off at the limit may still be made: its prefix stays for the cleanup.
        let (stat, name) = match within(until, created).await {
            Ok((stat, seq)) => (stat, format!("{prefix}{seq}")),
            // The container may be reaped between our mkdir and create: try a few times.
            Err(zk::Error::NoNode) if made_dir < 3 => {
                drop(listed);
                session.ensure_dir(client, dir).await?;
                made_dir += 1;
                continue;
            }
            Err(e) if is_transient(&e) && Instant::now() < until => {
                drop(listed);
                session.count_lookup();
                unsure.get_or_insert_with(|| {
                    session.late.remember(client.session_id(), dir, &prefix)
                });
                lost_reply.wait().await;
                let mut ours = find_protected(client, dir, &prefix, limit)
                    .await?
                    .into_iter();
                let Some(name) = ours.next() else {
                    continue; // it did not happen: create again
                };
                for extra in ours {
                    delete_node(client, &format!("{dir}/{extra}"), limit).await?;
                }
                let path = format!("{dir}/{name}");
                let stat = retry(limit, "stat", || client.check_stat(&path)).await?;
                let Some(stat) = stat else { continue };
                let children = retry(limit, "list", || client.list_children(dir)).await?;
                cleanup.answered(&prefix);
                if let Some(unsure) = unsure {
                    unsure.took(Some(&name));
                }
                return Ok((
                    Node {
                        client: client.clone(),
                        path,
                        czxid: stat.czxid,
                        prefix,
                    },
                    children,
                ));
            }
            Err(e) => {
                // The server's answer (a refusal): nothing was created.
                if !is_transient(&e) {
                    cleanup.answered(&prefix);
                }
                return Err(map(e, &format!("cannot create a node in {dir}")));
            }
        };
        cleanup.answered(&prefix);
        if stat.ephemeral_owner != client.session_id().0 {
            return Err(Error::new(
                ErrorKind::WrongType,
                format!("node created under {dir} is not owned by our session"),
            ));
        }
        let children = match within(until, listed).await {
            Ok(c) => c,
            Err(_) => retry(limit, "list", || client.list_children(dir)).await?,
        };
        if !children.contains(&name) {
            return Err(Error::new(
                ErrorKind::LockLost,
                format!("our new node in {dir} vanished at once"),
            ));
        }
        if let Some(unsure) = unsure {
            unsure.took(Some(&name));
        }
        return Ok((
            Node {
                client: client.clone(),
                path: format!("{dir}/{name}"),
                czxid: stat.czxid,
                prefix,
            },
            children,
        ));
    }
}

/// What our position in the queue means.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// We hold it.
    Ours,
    /// Wait for this node to go.
    WaitFor(String),
    /// Our node is not among the children (deleted by someone else).
    Gone,
}

/// Decides our turn from the directory's children.
///
/// One pass over the children, copying no name but the one returned: the participant that comes
/// last before ours in creation order (sequence offset from ours, then name, the order of
/// [`node::sorted`]) among those that can stand in our way (every one for
/// [`Rule::Exclusive`]; writers for [`Rule::Shared`]: writers ahead of the last one leave before
/// it does, and no writer can appear before us later).
pub(crate) fn decide(spec: &Spec<'_>, children: &[String], ours: &str) -> Turn {
    let Some((_, seq)) = node::marker_and_seq(ours, spec.markers) else {
        return Turn::Gone;
    };
    let mut found = false;
    let mut ahead: Option<(i64, &str)> = None;
    for child in children {
        let Some((marker, s)) = node::marker_and_seq(child, spec.markers) else {
            continue;
        };
        if child == ours {
            found = true;
            continue;
        }
        let at = (node::offset(s, seq), child.as_str());
        let blocks = match spec.rule {
            Rule::Exclusive => true,
            Rule::Shared => marker == 1,
        };
        if blocks && at < (0, ours) && ahead.is_none_or(|a| at > a) {
            ahead = Some(at);
        }
    }
    match (found, ahead) {
        (false, _) => Turn::Gone,
        (true, None) => Turn::Ours,
        (true, Some((_, name))) => Turn::WaitFor(name.to_string()),
    }
}

/// A directory of sequential nodes as the core driver's queue: a claim is our node, and a wait
/// watches only the node that stands in our way.
pub(crate) struct ZkQueue<'a> {
    pub session: &'a Arc<Session>,
    pub spec: Spec<'a>,
}

/// One claim: our node once created, the last listing of the directory, and the cleanup that
/// deletes whatever node of ours carries its protected prefix if the claim does not hold.
pub(crate) struct Claim {
    client: zk::Client,
    cleanup: Option<Cleanup>,
    node: Option<Node>,
    children: Vec<String>,
    /// The node we wait for.
    ahead: Option<String>,
}

impl Claim {
    /// Our node, once created.
    pub(crate) fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    /// The cleanup that more nodes of this claim join.
    pub(crate) fn cleanup(&mut self) -> &mut Cleanup {
        self.cleanup
            .as_mut()
            .expect("a claim keeps its cleanup until it ends")
    }

    pub(crate) fn client(&self) -> &zk::Client {
        &self.client
    }

    /// Its nodes belong to a guard now: nothing is left to delete.
    pub(crate) fn disarm(&mut self) {
        if let Some(cleanup) = self.cleanup.take() {
            cleanup.disarm();
        }
    }
}

/// Acquires a node in `spec`'s queue through the core's driver. `Ok(None)` when the budget
/// ran out; then our node is already deleted. Dropping the future deletes it in the background.
pub(crate) async fn contend(
    session: &Arc<Session>,
    spec: &Spec<'_>,
    req: &Request,
) -> Result<Option<Node>> {
    let queue = ZkQueue {
        session,
        spec: *spec,
    };
    drive(&queue, req).await
}

impl ZkQueue<'_> {
    /// Where our node stands in the last listing. A late create of a lost connection is a second
    /// node of ours: never wait behind it.
    async fn settle(&self, c: &mut Claim) -> Result<Standing> {
        let node = c.node.as_ref().expect("settled after the create");
        let ours = node.path.rsplit('/').next().unwrap_or_default().to_string();
        let limit = self.session.cfg.command_timeout;
        let extra: Vec<String> = c
            .children
            .iter()
            .filter(|n| n.starts_with(&node.prefix) && **n != ours)
            .cloned()
            .collect();
        for n in &extra {
            delete_node(&c.client, &format!("{}/{n}", self.spec.dir), limit).await?;
        }
        c.children.retain(|n| !extra.contains(n));
        match decide(&self.spec, &c.children, &ours) {
            Turn::Ours => Ok(Standing::Owner),
            // Deleted while we waited (an admin, or a force-unlock that took it for the
            // holder's): the driver queues again with a new node, as on every backend.
            Turn::Gone => Ok(Standing::Gone),
            Turn::WaitFor(other) => {
                c.ahead = Some(other);
                Ok(Standing::Waiting)
            }
        }
    }
}

#[async_trait]
impl Queue for ZkQueue<'_> {
    type Claim = Claim;
    type Output = Node;

    /// On the current session, or on the one that replaces an ended one.
    async fn claim(&self, req: &Request) -> Result<Claim> {
        let client = self.session.live_client(req).await?;
        Ok(Claim {
            cleanup: Some(Unclaimed::armed(self.session, client.clone())),
            client,
            node: None,
            children: Vec::new(),
            ahead: None,
        })
    }

    /// `Gone` when the session expired meanwhile and `req` may wait (a new claim follows); an
    /// acquire that may not wait answers the error, not "busy".
    async fn enqueue(&self, c: &mut Claim, req: &Request) -> Result<Standing> {
        let client = c.client.clone();
        let created = create(
            self.session,
            &client,
            c.cleanup(),
            self.spec.dir,
            self.spec.marker,
            self.spec.data,
        )
        .await;
        let (node, children) = match created {
            Ok(made) => made,
            Err(e) if !req.waits() => return Err(e),
            Err(e) => return gone_if_ended(&client, Err(e)),
        };
        c.node = Some(node);
        c.children = children;
        let settled = self.settle(c).await;
        gone_if_ended(&client, settled)
    }

    /// Watches the node ahead of ours until it changes or goes, or until the deadline. A
    /// dropped connection is the driver's to bear (see [`Queue::tolerance`]).
    async fn wait(&self, c: &mut Claim, req: &Request) -> Result<Woken> {
        let Some(other) = c.ahead.take() else {
            return Ok(Woken::Look);
        };
        let path = format!("{}/{other}", self.spec.dir);
        let until = Instant::now() + self.session.cfg.command_timeout;
        let watched = match within(until, c.client.get_and_watch_data(&path)).await {
            Err(zk::Error::NoNode) => return Ok(Woken::Look),
            Ok((_, _, watcher)) => watch_fired(self.session, watcher, req).await,
            Err(e) => Err(map(e, "cannot watch the node ahead")),
        };
        woken_unless_failed(&c.client, watched)
    }

    /// `Gone` once the claim's session expired.
    async fn standing(&self, c: &mut Claim, _req: &Request) -> Result<Standing> {
        if c.client.state() == zk::SessionState::Expired {
            return Ok(Standing::Gone);
        }
        let limit = Instant::now() + self.session.cfg.command_timeout;
        let listed = within(limit, c.client.list_children(self.spec.dir)).await;
        c.children = match listed {
            Ok(children) => children,
            Err(e) => return gone_if_ended(&c.client, Err(map(e, "list"))),
        };
        let settled = self.settle(c).await;
        gone_if_ended(&c.client, settled)
    }

    /// While only the connection is down (the client reconnects within the session, and our
    /// node lives on), one command timeout from the first failure; nothing else is borne.
    fn tolerance(&self, _c: &Claim, f: &Failures<'_>) -> Duration {
        if dropped_connection(f.last()) {
            self.session.cfg.command_timeout
        } else {
            Duration::ZERO
        }
    }

    fn lock_name(&self) -> &str {
        self.spec.name
    }

    /// Our node belongs to the guard now: the cleanup is disarmed.
    async fn hold(&self, c: &mut Claim, _req: &Request) -> Result<Option<Node>> {
        let node = c.node.take();
        if node.is_some() {
            c.disarm();
        }
        Ok(node)
    }

    async fn leave(&self, c: &mut Claim, _exit: Exit) -> Result<()> {
        if let Some(cleanup) = c.cleanup.take() {
            delete_now(cleanup).await;
        }
        Ok(())
    }

    /// The claim's cleanup hands its nodes to the reaper as it drops.
    fn abandon(&self, c: Claim) {
        drop(c);
    }
}

/// A step of a claim on `client`: `Gone` if it failed because the claim's session ended (its
/// nodes went with it), so that the driver queues again on the session that replaces it.
pub(crate) fn gone_if_ended(client: &zk::Client, step: Result<Standing>) -> Result<Standing> {
    match step {
        Err(e) if session_ended(client, &e) => Ok(Standing::Gone),
        step => step,
    }
}

/// A wait of a claim on `client`: a look if it failed because the claim's session ended (the
/// look then finds the claim gone).
pub(crate) fn woken_unless_failed(client: &zk::Client, wait: Result<()>) -> Result<Woken> {
    match wait {
        Err(e) if session_ended(client, &e) => Ok(Woken::Look),
        wait => wait.map(|()| Woken::Look),
    }
}

/// Waits for `watcher` to fire, or for `req`'s deadline; an event saying the session ended is
/// an error (its nodes went with it).
pub(crate) async fn watch_fired(
    session: &Session,
    watcher: zk::OneshotWatcher,
    req: &Request,
) -> Result<()> {
    let Some(event) = req.within(watcher.changed()).await else {
        return Ok(());
    };
    session.count_wake();
    if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
        return Err(map(
            zk::Error::SessionExpired,
            "session ended while waiting",
        ));
    }
    Ok(())
}

/// Admin: deletes the holders `pick` chooses among the participants of `dir`, whoever's they
/// are. Returns whether any was deleted; when every one picked left between the listing and the
/// delete, it looks again (someone else may hold by then).
pub(crate) async fn force_delete(
    session: &Session,
    dir: &str,
    markers: &[&str],
    pick: impl Fn(&[Participant]) -> Vec<Participant>,
) -> Result<bool> {
    loop {
        let picked = pick(&participants(session, dir, markers).await?);
        if picked.is_empty() {
            return Ok(false);
        }
        let client = session.client()?;
        let mut any = false;
        for p in picked {
            let path = format!("{dir}/{}", p.name);
            any |= delete_node(&client, &path, session.cfg.command_timeout).await?;
        }
        if any {
            return Ok(true);
        }
    }
}

/// The first participant (the holder of an exclusive lock, the leader), for [`force_delete`].
pub(crate) fn first(all: &[Participant]) -> Vec<Participant> {
    all.first().into_iter().cloned().collect()
}

/// The participants of `dir` in queue order (empty when the directory does not exist).
pub(crate) async fn participants(
    session: &Session,
    dir: &str,
    markers: &[&str],
) -> Result<Vec<Participant>> {
    let client = session.client()?;
    let children = list_or_empty(&client, dir, session.cfg.command_timeout).await?;
    Ok(node::sorted(&children, markers, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{MUTEX_MARKER, READ_MARKER, WRITE_MARKER};

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn protected_lookup_finds_our_node() {
        let children = v(&["_c_aaa-lock-0000000001", "_c_bbb-lock-0000000002"]);
        assert_eq!(
            find_by_prefix(&children, "_c_bbb-lock-").as_deref(),
            Some("_c_bbb-lock-0000000002")
        );
        assert_eq!(find_by_prefix(&children, "_c_ccc-lock-"), None);
    }

    /// The specs of a read lock, a write lock and a mutex on one directory.
    fn specs() -> [Spec<'static>; 3] {
        let read = Spec {
            name: "d",
            dir: "/d",
            marker: READ_MARKER,
            markers: &[READ_MARKER, WRITE_MARKER],
            rule: Rule::Shared,
            data: NODE_DATA,
        };
        let write = Spec {
            marker: WRITE_MARKER,
            rule: Rule::Exclusive,
            ..read
        };
        let mutex = Spec {
            marker: MUTEX_MARKER,
            markers: &[MUTEX_MARKER],
            ..write
        };
        [read, write, mutex]
    }

    #[test]
    fn turns() {
        let [r, w, m] = specs();
        let c = v(&[
            "_c_a-lock-0000000003",
            "_c_b-lock-0000000001",
            "_c_c-lock-0000000002",
        ]);
        assert_eq!(decide(&m, &c, "_c_b-lock-0000000001"), Turn::Ours);
        assert_eq!(
            decide(&m, &c, "_c_a-lock-0000000003"),
            Turn::WaitFor("_c_c-lock-0000000002".into())
        );
        assert_eq!(decide(&m, &c, "_c_z-lock-0000000009"), Turn::Gone);
        let c = v(&[
            "_c_a-__READ__0000000001",
            "_c_b-__WRIT__0000000002",
            "_c_c-__READ__0000000003",
            "_c_d-__WRIT__0000000004",
            "_c_e-__READ__0000000005",
        ]);
        assert_eq!(decide(&r, &c, "_c_a-__READ__0000000001"), Turn::Ours);
        assert_eq!(
            decide(&w, &c, "_c_b-__WRIT__0000000002"),
            Turn::WaitFor("_c_a-__READ__0000000001".into())
        );
        assert_eq!(
            decide(&r, &c, "_c_c-__READ__0000000003"),
            Turn::WaitFor("_c_b-__WRIT__0000000002".into())
        );
        assert_eq!(
            decide(&r, &c, "_c_e-__READ__0000000005"),
            Turn::WaitFor("_c_d-__WRIT__0000000004".into())
        );
    }

    /// The one-pass `decide` answers what sorting every participant did, on random directories:
    /// sequences around the 32-bit rollover, shared sequences (a downgraded lock's read node
    /// takes its write node's), names of other recipes, for both rules.
    #[test]
    fn deciding_in_one_pass_matches_the_sorted_order() {
        fn sorted_turn(spec: &Spec<'_>, children: &[String], ours: &str) -> Turn {
            let Some(me) = node::parse(ours, spec.markers) else {
                return Turn::Gone;
            };
            let sorted = node::sorted(children, spec.markers, Some(me.seq));
            let Some(i) = sorted.iter().position(|p| p.name == me.name) else {
                return Turn::Gone;
            };
            let before = &sorted[..i];
            let last = match spec.rule {
                Rule::Exclusive => before.last(),
                Rule::Shared => before.iter().rev().find(|p| p.marker == 1),
            };
            last.map_or(Turn::Ours, |p| Turn::WaitFor(p.name.clone()))
        }
        let [read, write, mutex] = specs();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let markers = [READ_MARKER, WRITE_MARKER, MUTEX_MARKER, "latch-"];
        for _ in 0..2000 {
            let base = i64::from(i32::MAX) - 8;
            let children: Vec<String> = (0..1 + next(12))
                .map(|i| {
                    // Wraps past i32::MAX to negative sequences, as ZooKeeper's counter does.
                    let seq = (base + next(16) as i64) as i32;
                    let marker = markers[next(4) as usize];
                    format!("_c_{i:02}-{marker}{:010}", seq)
                })
                .collect();
            for ours in &children {
                for spec in [&read, &write, &mutex] {
                    assert_eq!(
                        decide(spec, &children, ours),
                        sorted_turn(spec, &children, ours),
                        "{ours} among {children:?}"
                    );
                }
            }
            let stranger = "_c_zz-lock-0000000001";
            assert_eq!(decide(&mutex, &children, stranger), Turn::Gone);
        }
    }
}
