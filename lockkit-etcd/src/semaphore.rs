//! The semaphore: keys ranked by create revision on `<prefix>/%sem/<encoded name>/`, each holding
//! its permit count as its value (with a `+` once it holds them), and the size key `%size`
//! beside them (`sem_size.rs`). An acquirer holds when the permits of everyone ranked before it,
//! those held by keys ranked after it (let in before a shrink) and its own fit in the size
//! (first come, first served: a large request is never overtaken). The size is settled in the
//! transaction that creates the acquirer's key and read with the queue whenever a turn is
//! settled. Permits are leased like locks, so a dead holder's permits come back when its lease
//! ends.

use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use lockkit_core::spi::{settle_size, GuardParts, RawSemaphore, Request};
use lockkit_core::Result;

use crate::acquire::{acquire, read_size, Want};
use crate::inner::{watch_of, Inner};
use crate::sem_size::{is_size_key, size_key, stored_size};
use crate::watch::{held_weight, Kind, NameWatch, Need};

/// A semaphore handle, of the size it asks for (`None`: the stored size).
#[derive(Debug)]
pub(crate) struct EtcdSemaphore {
    inner: Arc<Inner>,
    name: Arc<str>,
    prefix: Vec<u8>,
    permits: Option<u32>,
    watch: tokio::sync::OnceCell<Arc<NameWatch>>,
}

impl EtcdSemaphore {
    pub(crate) fn new(inner: Arc<Inner>, name: &str, permits: Option<u32>) -> Self {
        EtcdSemaphore {
            prefix: inner.prefix(Kind::Semaphore, name),
            inner,
            name: name.into(),
            permits,
            watch: tokio::sync::OnceCell::new(),
        }
    }
}

#[async_trait]
impl RawSemaphore for EtcdSemaphore {
    async fn acquire(&self, n: u32, req: &Request) -> Result<Option<GuardParts>> {
        let nw = watch_of(&self.inner, &self.watch, &self.prefix, Kind::Semaphore).await?;
        let want = Want {
            name: &self.name,
            nw: &nw,
            kind: Kind::Semaphore,
            need: Need::Permits {
                n,
                asked: self.permits,
            },
            value: n.to_string().into_bytes(),
        };
        acquire(&self.inner, want, req).await
    }

    /// One read of the prefix, which holds the size key too: the size less the permits of
    /// the keys marked as holding.
    async fn available(&self) -> Result<u32> {
        let kvs = self.inner.keys_by_create(&self.prefix, 0).await?;
        let stored = stored_size(kvs.iter().find(|kv| is_size_key(kv.key())))?;
        let (size, _) = settle_size(&self.name, self.permits, stored)?;
        let entries: Vec<_> = kvs
            .iter()
            .filter(|kv| !is_size_key(kv.key()))
            .map(|kv| Kind::Semaphore.entry(kv.value()))
            .collect();
        let used = u32::try_from(held_weight(entries.iter())).unwrap_or(u32::MAX);
        Ok(size.saturating_sub(used))
    }

    async fn size(&self) -> Result<Option<u32>> {
        Ok(read_size(&self.inner, &self.prefix).await?.1)
    }

    /// A put while the size key is as read (a value that is no size is refused, as a foreign
    /// key, and kept), which the waiters' watch hears: those that now fit hold, those asking
    /// for more than the new size are refused.
    async fn set_size(&self, permits: u32) -> Result<Option<u32>> {
        let key = size_key(&self.prefix);
        loop {
            let (rev, before) = read_size(&self.inner, &self.prefix).await?;
            let key = key.clone();
            let resp = self
                .inner
                .pool
                .run("set the semaphore's size", false, move |mut c| {
                    let txn = Txn::new()
                        .when([Compare::mod_revision(key.clone(), CompareOp::Equal, rev)])
                        .and_then([TxnOp::put(key.clone(), permits.to_string(), None)]);
                    async move { c.txn(txn).await }
                })
                .await?;
            if resp.succeeded() {
                return Ok(before);
            }
            // Changed since it was read: again.
        }
    }
}
