//! The read-write lock: keys ranked by create revision on `<prefix>/%rw/<encoded name>/`, value
//! `w` for a writer and `r` for a reader. A writer holds when it is first; a reader holds when no
//! writer is ranked before it, so a waiting writer keeps later readers out (writers are not
//! starved). Downgrade rewrites our key's value to `r` in place: same rank, same token.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::spi::{GuardParts, RawRwLock, Request};
use lockkit_core::Result;

use crate::acquire::{acquire, Want};
use crate::inner::{watch_of, Inner};
use crate::ops::delete_if_ours;
use crate::watch::{Kind, NameWatch, Need};

/// A read-write lock handle.
#[derive(Debug)]
pub(crate) struct EtcdRwLock {
    inner: Arc<Inner>,
    name: Arc<str>,
    prefix: Vec<u8>,
    watch: tokio::sync::OnceCell<Arc<NameWatch>>,
}

impl EtcdRwLock {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> Self {
        EtcdRwLock {
            prefix: inner.prefix(Kind::RwLock, name),
            inner,
            name: name.into(),
            watch: tokio::sync::OnceCell::new(),
        }
    }

    async fn take(&self, need: Need, req: &Request) -> Result<Option<GuardParts>> {
        let nw = watch_of(&self.inner, &self.watch, &self.prefix, Kind::RwLock).await?;
        let value = if need == Need::Shared { "r" } else { "w" };
        let want = Want {
            name: &self.name,
            nw: &nw,
            kind: Kind::RwLock,
            need,
            value: value.as_bytes().to_vec(),
        };
        acquire(&self.inner, want, req).await
    }
}

#[async_trait]
impl RawRwLock for EtcdRwLock {
    async fn read(&self, req: &Request) -> Result<Option<GuardParts>> {
        self.take(Need::Shared, req).await
    }

    async fn write(&self, req: &Request) -> Result<Option<GuardParts>> {
        self.take(Need::Exclusive, req).await
    }

    async fn is_locked(&self) -> Result<bool> {
        Ok(!self.inner.keys_by_create(&self.prefix, 1).await?.is_empty())
    }

    async fn force_unlock(&self) -> Result<bool> {
        // Delete every key that holds right now: the first, and when it is a reader, every
        // reader up to the first writer.
        let kvs = self.inner.keys_by_create(&self.prefix, 0).await?;
        let mut any = false;
        for (i, kv) in kvs.iter().enumerate() {
            let writer = Kind::RwLock.entry(kv.value()).exclusive;
            if i > 0 && writer {
                break;
            }
            any |= delete_if_ours(&self.inner, kv.key(), kv.create_revision()).await?;
            if writer {
                break;
            }
        }
        Ok(any)
    }
}
