//! The mutex: Curator's InterProcessMutex protocol, with the ownership check and rollover-safe
//! order Curator lacks.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::{AcquireOptions, DistLock, Error, HoldRegistry, Lease, LockGuard, Result};
use tokio::time::Instant;
use tracing::Instrument;

use crate::held;
use crate::node::MUTEX_MARKER;
use crate::queue::{self, Rule, Spec};
use crate::session::Session;

pub(crate) const MARKERS: &[&str] = &[MUTEX_MARKER];

/// Rejects what ZooKeeper locks cannot do, and turns the wait budget into a deadline.
pub(crate) fn check_opts(opts: &AcquireOptions) -> Result<Option<Instant>> {
    if let Lease::Fixed(_) = opts.lease {
        return Err(Error::unsupported(
            "ZooKeeper locks live as long as the session (ephemeral nodes); fixed leases are not offered",
        ));
    }
    Ok(opts.wait_budget().map(|d| Instant::now() + d))
}

#[derive(Debug)]
pub(crate) struct ZkMutex {
    pub session: Arc<Session>,
    pub name: String,
    pub dir: String,
    pub holds: HoldRegistry,
}

impl ZkMutex {
    fn spec(&self) -> Spec<'_> {
        Spec {
            dir: &self.dir,
            marker: MUTEX_MARKER,
            markers: MARKERS,
            rule: Rule::Exclusive,
        }
    }
}

#[async_trait]
impl DistLock for ZkMutex {
    fn name(&self) -> &str {
        &self.name
    }

    async fn acquire(&self, opts: &AcquireOptions) -> Result<Option<LockGuard>> {
        let deadline = check_opts(opts)?;
        let span = tracing::debug_span!("lockkit.acquire", lock = %self.name, backend = "zk");
        let spec = self.spec();
        let contend = queue::contend(&self.session, &spec, deadline);
        let Some(node) = contend.instrument(span).await? else {
            return Ok(None);
        };
        let guard = LockGuard::new(held::parts(
            &self.session,
            &self.name,
            vec![node],
            opts.lease,
            None,
        ));
        self.holds.track(&guard);
        Ok(Some(guard))
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(!queue::participants(&self.session, &self.dir, MARKERS)
            .await?
            .is_empty())
    }

    async fn hold_count(&self) -> Result<u32> {
        Ok(self.holds.hold_count())
    }

    async fn force_unlock(&self) -> Result<bool> {
        force_delete(&self.session, &self.dir, MARKERS, |all| {
            all.first().into_iter().cloned().collect()
        })
        .await
    }
}

/// Deletes the holders `pick` chooses among the participants. Returns whether any was deleted.
pub(crate) async fn force_delete(
    session: &Session,
    dir: &str,
    markers: &[&str],
    pick: impl Fn(&[crate::node::Participant]) -> Vec<crate::node::Participant>,
) -> Result<bool> {
    let all = queue::participants(session, dir, markers).await?;
    let client = session.client()?;
    let mut any = false;
    for p in pick(&all) {
        any |= queue::delete_node(
            &client,
            &format!("{dir}/{}", p.name),
            session.cfg.command_timeout,
        )
        .await?;
    }
    Ok(any)
}
