//! One held Redlock lock: released on every master, extended on a quorum.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockkit_core::spi::{moot_after, Held, Renewed};
use lockkit_core::{async_trait, Error, Result};
use tokio::time::Instant;

use super::client::{short_of_quorum, Client, Keys, Release, Released, Renewal};
use super::renew::{renew_on_all, verdict_of};

/// One held lock.
#[derive(Debug)]
pub(crate) struct RedlockHeld {
    pub(crate) client: Arc<Client>,
    pub(crate) name: Arc<str>,
    pub(crate) keys: Keys,
    pub(crate) owner: Arc<str>,
    /// Its id in the watchdog.
    pub(crate) id: u64,
    /// The lease the masters were last asked for (an extend changes it).
    pub(crate) lease: Mutex<Duration>,
}

impl RedlockHeld {
    /// When the lock has certainly expired on every master that has it, once the watchdog no
    /// longer renews it: every renewal was sent before now (a retried one may have reached a
    /// master after the guard's deadline stopped moving), so a lease from now, and the margin
    /// for the masters' clocks.
    fn expires(&self) -> Instant {
        let lease = *self.lease.lock().unwrap_or_else(|e| e.into_inner());
        Instant::now() + moot_after(&[lease])
    }
}

/// A quorum could not be reached, and not every master answered: the outcome is unknown.
fn unsure(what: &str, yes: usize, n: usize, quorum: usize, cause: Option<Error>) -> Error {
    short_of_quorum(
        format!("the {what} reached {yes} of {n} masters; a quorum is {quorum}"),
        cause,
    )
}

#[async_trait]
impl Held for RedlockHeld {
    /// Released on every master, including those the renewals did not reach. Answers
    /// `LockLost` when fewer than a quorum had it and every master answered.
    async fn release(&self) -> Result<()> {
        let client = &self.client;
        client.watchdog.unregister(self.id);
        let release = Release::of(&self.owner);
        let Released { yes, failed, cause } = client.release_on(&self.keys, &release, None).await;
        let unknown = failed.iter().filter(|f| **f).count();
        client.release_later(self.keys.clone(), release, failed, self.expires());
        let (n, quorum) = (client.masters.len(), client.quorum());
        if yes >= quorum {
            Ok(())
        } else if yes + unknown >= quorum {
            Err(unsure("release", yes, n, quorum, cause))
        } else {
            Err(Error::lost(&self.name))
        }
    }

    /// Extends on every master; counts once a quorum has it.
    async fn extend(&self, lease: Duration) -> Result<()> {
        let client = &self.client;
        let renewal = Renewal {
            key: self.keys.lock.clone(),
            owner: self.owner.clone(),
        };
        let sent_at = Instant::now();
        let limit = client.settings.command_timeout;
        let answers = renew_on_all(client, &[(&renewal, lease)], limit).await;
        match verdict_of(client, &answers, 0) {
            Renewed::Yes => {
                *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = lease;
                client.watchdog.extended(self.id, sent_at, lease);
                Ok(())
            }
            Renewed::Gone => {
                client.watchdog.lost(self.id);
                Err(Error::lost(&self.name))
            }
            Renewed::Unsure => {
                // Masters that did take it keep the lock that much longer.
                let mut kept = self.lease.lock().unwrap_or_else(|e| e.into_inner());
                *kept = (*kept).max(lease);
                drop(kept);
                let yes = answers
                    .iter()
                    .filter(|a| matches!(a, Ok(r) if r.first() == Some(&1)))
                    .count();
                let cause = answers.into_iter().find_map(|a| a.err());
                Err(unsure(
                    "extend",
                    yes,
                    client.masters.len(),
                    client.quorum(),
                    cause,
                ))
            }
        }
    }
}
