//! The mutex: Go's `concurrency.Mutex` algorithm with its known bugs fixed (see `acquire.rs`).
//! Key layout `<prefix>/<encoded name>/<lease hex>[_n]`, compatible with Go's Mutex on the
//! prefix `<prefix>/<encoded name>`.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::spi::{GuardParts, RawMutex, Request};
use lockkit_core::Result;

use crate::acquire::{acquire, Want};
use crate::inner::{watch_of, Inner};
use crate::ops::delete_first;
use crate::watch::{Kind, NameWatch, Need};

/// A mutex handle. Creating one talks to no server; the first acquire sets up the name's watch.
#[derive(Debug)]
pub(crate) struct EtcdMutex {
    inner: Arc<Inner>,
    name: Arc<str>,
    prefix: Vec<u8>,
    watch: tokio::sync::OnceCell<Arc<NameWatch>>,
}

impl EtcdMutex {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> Self {
        EtcdMutex {
            prefix: inner.prefix(Kind::Mutex, name),
            inner,
            name: name.into(),
            watch: tokio::sync::OnceCell::new(),
        }
    }
}

#[async_trait]
impl RawMutex for EtcdMutex {
    async fn acquire(&self, req: &Request) -> Result<Option<GuardParts>> {
        let nw = watch_of(&self.inner, &self.watch, &self.prefix, Kind::Mutex).await?;
        let want = Want {
            name: &self.name,
            nw: &nw,
            kind: Kind::Mutex,
            need: Need::Exclusive,
            value: Vec::new(),
        };
        acquire(&self.inner, want, req).await
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(!self.inner.keys_by_create(&self.prefix, 1).await?.is_empty())
    }

    async fn remaining_lease(&self) -> Result<Option<std::time::Duration>> {
        let kvs = self.inner.keys_by_create(&self.prefix, 1).await?;
        let Some(owner) = kvs.first() else {
            return Ok(None);
        };
        let id = owner.lease();
        if id == 0 {
            return Ok(None); // a key without a lease never expires
        }
        let resp = self
            .inner
            .pool
            .run("lease ttl", true, move |mut c| async move {
                c.lease_time_to_live(id, None).await
            })
            .await?;
        Ok((resp.ttl() >= 0).then(|| std::time::Duration::from_secs(resp.ttl() as u64)))
    }

    async fn force_unlock(&self) -> Result<bool> {
        delete_first(&self.inner, &self.prefix).await
    }
}
