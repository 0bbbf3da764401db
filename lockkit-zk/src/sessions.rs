//! The sessions of one `Locks` handle: the default one (whose timeout is the handle's default
//! lease) and one more per other watchdog lease an acquire asks for, so that a lock's lease is
//! always the one asked for: a holder that dies frees the lock after its own lease.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::{Reaper, SessionPool};
use lockkit_core::{Error, ErrorKind, Result};

use crate::config::ZkConfig;
use crate::session::Session;

/// The most sessions (distinct lease lengths) one handle opens.
const MAX_SESSIONS: usize = 8;

#[derive(Debug)]
pub(crate) struct Sessions {
    default: Arc<Session>,
    reaper: Reaper,
    /// The sessions of other lease lengths: the default one counts towards the cap.
    others: SessionPool<Session>,
}

impl Sessions {
    /// Opens the default session.
    pub(crate) async fn open(cfg: ZkConfig) -> Result<Arc<Sessions>> {
        let reaper = Reaper::default();
        Ok(Arc::new(Sessions {
            default: Session::open(cfg, reaper.clone()).await?,
            reaper,
            others: SessionPool::new(
                "ZooKeeper sessions besides the default one",
                MAX_SESSIONS - 1,
            ),
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
        let got = self
            .others
            .get(lease, || {
                let cfg = self.default.cfg.with_session_timeout(lease);
                let reaper = self.reaper.clone();
                async move {
                    Session::open(cfg, reaper)
                        .await
                        .map_err(|e| match e.kind() {
                            // Here a timeout the server negotiates away is a bad argument, not bad
                            // config.
                            ErrorKind::Config => Error::invalid(e.message().to_string()),
                            _ => e,
                        })
                }
            })
            .await?;
        Ok(got.session)
    }

    /// The handle's reaper.
    pub(crate) fn reaper(&self) -> Reaper {
        self.reaper.clone()
    }

    /// Every session open now.
    pub(crate) async fn all(&self) -> Vec<Arc<Session>> {
        let mut all = vec![self.default.clone()];
        all.extend(self.others.all().await);
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
