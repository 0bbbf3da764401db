//! The sessions of one `Locks` handle: the default one (whose timeout is the handle's default
//! lease) and one more per other watchdog lease an acquire asks for, so that a lock's lease is
//! always the one asked for: a holder that dies frees the lock after its own lease.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::Reaper;
use lockkit_core::{Error, ErrorKind, Result};

use crate::config::ZkConfig;
use crate::session::Session;

/// The most sessions (distinct lease lengths) one handle opens.
const MAX_SESSIONS: usize = 8;

#[derive(Debug)]
pub(crate) struct Sessions {
    default: Arc<Session>,
    reaper: Reaper,
    others: tokio::sync::Mutex<HashMap<Duration, Arc<Session>>>,
}

impl Sessions {
    /// Opens the default session.
    pub(crate) async fn open(cfg: ZkConfig) -> Result<Arc<Sessions>> {
        let reaper = Reaper::default();
        Ok(Arc::new(Sessions {
            default: Session::open(cfg, reaper.clone()).await?,
            reaper,
            others: tokio::sync::Mutex::new(HashMap::new()),
        }))
    }

    /// The default session.
    pub(crate) fn default(&self) -> &Arc<Session> {
        &self.default
    }

    /// The session whose timeout is `lease`, opened on first use. A lease the server will not
    /// grant as a session timeout is an `InvalidArgument`.
    pub(crate) async fn for_lease(&self, lease: Duration) -> Result<Arc<Session>> {
        if lease == self.default.cfg.session_timeout {
            return Ok(self.default.clone());
        }
        let mut others = self.others.lock().await;
        if let Some(s) = others.get(&lease) {
            return Ok(s.clone());
        }
        if others.len() + 1 >= MAX_SESSIONS {
            return Err(Error::invalid(format!(
                "this handle has {MAX_SESSIONS} ZooKeeper sessions already (one per lease length \
                 asked for); set the lease on the handle (LockConfig::lease) instead"
            )));
        }
        let session = Session::open(
            self.default.cfg.with_session_timeout(lease),
            self.reaper.clone(),
        )
        .await
        .map_err(|e| match e.kind() {
            // Here a timeout the server negotiates away is a bad argument, not bad config.
            ErrorKind::Config => Error::invalid(e.message().to_string()),
            _ => e,
        })?;
        others.insert(lease, session.clone());
        Ok(session)
    }

    /// The handle's reaper.
    pub(crate) fn reaper(&self) -> Reaper {
        self.reaper.clone()
    }

    /// Every session open now.
    pub(crate) async fn all(&self) -> Vec<Arc<Session>> {
        let mut all = vec![self.default.clone()];
        all.extend(self.others.lock().await.values().cloned());
        all
    }

    /// Closes every session.
    pub(crate) async fn close(&self) -> Result<()> {
        let mut first_error = None;
        for s in self.all().await {
            if let Err(e) = s.close().await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
