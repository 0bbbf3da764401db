//! One `mem://` ownership: release, extend and downgrade go straight to the engine. Dropped
//! unreleased (its guard was dropped where no tokio runtime runs, so the core's release never
//! started), it releases itself: the engine needs no runtime, and a watchdog lease there has no
//! end of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::engine::{Engine, Grant, Key};
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::spi::{GuardParts, Held};

#[derive(Debug)]
pub(super) struct MemHeld {
    engine: Arc<Engine>,
    key: Key,
    owner: u64,
    token: FencingToken,
    /// Released, or handed on by a downgrade: nothing is left for its drop to do.
    ended: AtomicBool,
}

impl MemHeld {
    fn new(engine: Arc<Engine>, key: Key, owner: u64, token: FencingToken) -> Self {
        MemHeld {
            engine,
            key,
            owner,
            token,
            ended: AtomicBool::new(false),
        }
    }
}

impl Drop for MemHeld {
    fn drop(&mut self) {
        if !self.ended.load(Ordering::Acquire) {
            // Gone already (its fixed lease ran out, the table was closed): nothing to do.
            let _ = self.engine.release(&self.key, self.owner);
        }
    }
}

#[async_trait]
impl Held for MemHeld {
    async fn release(&self) -> Result<()> {
        self.ended.store(true, Ordering::Release);
        self.engine.release(&self.key, self.owner)
    }

    async fn extend(&self, lease: Duration) -> Result<()> {
        self.engine.extend(&self.key, self.owner, lease)
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        self.engine.proclaim(&self.key, self.owner, value)
    }

    async fn downgrade(&self) -> Result<GuardParts> {
        let (state, lease) = self.engine.downgrade(&self.key, self.owner)?;
        // The read ownership is the same holder: this one must not release it.
        self.ended.store(true, Ordering::Release);
        let held = MemHeld::new(
            self.engine.clone(),
            self.key.clone(),
            self.owner,
            self.token,
        );
        // The read ownership keeps the write ownership's token: no writer came in between.
        Ok(GuardParts::new(self.token, lease, state, Box::new(held)))
    }
}

/// The guard parts of a grant, which hands its ownership to them.
pub(super) fn parts(engine: &Arc<Engine>, key: &Key, grant: Grant) -> GuardParts {
    let held = MemHeld::new(engine.clone(), key.clone(), grant.owner(), grant.token());
    let p = GuardParts::new(grant.token(), grant.lease(), grant.state(), Box::new(held));
    grant.disarm();
    p
}
