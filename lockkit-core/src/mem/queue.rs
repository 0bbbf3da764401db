//! The `mem://` queue as the acquire driver sees it: the engine grants at once or queues a
//! waiter whose grant arrives on a channel, so a grant needs no second look.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::oneshot::{self, error::TryRecvError};
use tokio::sync::Notify;

use super::engine::{Engine, Grant, Key, Mode, Step};
use super::held::parts;
use crate::driver::{drive, Exit, Queue, Standing, Woken};
use crate::error::{Error, ErrorKind, Result};
use crate::spi::{GuardParts, Request};

/// One acquire's view of one resource.
pub(super) struct MemQueue<'a> {
    engine: &'a Arc<Engine>,
    key: &'a Key,
    mode: Mode,
    /// The size a semaphore handle asks for (`None`: the stored size).
    size: Option<u32>,
    /// An election candidate's value (empty for locks).
    value: &'a [u8],
}

/// A claim: its place in the engine's queue, and its grant once one arrived.
#[derive(Default)]
pub(super) struct Claim {
    queued: Option<(u64, oneshot::Receiver<Result<Grant>>, Arc<Notify>)>,
    grant: Option<Grant>,
}

impl<'a> MemQueue<'a> {
    pub(super) fn new(
        engine: &'a Arc<Engine>,
        key: &'a Key,
        mode: Mode,
        size: Option<u32>,
        value: &'a [u8],
    ) -> Self {
        MemQueue {
            engine,
            key,
            mode,
            size,
            value,
        }
    }

    /// Acquires through the driver.
    pub(super) async fn acquire(&self, req: &Request) -> Result<Option<GuardParts>> {
        drive(self, req).await
    }
}

/// What ended a wait.
enum Wake {
    Grant(std::result::Result<Result<Grant>, oneshot::error::RecvError>),
    /// A holder's lease end came in or moved.
    Moved,
    /// The first holder's fixed lease ended.
    Ended,
}

fn table_dropped() -> Error {
    Error::new(ErrorKind::Closed, "the lock table was dropped")
}

#[async_trait]
impl Queue for MemQueue<'_> {
    type Claim = Claim;
    type Output = GuardParts;

    async fn claim(&self, _req: &Request) -> Result<Claim> {
        Ok(Claim::default())
    }

    async fn enqueue(&self, claim: &mut Claim, req: &Request) -> Result<Standing> {
        let (lease, waits) = (req.lease(), req.waits());
        let step =
            (self.engine).try_or_queue(self.key, self.mode, self.size, lease, waits, self.value)?;
        Ok(match step {
            Step::Granted(g) => {
                claim.grant = Some(g);
                Standing::Owner
            }
            Step::Queued(id, rx, ends) => {
                claim.queued = Some((id, rx, ends));
                Standing::Waiting
            }
            Step::Busy => Standing::Waiting,
        })
    }

    /// Waits for the grant, or until the first fixed lease among the holders ends: its holder's
    /// runtime ends it on time, but one that no longer runs (shut down, or blocked) would not,
    /// so the waiter ends it then. The queue's front waiter is told to look again when a holder
    /// comes in or a lease moves (any one waiter ends an expired lease for all).
    async fn wait(&self, claim: &mut Claim, req: &Request) -> Result<Woken> {
        let Some((_, rx, ends)) = claim.queued.as_mut() else {
            return Ok(Woken::Look);
        };
        let moved = ends.notified();
        tokio::pin!(moved);
        // Listening before the read: an end that comes in after it is heard.
        moved.as_mut().enable();
        let expiry = self.engine.next_expiry(self.key);
        let woke = req
            .within(async {
                let ends = async {
                    match expiry {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    r = rx => Wake::Grant(r),
                    _ = moved => Wake::Moved,
                    _ = ends => Wake::Ended,
                }
            })
            .await;
        match woke {
            Some(Wake::Grant(Ok(Ok(g)))) => {
                claim.grant = Some(g);
                Ok(Woken::Owner)
            }
            Some(Wake::Grant(Ok(Err(e)))) => Err(e),
            Some(Wake::Grant(Err(_))) => Err(table_dropped()),
            Some(Wake::Ended) => {
                // The grant, if the expiry lets the queue reach us, is on `rx` for `standing`.
                self.engine.expire(self.key);
                Ok(Woken::Look)
            }
            Some(Wake::Moved) | None => Ok(Woken::Look),
        }
    }

    async fn standing(&self, claim: &mut Claim, _req: &Request) -> Result<Standing> {
        if claim.grant.is_some() {
            return Ok(Standing::Owner);
        }
        let Some((_, rx, _)) = claim.queued.as_mut() else {
            return Ok(Standing::Waiting);
        };
        match rx.try_recv() {
            Ok(Ok(g)) => {
                claim.grant = Some(g);
                Ok(Standing::Owner)
            }
            Ok(Err(e)) => Err(e),
            Err(TryRecvError::Empty) => Ok(Standing::Waiting),
            Err(TryRecvError::Closed) => Err(table_dropped()),
        }
    }

    async fn hold(&self, claim: &mut Claim, _req: &Request) -> Result<Option<GuardParts>> {
        Ok(claim.grant.take().map(|g| parts(self.engine, self.key, g)))
    }

    async fn leave(&self, claim: &mut Claim, _exit: Exit) -> Result<()> {
        self.abandon(std::mem::take(claim));
        Ok(())
    }

    /// The engine is local: leaving is done at once. A grant that arrived, or arrives after
    /// the waiter left, is released when it drops.
    fn abandon(&self, claim: Claim) {
        if let Some((id, _, _)) = &claim.queued {
            self.engine.cancel(self.key, *id);
        }
        drop(claim);
    }
}
