//! Leader election: a native mutex on the election's own keys ([`LockKeys::election`]) whose
//! owner leads. Candidates queue in arrival order; the script that grants the lock also writes
//! the leader hash (owner, term, value) and announces the change on the election's channel, and
//! the term is the lock's fencing token. A leadership is renewed with its leader hash and turns
//! Lost when either is gone. Observers listen on the channel and read the leader again on each
//! announcement, on each reconnect, and when the leader's lease ends (a leader that died is
//! announced by nobody). A leader listens too (`leading.rs`), so that an admin's
//! `force_resign` (announced) demotes it at once rather than at its next renewal.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::{GuardParts, LeaderFeed, Look, RawElection, RawMutex, Request};
use lockkit_core::{async_trait, Leader, LeaderChanges, Result};
use tokio::time::Instant;

use crate::client::Inner;
use crate::keys::LockKeys;
use crate::leading::{listen, read};
use crate::mutex::RedisMutex;
use crate::pubsub::Subscription;

/// An election handle. Creating one talks to no server.
#[derive(Debug)]
pub(crate) struct RedisElection {
    m: RedisMutex,
}

impl RedisElection {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> Result<Self> {
        Ok(RedisElection {
            m: RedisMutex::election(inner, name)?,
        })
    }
}

#[async_trait]
impl RawElection for RedisElection {
    async fn campaign(&self, value: &[u8], req: &Request) -> Result<Option<GuardParts>> {
        crate::mutex::campaign(&self.m, value, req).await
    }

    /// One script call: the leader hash, if it names the lock's owner.
    async fn leader(&self) -> Result<Option<Leader>> {
        Ok(read(&self.m.inner, &self.m.keys).await?.0)
    }

    /// Subscribes first, so no announcement after the first read is missed.
    async fn observe(&self) -> Result<LeaderChanges> {
        let (inner, keys) = (self.m.inner.clone(), self.m.keys.clone());
        let sub = listen(&inner, &keys).await?;
        let (feed, changes) = LeaderFeed::channel();
        let mut closed = inner.closed.subscribe();
        let stop = async move {
            let _ = closed.wait_for(|c| *c).await;
        };
        tokio::spawn(feed.follow(Announced { inner, keys, sub }, stop));
        Ok(changes)
    }

    /// The mutex's force-unlock, which for an election's keys also deletes the leader hash and
    /// announces the change: the leader hears it (else its next renewal finds the keys gone).
    async fn force_resign(&self) -> Result<bool> {
        self.m.force_unlock().await
    }
}

/// An observer's look: the leader as the server has it, then a wait for an announcement, a
/// reconnect (the subscription wakes it) or the end of the lock's lease, whichever comes first.
struct Announced {
    inner: Arc<Inner>,
    keys: Arc<LockKeys>,
    sub: Subscription,
}

#[async_trait]
impl Look for Announced {
    async fn look(&mut self, feed: &mut LeaderFeed) -> Result<()> {
        let (leader, ends) = read(&self.inner, &self.keys).await?;
        feed.send(leader);
        match ends {
            // Just past the lease's end: a lock that expired is free by then.
            Some(left) => {
                let lapse = tokio::time::sleep_until(Instant::now() + left + LAPSE_MARGIN);
                tokio::select! {
                    () = self.sub.notified() => {}
                    () = lapse => {}
                }
            }
            None => self.sub.notified().await,
        }
        Ok(())
    }
}

/// How long after a lease's end an observer looks again.
const LAPSE_MARGIN: Duration = Duration::from_millis(5);
