//! One `mem://` ownership: release, extend and downgrade go straight to the engine.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::engine::{Engine, Grant, Key};
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::options::Lease;
use crate::spi::{GuardParts, Held};

#[derive(Debug)]
pub(super) struct MemHeld {
    engine: Arc<Engine>,
    key: Key,
    owner: u64,
    token: FencingToken,
    lease: Lease,
}

#[async_trait]
impl Held for MemHeld {
    async fn release(&self) -> Result<()> {
        self.engine.release(&self.key, self.owner)
    }

    async fn extend(&self, lease: Duration) -> Result<()> {
        self.engine.extend(&self.key, self.owner, lease)
    }

    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        self.engine.proclaim(&self.key, self.owner, value)
    }

    async fn downgrade(&self) -> Result<GuardParts> {
        let state = self.engine.downgrade(&self.key, self.owner)?;
        let held = MemHeld {
            engine: self.engine.clone(),
            key: self.key.clone(),
            ..*self
        };
        // The read ownership keeps the write ownership's token: no writer came in between.
        Ok(GuardParts::new(
            self.token,
            self.lease,
            state,
            Box::new(held),
        ))
    }
}

/// The guard parts of a grant, which hands its ownership to them.
pub(super) fn parts(engine: &Arc<Engine>, key: &Key, grant: Grant) -> GuardParts {
    let held = MemHeld {
        engine: engine.clone(),
        key: key.clone(),
        owner: grant.owner(),
        token: grant.token(),
        lease: grant.lease(),
    };
    let p = GuardParts::new(grant.token(), grant.lease(), grant.state(), Box::new(held));
    grant.disarm();
    p
}
