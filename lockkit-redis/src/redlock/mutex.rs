//! The Redlock mutex: one acquire is a round of `SET NX PX` (with its token, in
//! `scripts/redlock_acquire.lua`) on every master in parallel, held once a quorum took it with
//! validity left; a failed round is released on every master that may have it, and tried again
//! after a random pause. The core's driver runs the rounds ([`Queue`]): a round is `enqueue` or
//! `standing`, the release and the pause are `wait`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use lockkit_core::spi::{
    drive, margin, Exit, GuardParts, Queue, RawMutex, Request, Standing, Watched, Woken,
};
use lockkit_core::{async_trait, Backoff, Error, ErrorKind, Result, Retry};
use tokio::time::Instant;

use super::client::{Client, Keys, Renewal};
use super::held::RedlockHeld;

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

    /// One master's view of the lock from each master: its remaining expiry (`Some(None)`: no
    /// expiry), `None` where it is free.
    async fn probe(&self) -> Result<Vec<Option<Option<Duration>>>> {
        let mut inv = self.client.scripts.probe.prepare_invoke();
        inv.key(&*self.keys.lock);
        let limit = self.client.settings.command_timeout;
        let answers: Vec<Result<i64>> = self.client.masters.all(&inv, limit, "redlock probe").await;
        let quorum = self.client.quorum();
        let mut seen = Vec::new();
        let mut cause = None;
        for a in answers {
            match a {
                Ok(-2) => seen.push(None),
                Ok(ms) => seen.push(Some((ms >= 0).then(|| Duration::from_millis(ms as u64)))),
                Err(e) if e.kind() == ErrorKind::WrongType => return Err(e),
                Err(e) => cause = Some(e),
            }
        }
        if seen.len() < quorum {
            return Err(too_few(
                "probe",
                seen.len(),
                self.client.masters.len(),
                quorum,
                cause,
            ));
        }
        Ok(seen)
    }
}

/// Fewer masters answered than make a quorum.
fn too_few(what: &str, answered: usize, n: usize, quorum: usize, cause: Option<Error>) -> Error {
    let kind = cause
        .as_ref()
        .map_or(ErrorKind::Connection, |c| match c.kind() {
            ErrorKind::Timeout => ErrorKind::Timeout,
            ErrorKind::Auth => ErrorKind::Auth,
            _ => ErrorKind::Connection,
        });
    let e = Error::new(
        kind,
        format!(
            "redlock: only {answered} of {n} masters answered the {what}; a quorum is {quorum}"
        ),
    )
    .with_retryable(kind != ErrorKind::Auth);
    match cause {
        Some(c) => e.with_source(c),
        None => e,
    }
}

#[async_trait]
impl RawMutex for RedlockMutex {
    /// # Cancel safety
    /// Dropping the future leaves no lock behind: whatever a round may have set is released on
    /// those masters in the background (or expires with its lease).
    async fn acquire(&self, req: &Request) -> Result<Option<GuardParts>> {
        drive(self, req).await
    }

    /// Whether a quorum of masters has the lock.
    async fn is_locked(&self) -> Result<bool> {
        let seen = self.probe().await?;
        Ok(seen.iter().flatten().count() >= self.client.quorum())
    }

    /// Deletes the lock on every master; whether a quorum had it.
    async fn force_unlock(&self) -> Result<bool> {
        let mut inv = self.client.scripts.force.prepare_invoke();
        inv.key(&*self.keys.lock);
        let limit = self.client.settings.command_timeout;
        let answers: Vec<Result<i64>> = self
            .client
            .masters
            .all(&inv, limit, "redlock force_unlock")
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
            let e = Error::new(
                cause.as_ref().map_or(ErrorKind::Connection, Error::kind),
                format!(
                    "redlock: force_unlock reached {answered} of {n} masters; the others may \
                     still hold the lock"
                ),
            )
            .with_retryable(true);
            return Err(match cause {
                Some(c) => e.with_source(c),
                None => e,
            });
        }
        Ok(had >= quorum)
    }

    /// How long a quorum of masters keeps the lock: the quorum-th longest remaining expiry.
    async fn remaining_lease(&self) -> Result<Option<Duration>> {
        let mut held: Vec<Duration> = self
            .probe()
            .await?
            .into_iter()
            .flatten()
            .map(|ms| ms.unwrap_or(Duration::MAX))
            .collect();
        let quorum = self.client.quorum();
        if held.len() < quorum {
            return Ok(None);
        }
        held.sort_unstable_by(|a, b| b.cmp(a));
        Ok(Some(held[quorum - 1]))
    }
}

/// One acquire's rounds.
pub(crate) struct Claim {
    /// Unique to this acquire: a master that has it from an earlier round answers as if taken
    /// now.
    owner: Arc<str>,
    /// The masters that may hold it: they took it, or did not answer.
    maybe: Vec<bool>,
    /// The last round: when it was sent, and the expiry it asked for.
    sent_at: Instant,
    expiry: Duration,
    /// The token a quorum issued.
    token: u64,
    /// Rounds sent so far: the first of an acquire that may wait gives way to those waiting.
    rounds: u32,
    pauses: Retry,
}

impl RedlockMutex {
    /// Releases the claim on the masters that may have it, in parallel; the reaper goes on with
    /// those that did not answer.
    async fn release_claim(&self, claim: &mut Claim) {
        if !claim.maybe.contains(&true) {
            return;
        }
        let answers = self
            .client
            .release_on(&self.keys, &claim.owner, Some(&claim.maybe))
            .await;
        let failed: Vec<bool> = answers.iter().map(|a| matches!(a, Some(Err(_)))).collect();
        claim.maybe = vec![false; claim.maybe.len()];
        self.client.release_later(
            self.keys.clone(),
            claim.owner.clone(),
            failed,
            expired_by(claim),
        );
    }

    /// One round: the lock on every master, the token raised where a master issued a lower
    /// one, and the validity left.
    async fn round(&self, claim: &mut Claim, req: &Request) -> Result<Standing> {
        let client = &self.client;
        let (n, quorum) = (client.masters.len(), client.quorum());
        let lease = req.lease().duration();
        claim.expiry = lease;
        // Any master may take it from the moment the round is sent; those that answer "busy"
        // certainly did not.
        claim.maybe.fill(true);
        let round = match (req.waits(), claim.rounds) {
            (false, _) => "try",
            (true, 0) => "new",
            (true, _) => "wait",
        };
        claim.rounds += 1;
        // Waiters mark that they wait for a few of their pauses.
        let mark = Backoff::POLL.max() * 4 + client.settings.node_timeout;
        let mut inv = client.scripts.acquire.prepare_invoke();
        inv.key(&*self.keys.lock)
            .key(&*self.keys.fence)
            .key(&*self.keys.waiting)
            .arg(&*claim.owner)
            .arg(claim.expiry.as_millis().max(1) as u64)
            .arg(client.settings.fence_ttl.as_millis() as u64)
            .arg(round)
            .arg(mark.as_millis() as u64);
        claim.sent_at = Instant::now();
        let limit = client.settings.node_timeout;
        let answers: Vec<Result<String>> = client.masters.all(&inv, limit, "redlock acquire").await;
        let mut tokens: Vec<Option<u64>> = vec![None; n];
        let (mut busy, mut cause, mut foreign) = (0, None, None);
        for (i, a) in answers.into_iter().enumerate() {
            match a.and_then(|s| {
                s.parse::<u64>().map_err(|_| {
                    Error::new(
                        ErrorKind::Backend,
                        format!("redlock: a master answered the acquire with {s:?}"),
                    )
                })
            }) {
                Ok(0) => {
                    busy += 1;
                    claim.maybe[i] = false;
                }
                Ok(t) => {
                    tokens[i] = Some(t);
                    claim.maybe[i] = true;
                }
                Err(e) if e.kind() == ErrorKind::WrongType => {
                    claim.maybe[i] = false;
                    foreign = Some(e);
                }
                Err(e) => {
                    claim.maybe[i] = true;
                    cause = Some(e);
                }
            }
        }
        if let Some(e) = foreign {
            return Err(e);
        }
        let took = tokens.iter().flatten().count();
        if took >= quorum {
            let token = tokens.iter().flatten().copied().max().unwrap_or(0);
            if self.raise(claim, &tokens, token).await >= quorum
                && Instant::now() < claim.sent_at + lease - margin(lease)
            {
                claim.token = token;
                return Ok(Standing::Owner);
            }
            // The validity is spent (or the token could not be raised on a quorum): released
            // by the next wait or the leave, and tried again if the budget allows.
            return Ok(Standing::Waiting);
        }
        if took + busy < quorum {
            return Err(too_few("acquire", took + busy, n, quorum, cause));
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
        let raised = join_all(
            lagging
                .iter()
                .map(|i| client.masters.on::<i64>(*i, inv, limit, "redlock raise")),
        )
        .await;
        at_token + raised.iter().filter(|r| matches!(r, Ok(1))).count()
    }
}

/// When whatever the claim's last round set has certainly expired on every master.
fn expired_by(claim: &Claim) -> Instant {
    claim.sent_at + claim.expiry + margin(claim.expiry)
}

#[async_trait]
impl Queue for RedlockMutex {
    type Claim = Claim;
    type Output = GuardParts;

    async fn claim(&self, _req: &Request) -> Result<Claim> {
        Ok(Claim {
            owner: self.client.new_owner(),
            maybe: vec![false; self.client.masters.len()],
            sent_at: Instant::now(),
            expiry: Duration::ZERO,
            token: 0,
            rounds: 0,
            pauses: Backoff::POLL.start(),
        })
    }

    async fn enqueue(&self, claim: &mut Claim, req: &Request) -> Result<Standing> {
        self.round(claim, req).await
    }

    /// Releases what the last round took, then pauses at random (`Backoff::POLL`): Redlock has nothing
    /// to wait on.
    async fn wait(&self, claim: &mut Claim, req: &Request) -> Result<Woken> {
        self.release_claim(claim).await;
        let pause = claim.pauses.next_pause();
        tokio::time::sleep_until(req.bound(Instant::now() + pause)).await;
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
            .hold(watched, claim.token, lease, |id, state| {
                Box::new(RedlockHeld {
                    client: self.client.clone(),
                    name: self.name.clone(),
                    keys: self.keys.clone(),
                    owner: claim.owner.clone(),
                    id,
                    lease: std::sync::Mutex::new(lease.duration()),
                    state,
                })
            });
        claim.maybe.fill(false);
        Ok(Some(parts))
    }

    async fn leave(&self, claim: &mut Claim, _exit: Exit) -> Result<()> {
        self.release_claim(claim).await;
        Ok(())
    }

    fn abandon(&self, claim: Claim) {
        let expires = expired_by(&claim);
        self.client
            .release_later(self.keys.clone(), claim.owner, claim.maybe, expires);
    }

    fn lock_name(&self) -> &str {
        &self.name
    }
}
