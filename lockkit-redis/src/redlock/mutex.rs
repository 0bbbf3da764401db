//! The Redlock mutex: one acquire is a round of `SET NX PX` (with its token, in
//! `scripts/redlock_acquire.lua`) on every master in parallel, held once a quorum took it with
//! validity left; a failed round is released on every master that may have it, and tried again
//! when a release tells this waiter its turn (pub/sub) or after a random pause. The core's
//! driver runs the rounds ([`Queue`]): a round is `enqueue` or `standing`, the listening and the
//! pause are `wait`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use lockkit_core::spi::{
    drive, margin, moot_after, Exit, GuardParts, Queue, RawMutex, Request, Standing, Watched, Woken,
};
use lockkit_core::{async_trait, Backoff, Error, ErrorKind, Result, Retry};
use tokio::time::Instant;

use super::client::{short_of_quorum, Client, Keys, Release, Renewal};
use super::held::RedlockHeld;
use super::masters::Resend;
use crate::keys::holder_channels;
use crate::pubsub::Subscription;

/// A Redlock mutex handle.
#[derive(Debug)]
pub(crate) struct RedlockMutex {
    client: Arc<Client>,
    name: Arc<str>,
    keys: Keys,
}

impl RedlockMutex {
    pub(crate) fn new(client: Arc<Client>, name: &str) -> Self {
        let keys = Keys::of(&client.settings.prefix, name);
        RedlockMutex {
            client,
            name: name.into(),
            keys,
        }
    }

    /// Each master's view of the lock: its owner (any bytes: other Redlock clients write random
    /// ones) and remaining expiry (`None`: no expiry), or `None` where it is free. Fails unless a quorum of masters answers.
    async fn probe(&self) -> Result<Vec<Option<(Vec<u8>, Option<Duration>)>>> {
        let mut inv = self.client.scripts.probe.prepare_invoke();
        inv.key(&*self.keys.lock);
        let limit = self.client.settings.command_timeout;
        let answers: Vec<Result<(i64, Vec<u8>)>> = self
            .client
            .masters
            .all(&inv, limit, "redlock probe", Resend::Once)
            .await;
        let quorum = self.client.quorum();
        let mut seen = Vec::new();
        let mut cause = None;
        for a in answers {
            match a {
                Ok((-2, _)) => seen.push(None),
                Ok((ms, owner)) => seen.push(Some((
                    owner,
                    (ms >= 0).then(|| Duration::from_millis(ms as u64)),
                ))),
                Err(e) if e.kind() == ErrorKind::WrongType => return Err(e),
                Err(e) => cause = Some(e),
            }
        }
        if seen.len() < quorum {
            let n = self.client.masters.len();
            return Err(too_few("probe", seen.len(), n, quorum, cause));
        }
        Ok(seen)
    }

    /// How long the owner that holds the lock on a quorum of masters keeps it there (the
    /// quorum-th longest remaining expiry of its keys), or `None` when nobody holds a quorum
    /// (keys of a round under way, or left on a minority, are no lock).
    async fn holder_expiry(&self) -> Result<Option<Duration>> {
        let seen = self.probe().await?;
        let quorum = self.client.quorum();
        for (owner, _) in seen.iter().flatten() {
            let mut left: Vec<Duration> = seen
                .iter()
                .flatten()
                .filter(|(o, _)| o == owner)
                .map(|(_, ms)| ms.unwrap_or(Duration::MAX))
                .collect();
            if left.len() >= quorum {
                left.sort_unstable_by(|a, b| b.cmp(a));
                return Ok(Some(left[quorum - 1]));
            }
        }
        Ok(None)
    }
}

/// Fewer masters answered `what` than make a quorum.
fn too_few(what: &str, answered: usize, n: usize, quorum: usize, cause: Option<Error>) -> Error {
    short_of_quorum(
        format!("only {answered} of {n} masters answered the {what}; a quorum is {quorum}"),
        cause,
    )
}

#[async_trait]
impl RawMutex for RedlockMutex {
    /// # Cancel safety
    /// Dropping the future leaves no lock behind: whatever a round may have set is released on
    /// those masters in the background (or expires with its lease).
    async fn acquire(&self, req: &Request) -> Result<Option<GuardParts>> {
        drive(self, req).await
    }

    /// Whether one owner holds the lock on a quorum of masters.
    async fn is_locked(&self) -> Result<bool> {
        Ok(self.holder_expiry().await?.is_some())
    }

    /// Deletes the lock on every master; whether a quorum had it.
    async fn force_unlock(&self) -> Result<bool> {
        let mut inv = self.client.scripts.force.prepare_invoke();
        inv.key(&*self.keys.lock)
            .arg(holder_channels(&self.client.settings.prefix));
        let limit = self.client.settings.command_timeout;
        let answers: Vec<Result<i64>> = self
            .client
            .masters
            .all(&inv, limit, "redlock force_unlock", Resend::Never)
            .await;
        let (n, quorum) = (self.client.masters.len(), self.client.quorum());
        let (mut answered, mut had, mut cause) = (0, 0, None);
        for a in answers {
            match a {
                Ok(r) => {
                    answered += 1;
                    had += usize::from(r == 1);
                }
                Err(e) if e.kind() == ErrorKind::WrongType => return Err(e),
                Err(e) => cause = Some(e),
            }
        }
        if had < quorum && answered < n {
            // Those that did not answer may still hold it: it is not known to be free.
            return Err(short_of_quorum(
                format!(
                    "force_unlock reached {answered} of {n} masters; the others may still \
                     hold the lock"
                ),
                cause,
            ));
        }
        Ok(had >= quorum)
    }

    /// How long the holder keeps the lock on a quorum of masters.
    async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.holder_expiry().await
    }
}

/// One acquire's rounds.
pub(crate) struct Claim {
    /// The owner of the last round, new for each round: a master that has it from a try of the
    /// same round answers as if taken now, and a release of an earlier round still being
    /// retried never meets the key of a later one.
    owner: Arc<str>,
    /// The masters that may hold the last round's key: they took it, or did not answer.
    maybe: Vec<bool>,
    /// The last round: when it was sent, and the expiry it asked for.
    sent_at: Instant,
    expiry: Duration,
    /// The token a quorum issued.
    token: u64,
    /// The masters the last round did not take the lock on, and how many answered it busy.
    missed: Vec<bool>,
    busy: usize,
    /// The acquire as a waiter: when it began (ms since the epoch by the masters' clocks, the
    /// median their first busy answers gave, so that a client's own clock orders nothing) and
    /// its id, the same in every round (see `scripts/redlock_acquire.lua`); a release tells
    /// it its turn by the id.
    since: Option<u64>,
    id: Arc<str>,
    /// A round that may take a place among the waiters was sent.
    placed: bool,
    /// Its subscription to the lock's channel on each master, once it waited, and when a
    /// failed subscribe may be tried again.
    subs: Vec<Option<Subscription>>,
    subscribe_after: Vec<Instant>,
    /// Since when rounds have failed to reach a quorum.
    failing: Option<Instant>,
    pauses: Retry,
}

/// What one master answered a round.
enum Answer {
    /// Taken, with this token.
    Took(u64),
    /// Held by another owner (or another waiter is first); the master's clock, in ms.
    Busy(u64),
}

fn answer(s: &str) -> Result<Answer> {
    let bad = || {
        Error::new(
            ErrorKind::Backend,
            format!("redlock: a master answered the acquire with {s:?}"),
        )
    };
    match s.split_once(' ') {
        Some(("0", ms)) => ms.parse().map(Answer::Busy).map_err(|_| bad()),
        Some(_) => Err(bad()),
        None => match s.parse() {
            Ok(0) | Err(_) => Err(bad()),
            Ok(t) => Ok(Answer::Took(t)),
        },
    }
}

impl RedlockMutex {
    /// Releases the last round's key on the masters that may have it, in parallel; the reaper
    /// goes on with those that did not answer. A claim that `leaves` also gives up its place
    /// among the waiters on every master. `tell`: whether a master where the lock is then
    /// free tells the first waiter (not when another owner holds a quorum).
    async fn release_claim(&self, claim: &mut Claim, leaves: bool, tell: bool) {
        let leaves = leaves && claim.placed;
        if !claim.maybe.contains(&true) && !leaves {
            return;
        }
        let on = if leaves {
            vec![true; claim.maybe.len()]
        } else {
            claim.maybe.clone()
        };
        let release = Release {
            owner: claim.owner.clone(),
            waiter: if leaves { claim.id.clone() } else { "".into() },
            tell,
        };
        let released = self
            .client
            .release_on(&self.keys, &release, Some(&on))
            .await;
        claim.maybe.fill(false);
        if leaves {
            claim.placed = false;
        }
        let expires = expired_by(claim);
        self.client
            .release_later(self.keys.clone(), release, released.failed, expires);
    }

    /// How long a waiter's place lasts after its last round: two of its cycles at their
    /// slowest (the longest pause, and a round and a release that each wait a node timeout
    /// for a slow master).
    fn place(&self) -> Duration {
        (Backoff::POLL.max() + self.client.settings.node_timeout * 2) * 2
    }

    /// How long rounds that reach no quorum are borne, while the wait budget lasts, before the
    /// acquire fails: a few node timeouts, so that one slow round on a loaded machine is not
    /// the answer, and a majority that is down is.
    fn tolerance(&self) -> Duration {
        (self.client.settings.node_timeout * 4).max(Duration::from_millis(500))
    }

    /// One round: what the last one took released, the lock on every master under a new owner,
    /// the token raised where a master issued a lower one, and the validity left. A round that
    /// does not hold releases what it took before it answers.
    async fn round(&self, claim: &mut Claim, req: &Request) -> Result<Standing> {
        self.release_claim(claim, false, true).await;
        let standing = self.try_round(claim, req).await;
        if !matches!(standing, Ok(Standing::Owner)) {
            // A quorum that answered busy holds the lock: nobody is told.
            let tell = claim.busy < self.client.quorum();
            self.release_claim(claim, false, tell).await;
        }
        standing
    }

    async fn try_round(&self, claim: &mut Claim, req: &Request) -> Result<Standing> {
        let client = &self.client;
        let (n, quorum) = (client.masters.len(), client.quorum());
        let lease = req.lease().duration();
        if lease <= client.settings.node_timeout {
            return Err(Error::invalid(format!(
                "a Redlock lease of {lease:?} is not longer than node_timeout ({:?}): no round \
                 could leave validity",
                client.settings.node_timeout
            )));
        }
        claim.expiry = lease;
        claim.owner = client.new_owner();
        let round = if req.waits() { "wait" } else { "try" };
        let since = claim.since.map(|s| s.to_string()).unwrap_or_default();
        let mut inv = client.scripts.acquire.prepare_invoke();
        inv.key(&*self.keys.lock)
            .key(&*self.keys.fence)
            .key(&*self.keys.waiters)
            .key(&*self.keys.deadlines)
            .arg(&*claim.owner)
            .arg(claim.expiry.as_millis() as u64)
            .arg(client.settings.fence_ttl.as_millis() as u64)
            .arg(round)
            .arg(self.place().as_millis() as u64)
            .arg(&since)
            .arg(&*claim.id);
        // Any master may take it (and place the waiter) from the moment the round is sent;
        // those that answer "busy" certainly did not take it.
        claim.maybe.fill(true);
        claim.placed |= req.waits() && claim.since.is_some();
        claim.sent_at = Instant::now();
        let limit = client.settings.node_timeout;
        let answers: Vec<Result<String>> = client
            .masters
            .all(&inv, limit, "redlock acquire", Resend::Once)
            .await;
        let mut tokens: Vec<Option<u64>> = vec![None; n];
        let mut clocks = Vec::new();
        let (mut cause, mut foreign) = (None, None);
        for (i, a) in answers.into_iter().enumerate() {
            match a.and_then(|s| answer(&s)) {
                Ok(Answer::Busy(ms)) => {
                    clocks.push(ms);
                    claim.maybe[i] = false;
                }
                Ok(Answer::Took(t)) => tokens[i] = Some(t),
                Err(e) if e.kind() == ErrorKind::WrongType => {
                    claim.maybe[i] = false;
                    foreign = Some(e);
                }
                Err(e) => cause = Some(e),
            }
        }
        if let Some(e) = foreign {
            return Err(e);
        }
        for (missed, token) in claim.missed.iter_mut().zip(&tokens) {
            *missed = token.is_none();
        }
        // When the waiter began, by a quorum of the masters' clocks (one master's could be far
        // off); until then its rounds take no place.
        if claim.since.is_none() && req.waits() && clocks.len() >= quorum {
            clocks.sort_unstable();
            claim.since = Some(clocks[clocks.len() / 2]);
        }
        let (took, busy) = (tokens.iter().flatten().count(), clocks.len());
        claim.busy = busy;
        if took + busy < quorum {
            let since = *claim.failing.get_or_insert(claim.sent_at);
            let e = too_few("acquire", took + busy, n, quorum, cause);
            if !req.waits() || !e.is_retryable() || since.elapsed() >= self.tolerance() {
                return Err(e);
            }
            tracing::debug!(lock = &*self.name, error = %e, "lockkit: a Redlock round failed");
            return Ok(Standing::Waiting);
        }
        claim.failing = None;
        if took >= quorum {
            let token = tokens.iter().flatten().copied().max().unwrap_or(0);
            if self.raise(claim, &tokens, token).await >= quorum
                && Instant::now() < claim.sent_at + lease - margin(lease)
            {
                claim.token = token;
                return Ok(Standing::Owner);
            }
            // The validity is spent (or the token could not be raised on a quorum): released
            // now, and tried again if the budget allows.
        }
        Ok(Standing::Waiting)
    }

    /// Raises the fencing counter to `token` on the masters that took the lock with a lower
    /// one, so that whichever quorum takes the lock next issues a higher token (two quorums
    /// share a master); how many masters that took it now have `token`.
    async fn raise(&self, claim: &Claim, tokens: &[Option<u64>], token: u64) -> usize {
        let client = &self.client;
        let at_token = tokens.iter().filter(|t| **t == Some(token)).count();
        let lagging: Vec<usize> = (0..tokens.len())
            .filter(|i| tokens[*i].is_some_and(|t| t < token))
            .collect();
        if lagging.is_empty() {
            return at_token;
        }
        let mut inv = client.scripts.raise.prepare_invoke();
        inv.key(&*self.keys.lock)
            .key(&*self.keys.fence)
            .arg(&*claim.owner)
            .arg(token)
            .arg(client.settings.fence_ttl.as_millis() as u64);
        let inv = &inv;
        let limit = client.settings.node_timeout;
        let raised = join_all(lagging.iter().map(|i| {
            client
                .masters
                .on::<i64>(*i, inv, limit, "redlock raise", Resend::Once)
        }))
        .await;
        at_token + raised.iter().filter(|r| matches!(r, Ok(1))).count()
    }
}

/// Waits until a quorum of `subs` told their waiter, a node timeout (`limit`) after the first
/// word, or `until`.
async fn told(subs: &[Option<Subscription>], quorum: usize, until: Instant, limit: Duration) {
    let mut told: FuturesUnordered<_> = subs.iter().flatten().map(|s| s.notified()).collect();
    if told.is_empty() {
        tokio::time::sleep_until(until).await;
        return;
    }
    let (mut heard, mut until) = (0, until);
    while heard < quorum {
        tokio::select! {
            word = told.next() => {
                if word.is_none() {
                    break;
                }
                heard += 1;
                if heard == 1 {
                    until = until.min(Instant::now() + limit);
                }
            }
            _ = tokio::time::sleep_until(until) => break,
        }
    }
}

impl Claim {
    /// A subscribe on master `i` did not get through: tried again a second from now.
    fn subs_retry(&mut self, i: usize) {
        self.subscribe_after[i] = Instant::now() + Duration::from_secs(1);
    }
}

/// When whatever the claim's last round set has certainly expired on every master.
fn expired_by(claim: &Claim) -> Instant {
    claim.sent_at + moot_after(&[claim.expiry])
}

#[async_trait]
impl Queue for RedlockMutex {
    type Claim = Claim;
    type Output = GuardParts;

    async fn claim(&self, _req: &Request) -> Result<Claim> {
        let (id, n) = (self.client.new_owner(), self.client.masters.len());
        let now = Instant::now();
        Ok(Claim {
            owner: id.clone(),
            maybe: vec![false; n],
            sent_at: now,
            expiry: Duration::ZERO,
            token: 0,
            missed: vec![false; n],
            busy: 0,
            since: None,
            id,
            placed: false,
            subs: (0..n).map(|_| None).collect(),
            subscribe_after: vec![now; n],
            failing: None,
            pauses: Backoff::POLL.start(),
        })
    }

    async fn enqueue(&self, claim: &mut Claim, req: &Request) -> Result<Standing> {
        self.round(claim, req).await
    }

    /// Waits until a quorum of masters told this waiter its turn (on the lock's channel; each
    /// tells once it has deleted the lock, and a round any sooner would find it there), a
    /// node timeout after the first word, or until a random pause (`Backoff::POLL`) passed:
    /// the next round keeps its place, and takes the lock if it was freed without a word
    /// (other Redlock clients, an expiry). Subscriptions still missing are made meanwhile (a
    /// frozen master holds nothing up; a failed one is tried again a second later); a new one
    /// ends the wait at once, since a word sent before it was not heard.
    async fn wait(&self, claim: &mut Claim, req: &Request) -> Result<Woken> {
        let (n, quorum) = (self.client.masters.len(), self.client.quorum());
        // Told by a quorum, the waiter tries only to keep its place (and to find a lock freed
        // without a word): at the longest pause from the start.
        let heard = claim.subs.iter().flatten().count() >= quorum;
        let pause = if heard {
            let longest = Backoff::POLL.max();
            Backoff::new(longest, longest).start().next_pause()
        } else {
            claim.pauses.next_pause()
        };
        let pause = req.bound(Instant::now() + pause);
        let (masters, limit) = (&self.client.masters, self.client.settings.node_timeout);
        let (channel, id) = (&*self.keys.channel, &*claim.id);
        let now = Instant::now();
        let missing: Vec<usize> = (0..n)
            .filter(|i| {
                claim.subs[*i].is_none()
                    && claim.subscribe_after[*i] <= now
                    && masters.subs(*i).is_some()
            })
            .collect();
        let mut fresh: Vec<Option<Subscription>> = missing.iter().map(|_| None).collect();
        // Which subscribes failed (a cut-short one is tried again next time, not a second later).
        let mut failed = vec![false; missing.len()];
        {
            let attempts = missing.iter().zip(fresh.iter_mut()).zip(failed.iter_mut());
            let mut subscribing =
                Box::pin(join_all(attempts.map(|((i, slot), failed)| async move {
                    if let Some(subs) = masters.subs(*i) {
                        let joined = subs.listen(slot, channel, Some(id), Instant::now());
                        *failed = !matches!(tokio::time::timeout(limit, joined).await, Ok(Ok(_)));
                    }
                })));
            let mut listening = Box::pin(told(&claim.subs, quorum, pause, limit));
            let subscribed = tokio::select! {
                _ = &mut listening => false,
                _ = &mut subscribing => true,
            };
            drop(subscribing);
            if subscribed && !fresh.iter().any(Option::is_some) {
                listening.await;
            }
        }
        for ((i, sub), failed) in missing.into_iter().zip(fresh).zip(failed) {
            match sub {
                Some(sub) => claim.subs[i] = Some(sub),
                None if failed => claim.subs_retry(i),
                None => {}
            }
        }
        Ok(Woken::Look)
    }

    async fn standing(&self, claim: &mut Claim, req: &Request) -> Result<Standing> {
        self.round(claim, req).await
    }

    async fn hold(&self, claim: &mut Claim, req: &Request) -> Result<Option<GuardParts>> {
        let lease = req.lease();
        let watched = Watched {
            name: self.name.clone(),
            sent_at: claim.sent_at,
            expiry: lease.duration(),
            entry: Renewal {
                key: self.keys.lock.clone(),
                owner: claim.owner.clone(),
            },
        };
        let parts = self
            .client
            .watchdog
            .hold(watched, claim.token, lease, |id, _state| {
                Box::new(RedlockHeld {
                    client: self.client.clone(),
                    name: self.name.clone(),
                    keys: self.keys.clone(),
                    owner: claim.owner.clone(),
                    id,
                    lease: std::sync::Mutex::new(lease.duration()),
                })
            });
        claim.maybe.fill(false);
        if claim.placed && claim.missed.contains(&true) {
            // Its place goes where the winning round did not take the lock (and so kept its
            // place: a release there would tell it, and nobody would come). "-" owns no lock.
            let release = Release {
                owner: "-".into(),
                waiter: claim.id.clone(),
                tell: false,
            };
            let until = Instant::now() + moot_after(&[self.place()]);
            self.client
                .release_later(self.keys.clone(), release, claim.missed.clone(), until);
        }
        Ok(Some(parts))
    }

    async fn leave(&self, claim: &mut Claim, _exit: Exit) -> Result<()> {
        self.release_claim(claim, true, true).await;
        Ok(())
    }

    fn abandon(&self, claim: Claim) {
        let expires = expired_by(&claim);
        // Its place goes too (where it holds nothing, the release only does that).
        let on = if claim.placed {
            vec![true; claim.maybe.len()]
        } else {
            claim.maybe
        };
        let release = Release {
            owner: claim.owner,
            waiter: claim.id,
            tell: true,
        };
        self.client
            .release_later(self.keys.clone(), release, on, expires);
    }

    fn lock_name(&self) -> &str {
        &self.name
    }
}
