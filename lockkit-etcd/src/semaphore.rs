//! The semaphore: keys ranked by create revision on `<prefix>/%sem/<encoded name>/`, each holding
//! its permit count as its value. An acquirer holds when the permits of everyone ranked before it
//! plus its own fit in the total (first come, first served: a large request is never overtaken).
//! Permits are leased like locks, so a dead holder's permits come back when its lease ends.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::spi::{GuardParts, RawSemaphore, Request};
use lockkit_core::Result;

use crate::acquire::{acquire, Want};
use crate::inner::{watch_of, Inner};
use crate::watch::{Kind, NameWatch, Need};

/// A semaphore handle. Every client of one semaphore must use the same total.
#[derive(Debug)]
pub(crate) struct EtcdSemaphore {
    inner: Arc<Inner>,
    name: Arc<str>,
    prefix: Vec<u8>,
    permits: u32,
    watch: tokio::sync::OnceCell<Arc<NameWatch>>,
}

impl EtcdSemaphore {
    pub(crate) fn new(inner: Arc<Inner>, name: &str, permits: u32) -> Self {
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
                total: self.permits,
            },
            value: n.to_string().into_bytes(),
        };
        acquire(&self.inner, want, req).await
    }

    async fn available(&self) -> Result<u32> {
        let kvs = self.inner.keys_by_create(&self.prefix, 0).await?;
        let mut used: u64 = 0;
        for kv in &kvs {
            let w = u64::from(Kind::Semaphore.entry(kv.value()).weight);
            if used + w > u64::from(self.permits) {
                break; // the first waiter: everyone after waits too
            }
            used += w;
        }
        Ok(self.permits.saturating_sub(used as u32))
    }
}
