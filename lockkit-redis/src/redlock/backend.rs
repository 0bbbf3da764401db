//! The Redlock backend object: the masters, the watchdog task, the mutex handles.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::{Backend, RawMutex, Reaper, Watchdog};
use lockkit_core::{async_trait, BackendKind, Capabilities, Result, Support};
use tokio::task::JoinHandle;

use super::client::{Client, Renewal};
use super::config::{Settings, REDLOCK_KIND};
use super::masters::Masters;
use super::mutex::RedlockMutex;
use super::renew::Renewer;
use crate::keys::holder_channels;
use crate::pubsub::Holder;

/// The Redlock backend of one [`Locks`](lockkit_core::Locks) handle (`redlock://`): a mutex
/// over N independent Redis masters. Its watchdog task stops when it is dropped.
pub struct RedlockBackend {
    client: Arc<Client>,
    watchdog: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockBackend")
            .field("client", &self.client)
            .finish()
    }
}

impl Drop for RedlockBackend {
    fn drop(&mut self) {
        self.stop();
    }
}

impl RedlockBackend {
    pub(crate) async fn connect(settings: Settings) -> Result<RedlockBackend> {
        let client_id = uuid::Uuid::new_v4().to_string();
        let watchdog = Arc::new(Watchdog::<Renewal>::new("redlock"));
        // A force-unlock tells each master's holder it deleted; at the first message its
        // ownership is renewed at once, and the quorum's answers decide whether it is Lost.
        let taken = Arc::downgrade(&watchdog);
        let holder = Holder {
            channel: format!("{}{client_id}", holder_channels(&settings.prefix)),
            taken: Arc::new(move |owner, key| {
                if let Some(wd) = taken.upgrade() {
                    let (owner, key) = (owner.to_string(), key.to_string());
                    wd.taken_where(move |r| *r.owner == *owner && *r.key == *key, false);
                }
            }),
        };
        let masters = Masters::connect(&settings, holder).await?;
        let client = Arc::new(Client::new(masters, settings, client_id, watchdog));
        let task = tokio::spawn(client.watchdog.clone().run(Renewer {
            client: client.clone(),
        }));
        Ok(RedlockBackend {
            client,
            watchdog: std::sync::Mutex::new(Some(task)),
        })
    }

    /// Stops the watchdog; whatever it still watched turns Lost.
    fn stop(&self) {
        if let Some(t) = self
            .watchdog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            t.abort();
        }
        self.client.watchdog.abandon_all();
        self.client.masters.stop();
    }

    /// This client's id: the first part of the owner values it writes.
    pub fn client_id(&self) -> &str {
        self.client.client_id()
    }

    /// How many masters there are, and how many make a quorum.
    pub fn masters(&self) -> (usize, usize) {
        (self.client.masters.len(), self.client.quorum())
    }
}

#[async_trait]
impl Backend for RedlockBackend {
    fn kind(&self) -> BackendKind {
        REDLOCK_KIND
    }

    /// A mutex only, with fixed leases and the remaining lease; not `fair` (lockkit waiters
    /// queue, but `try_lock` and other Redlock clients barge in); its tokens are no fencing
    /// guarantee (see the module docs).
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Support::basic().fixed_lease(true).remaining_lease(true)).fencing(false)
    }

    fn default_lease(&self) -> Duration {
        self.client.settings.lease
    }

    fn reaper(&self) -> Reaper {
        self.client.reaper.clone()
    }

    fn mutex(&self, name: &str) -> Result<Box<dyn RawMutex>> {
        Ok(Box::new(RedlockMutex::new(self.client.clone(), name)))
    }

    /// The core has released every guard of the handle; what remains is to stop the watchdog.
    async fn close(&self) -> Result<()> {
        self.stop();
        Ok(())
    }
}
