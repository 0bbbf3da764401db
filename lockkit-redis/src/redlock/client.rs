//! What every handle and guard of one Redlock client shares: the masters, the scripts, the
//! watchdog and the reaper, and the calls several of them make (release, the reaper's retries).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::future::join_all;
use lockkit_core::spi::{Reaper, Watchdog};
use lockkit_core::{Error, ErrorKind};
use redis::Script;
use tokio::time::Instant;

use super::config::Settings;
use super::masters::{Masters, Resend};
use crate::script_set::source;

/// What the watchdog keeps about one held Redlock lock.
#[derive(Clone, Debug)]
pub(crate) struct Renewal {
    pub(crate) key: Arc<str>,
    pub(crate) owner: Arc<str>,
}

/// The keys of one lock on every master: the lock (a string holding its owner, as every
/// Redlock client writes it), its fencing counter, the lockkit waiters (ordered by when they
/// began waiting) and their deadlines, and the channel on which a release tells the first
/// waiter (see `scripts/redlock_acquire.lua`).
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    pub(crate) lock: Arc<str>,
    pub(crate) fence: Arc<str>,
    pub(crate) waiters: Arc<str>,
    pub(crate) deadlines: Arc<str>,
    pub(crate) channel: Arc<str>,
    /// The stem of an owner's release latch (`<prefix>:redlock-released:{<name>}:`).
    released: Arc<str>,
}

impl Keys {
    /// `<prefix>:redlock:{<name>}`, `<prefix>:redlock-fence:{<name>}`,
    /// `<prefix>:redlock-waiters:{<name>}`, `<prefix>:redlock-deadlines:{<name>}`, the
    /// channel `<prefix>:redlock-channel:{<name>}` and the release latches
    /// `<prefix>:redlock-released:{<name>}:<owner>`.
    pub(crate) fn of(prefix: &str, name: &str) -> Keys {
        let tag = crate::keys::tag(name);
        Keys {
            lock: format!("{prefix}:redlock:{tag}").into(),
            fence: format!("{prefix}:redlock-fence:{tag}").into(),
            waiters: format!("{prefix}:redlock-waiters:{tag}").into(),
            deadlines: format!("{prefix}:redlock-deadlines:{tag}").into(),
            channel: format!("{prefix}:redlock-channel:{tag}").into(),
            released: format!("{prefix}:redlock-released:{tag}:").into(),
        }
    }

    /// `owner`'s release latch: set for a while by the release that deleted its key, so a
    /// release sent again finds that it was released, not lost.
    pub(crate) fn released(&self, owner: &str) -> String {
        format!("{}{owner}", self.released)
    }
}

/// One release to send to the masters.
#[derive(Clone, Debug)]
pub(crate) struct Release {
    /// Whose key goes (`"-"`: nobody's).
    pub(crate) owner: Arc<str>,
    /// The id of a waiter that leaves, whose place goes with it (`""`: none).
    pub(crate) waiter: Arc<str>,
    /// Whether a master where the lock is then free tells the first waiter: not when the
    /// sender knows that someone else holds it on a quorum.
    pub(crate) tell: bool,
}

impl Release {
    /// A holder's release of `owner`'s key, which tells the first waiter.
    pub(crate) fn of(owner: &Arc<str>) -> Release {
        Release {
            owner: owner.clone(),
            waiter: "".into(),
            tell: true,
        }
    }
}

/// What the masters a release went to answered.
pub(crate) struct Released {
    /// How many deleted the key.
    pub(crate) yes: usize,
    /// Which did not answer (the reaper goes on with them).
    pub(crate) failed: Vec<bool>,
    /// Why one did not.
    pub(crate) cause: Option<Error>,
}

/// Fewer masters than a quorum could be counted on: a retryable `Connection` or `Timeout`
/// error (as `cause` was) saying `what`, or `Auth` when a master refused the credentials.
pub(crate) fn short_of_quorum(what: String, cause: Option<Error>) -> Error {
    let kind = match cause.as_ref().map(Error::kind) {
        Some(ErrorKind::Timeout) => ErrorKind::Timeout,
        Some(ErrorKind::Auth) => ErrorKind::Auth,
        _ => ErrorKind::Connection,
    };
    let e = Error::new(kind, format!("redlock: {what}")).with_retryable(kind != ErrorKind::Auth);
    match cause {
        Some(c) => e.with_source(c),
        None => e,
    }
}

/// The compiled Redlock scripts.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) raise: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) force: Script,
    pub(crate) probe: Script,
}

/// What every handle and guard of one client shares.
#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) masters: Masters,
    pub(crate) settings: Settings,
    pub(crate) scripts: Scripts,
    pub(crate) watchdog: Arc<Watchdog<Renewal>>,
    pub(crate) reaper: Reaper,
    client_id: String,
    next_owner: AtomicU64,
}

impl Client {
    /// The client `client_id` over `masters`, its ownerships kept by `watchdog`.
    pub(crate) fn new(
        masters: Masters,
        settings: Settings,
        client_id: String,
        watchdog: Arc<Watchdog<Renewal>>,
    ) -> Client {
        Client {
            masters,
            settings,
            scripts: Scripts {
                acquire: Script::new(source::REDLOCK_ACQUIRE),
                raise: Script::new(source::REDLOCK_RAISE),
                release: Script::new(source::REDLOCK_RELEASE),
                renew: Script::new(source::REDLOCK_RENEW),
                force: Script::new(source::REDLOCK_FORCE),
                probe: Script::new(source::REDLOCK_PROBE),
            },
            watchdog,
            reaper: Reaper::default(),
            client_id,
            next_owner: AtomicU64::new(1),
        }
    }

    /// A new owner value, unique to one acquire: `<client-uuid>:<n>`.
    pub(crate) fn new_owner(&self) -> Arc<str> {
        let n = self.next_owner.fetch_add(1, Ordering::Relaxed);
        format!("{}:{n}", self.client_id).into()
    }

    /// The client's id, the first part of its owner values.
    pub(crate) fn client_id(&self) -> &str {
        &self.client_id
    }

    /// How many masters make a majority.
    pub(crate) fn quorum(&self) -> usize {
        self.settings.quorum()
    }

    /// Sends `release` to the masters `on` marks (all when `None`), in parallel within the node
    /// timeout: how many released the key, and which did not answer.
    pub(crate) async fn release_on(
        &self,
        keys: &Keys,
        release: &Release,
        on: Option<&[bool]>,
    ) -> Released {
        let mut inv = self.scripts.release.prepare_invoke();
        inv.key(&*keys.lock)
            .key(&*keys.waiters)
            .key(&*keys.deadlines)
            .key(keys.released(&release.owner))
            .arg(&*release.owner)
            .arg(&*keys.channel)
            .arg(&*release.waiter)
            .arg(if release.tell { "1" } else { "0" })
            .arg(self.settings.latch_ttl().as_millis() as u64);
        let inv = &inv;
        let limit = self.settings.node_timeout;
        let answers = join_all((0..self.masters.len()).map(|i| async move {
            if on.is_some_and(|on| !on[i]) {
                return None;
            }
            Some(
                self.masters
                    .on::<i64>(i, inv, limit, "redlock release", Resend::Once)
                    .await,
            )
        }))
        .await;
        let mut released = Released {
            yes: 0,
            failed: vec![false; answers.len()],
            cause: None,
        };
        for (i, a) in answers.into_iter().enumerate() {
            match a {
                Some(Ok(1)) => released.yes += 1,
                Some(Ok(_)) | None => {}
                Some(Err(e)) => {
                    released.failed[i] = true;
                    released.cause = Some(e);
                }
            }
        }
        released
    }

    /// Hands the reaper sending `release` to the masters `on` marks, until each answered or
    /// the lock has certainly expired there (`expires`).
    pub(crate) fn release_later(
        self: &Arc<Self>,
        keys: Keys,
        release: Release,
        on: Vec<bool>,
        expires: Instant,
    ) {
        if !on.contains(&true) {
            return;
        }
        let client = self.clone();
        let left = Arc::new(std::sync::Mutex::new(on));
        self.reaper
            .retry_until("release a Redlock lock", expires, move || {
                let (client, keys, release, left) =
                    (client.clone(), keys.clone(), release.clone(), left.clone());
                async move {
                    let on = left.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let released = client.release_on(&keys, &release, Some(&on)).await;
                    *left.lock().unwrap_or_else(|e| e.into_inner()) = released.failed;
                    match released.cause {
                        Some(e) => Err(e),
                        None => Ok(()),
                    }
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_a_name() {
        let k = Keys::of("lockkit", "a{b}");
        assert_eq!(&*k.lock, "lockkit:redlock:{a%7Bb%7D}");
        assert_eq!(&*k.fence, "lockkit:redlock-fence:{a%7Bb%7D}");
        assert_eq!(&*k.waiters, "lockkit:redlock-waiters:{a%7Bb%7D}");
        assert_eq!(&*k.deadlines, "lockkit:redlock-deadlines:{a%7Bb%7D}");
        assert_eq!(&*k.channel, "lockkit:redlock-channel:{a%7Bb%7D}");
    }
}
