//! The semaphore: Curator's InterProcessSemaphoreV2 protocol. An entry mutex (`locks/`) lets one
//! acquirer at a time add its lease nodes (`leases/`) and watch the lease set until it fits, so
//! releases wake only that one acquirer (no herd). Leases are ephemeral: a dead session's permits
//! come back when ZooKeeper expires it.

use async_trait::async_trait;
use lockkit_core::spi::{GuardParts, RawSemaphore, Request};
use lockkit_core::Result;
use std::sync::Arc;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::map;
use crate::held;
use crate::node::{self, LEASE_MARKER, MUTEX_MARKER};
use crate::queue::{self, Cleanup, Rule, Spec};
use crate::sessions::Sessions;

#[derive(Debug)]
pub(crate) struct ZkSemaphore {
    pub sessions: Arc<Sessions>,
    pub name: String,
    pub dir: String,
    pub permits: u32,
}

impl ZkSemaphore {
    fn locks_dir(&self) -> String {
        format!("{}/locks", self.dir)
    }

    fn leases_dir(&self) -> String {
        format!("{}/leases", self.dir)
    }

    async fn lease_count(&self, client: &zk::Client) -> Result<usize> {
        let children = crate::ops::list_or_empty(
            client,
            &self.leases_dir(),
            self.sessions.default().cfg.command_timeout,
        )
        .await?;
        Ok(count_leases(&children))
    }
}

fn count_leases(children: &[String]) -> usize {
    children
        .iter()
        .filter(|c| node::parse(c, &[LEASE_MARKER]).is_some())
        .count()
}

#[async_trait]
impl RawSemaphore for ZkSemaphore {
    async fn acquire(&self, n: u32, req: &Request) -> Result<Option<GuardParts>> {
        self.acquire_permits(n, req).await
    }

    async fn available(&self) -> Result<u32> {
        let client = self.sessions.default().client()?;
        let used = self.lease_count(&client).await?;
        Ok(self
            .permits
            .saturating_sub(u32::try_from(used).unwrap_or(u32::MAX)))
    }
}

impl ZkSemaphore {
    async fn acquire_permits(&self, n: u32, req: &Request) -> Result<Option<GuardParts>> {
        let deadline = req.deadline();
        let session = &self.sessions.for_lease(req.lease().duration()).await?;
        let client = session.client()?;
        let limit = session.cfg.command_timeout;
        let locks_dir = self.locks_dir();
        let leases_dir = self.leases_dir();
        let spec = Spec {
            dir: &locks_dir,
            marker: MUTEX_MARKER,
            markers: crate::mutex::MARKERS,
            rule: Rule::Exclusive,
        };
        // Every node made below is deleted, leases first, if this future is dropped or fails.
        let mut cleanup = Cleanup::new(session, client.clone());
        let (entry, children) =
            queue::create(session, &client, &mut cleanup, &locks_dir, MUTEX_MARKER).await?;
        if !queue::wait_turn(session, &spec, &entry, children, deadline).await? {
            cleanup.run().await;
            return Ok(None);
        }
        let mut leases = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (lease, _) =
                queue::create(session, &client, &mut cleanup, &leases_dir, LEASE_MARKER).await?;
            leases.push(lease);
        }
        loop {
            let listed = crate::ops::retry(limit, "watch leases", || {
                client.list_and_watch_children(&leases_dir)
            })
            .await?;
            let (children, watcher) = listed;
            if count_leases(&children) <= self.permits as usize {
                break;
            }
            let event = match deadline {
                None => watcher.changed().await,
                Some(d) if d <= Instant::now() => {
                    cleanup.run().await;
                    return Ok(None);
                }
                Some(d) => match tokio::time::timeout_at(d, watcher.changed()).await {
                    Ok(ev) => ev,
                    Err(_) => {
                        cleanup.run().await;
                        return Ok(None);
                    }
                },
            };
            session.count_wake();
            if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                cleanup.run().await;
                return Err(map(
                    zk::Error::SessionExpired,
                    "session ended while waiting",
                ));
            }
        }
        // Our leases fit: let the next acquirer in.
        if let Err(e) = crate::ops::delete_node(&client, &entry.path, limit).await {
            cleanup.run().await;
            return Err(e);
        }
        cleanup.disarm();
        Ok(Some(held::parts(
            session,
            &self.name,
            leases,
            req.lease(),
            None,
        )))
    }
}
