//! `Election`: a named leader election. Candidates campaign in arrival order (where the
//! backend queues fairly); the one that leads holds a [`Leadership`], whose term is a fencing
//! token strictly increasing per election name, and whose lost signal fires when its lease,
//! session or key is gone, as a lock guard's does.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::guard::Leadership;
use crate::inspect::Primitive;
use crate::kernel::Kernel;
use crate::leader::{Leader, LeaderChanges};
use crate::mutex::forever;
use crate::options::AcquireOptions;
use crate::ownership::GuardCore;
use crate::spi::RawElection;
use crate::telemetry::{self, Identity};

/// A named leader election, made by [`Locks::election`](crate::Locks::election). Cheap to
/// clone; clones are the same handle.
///
/// Leadership belongs to the campaign (the [`Leadership`] it returns), never to a task or a
/// handle: two campaigns through one handle are two candidates.
#[derive(Clone)]
pub struct Election {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    raw: Box<dyn RawElection>,
    kernel: Arc<Kernel>,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.inner.name)
            .field("backend", &self.inner.kernel.kind)
            .finish()
    }
}

impl Election {
    pub(crate) fn new(kernel: Arc<Kernel>, name: &str, raw: Box<dyn RawElection>) -> Self {
        Election {
            inner: Arc::new(Inner {
                name: name.into(),
                raw,
                kernel,
            }),
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Campaigns with `value` until this candidate leads or the wait budget of `opts` runs out
    /// (`Ok(None)`: contention is not an error). The lease of `opts` is the leadership's.
    ///
    /// # Cancel safety
    /// Dropping the future withdraws the candidate: nothing is left behind, and a leadership
    /// granted meanwhile is given up at once.
    pub async fn campaign_with(
        &self,
        value: impl Into<Vec<u8>>,
        opts: &AcquireOptions,
    ) -> Result<Option<Leadership>> {
        let i = &self.inner;
        let value = value.into();
        let value = &value;
        let own = i
            .kernel
            .acquire(Primitive::Election, &i.name, opts, 1, |req| async move {
                i.raw.campaign(value, &req).await
            })
            .await?;
        Ok(own.map(|own| {
            telemetry::elected(&self.identity(), own.token.0);
            Leadership {
                core: GuardCore::new(own),
            }
        }))
    }

    /// Campaigns until this candidate leads, with the handle's default lease.
    ///
    /// # Cancel safety
    /// As [`campaign_with`](Self::campaign_with).
    pub async fn campaign(&self, value: impl Into<Vec<u8>>) -> Result<Leadership> {
        forever(self.campaign_with(value, &AcquireOptions::new()).await?)
    }

    /// Campaigns for at most `wait`: `Ok(None)` when another candidate still leads then.
    pub async fn campaign_for(
        &self,
        value: impl Into<Vec<u8>>,
        wait: Duration,
    ) -> Result<Option<Leadership>> {
        self.campaign_with(value, &AcquireOptions::new().wait(wait))
            .await
    }

    /// The current leader (its value and term), or `None` when nobody leads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        self.inner.kernel.check_open()?;
        self.inner.raw.leader().await
    }

    /// Every change of leader from now on, the current leader first: see [`LeaderChanges`].
    pub async fn observe(&self) -> Result<LeaderChanges> {
        self.inner.kernel.check_open()?;
        let changes = self.inner.raw.observe().await?;
        Ok(changes.counted(self.identity()))
    }

    /// Admin: demotes whoever leads, as if its node, key or lock file were deleted: the
    /// leader's [`Leadership`] turns Lost (its `lost()` fires, `proclaim` fails) when its
    /// backend notices, and the next candidate leads in a higher term. Returns whether anyone
    /// led. For an operator removing a stuck leader (`lockkit force-unlock NAME --kind
    /// election`): the leader's work is told, not stopped, so it must watch `lost()` and fence
    /// what it writes with its term. A Curator or Go leader in a shared election is deleted
    /// too but never told (neither watches its own node or key): it goes on believing it leads.
    pub async fn force_resign(&self) -> Result<bool> {
        self.inner.kernel.check_open()?;
        let done = self.inner.raw.force_resign().await?;
        telemetry::force_unlocked(&self.identity(), done);
        Ok(done)
    }

    /// How telemetry names this election.
    fn identity(&self) -> Identity {
        Identity::new(
            self.inner.kernel.kind,
            Primitive::Election,
            self.inner.name.clone(),
        )
    }
}

impl Leadership {
    /// The term of this leadership: its fencing token, strictly increasing per election name
    /// across every change of leader (on Redis with Sentinel, as durable as its asynchronous
    /// replication, like a lock's token). Pass it to what the leader writes to.
    pub fn term(&self) -> FencingToken {
        self.core.own.token
    }

    /// Replaces the value this leader proclaims, without giving up leadership. Fails with
    /// `LockLost` when leadership was lost (the value is then not changed).
    ///
    /// On ZooKeeper this sets the data of the leader's node, which Curator's `LeaderLatch`
    /// candidates waiting behind it misread (their one-shot watch is spent on the change and
    /// they miss the later deletion): in an election shared with Curator candidates, don't
    /// proclaim.
    pub async fn proclaim(&self, value: impl Into<Vec<u8>>) -> Result<()> {
        self.core.proclaim(&value.into()).await
    }

    /// Gives leadership up at once, so the next candidate leads within a round trip. Returns
    /// whether this candidate still led until then (`false`: it had lost leadership already).
    ///
    /// # Cancel safety
    /// If the future is dropped before it finishes, the resignation goes on in the background.
    pub async fn resign(self) -> Result<bool> {
        match self.core.release().await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::LockLost => Ok(false),
            Err(e) => Err(e),
        }
    }
}
