//! Leader election: Go's `concurrency.Election` layout with its holes closed. Candidates are
//! keys `<prefix>/%election/<encoded name>/<lease hex>[_n]` whose value is what they proclaim;
//! the key with the lowest create revision leads, and that revision is the term. A candidate
//! campaigns through the same queue as the mutex (so it leads only once the server confirms its
//! key is first, and a key deleted while it waits makes it start over, unlike Go's `Campaign`),
//! and its leadership turns Lost when its key is deleted or its lease ends. Compatible with Go's
//! `Election` (and `etcdctl elect`) on the prefix `<prefix>/%election/<encoded name>`.

use std::sync::Arc;

use async_trait::async_trait;
use lockkit_core::spi::{GuardParts, RawElection, Request};
use lockkit_core::{FencingToken, Leader, LeaderChanges, Result};

use crate::acquire::{acquire, Want};
use crate::inner::{watch_of, Inner};
use crate::watch::{Kind, NameWatch, Need};

/// An election handle. Creating one talks to no server; the first campaign or observer sets up
/// the name's watch.
#[derive(Debug)]
pub(crate) struct EtcdElection {
    inner: Arc<Inner>,
    name: Arc<str>,
    prefix: Vec<u8>,
    watch: tokio::sync::OnceCell<Arc<NameWatch>>,
}

impl EtcdElection {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> Self {
        EtcdElection {
            prefix: inner.prefix(Kind::Election, name),
            inner,
            name: name.into(),
            watch: tokio::sync::OnceCell::new(),
        }
    }

    async fn watch(&self) -> Result<Arc<NameWatch>> {
        watch_of(&self.inner, &self.watch, &self.prefix, Kind::Election).await
    }
}

#[async_trait]
impl RawElection for EtcdElection {
    async fn campaign(&self, value: &[u8], req: &Request) -> Result<Option<GuardParts>> {
        let nw = self.watch().await?;
        let want = Want {
            name: &self.name,
            nw: &nw,
            kind: Kind::Election,
            need: Need::Exclusive,
            value: value.to_vec(),
        };
        acquire(&self.inner, want, req).await
    }

    /// One linearizable read of the first candidate.
    async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self
            .inner
            .first_by_create(&self.prefix)
            .await?
            .0
            .map(leader_of))
    }

    /// One linearizable read for the first state, then the name's watch: every event, in
    /// order, with no read of its own.
    async fn observe(&self) -> Result<LeaderChanges> {
        let nw = self.watch().await?;
        let (first, rev) = self.inner.first_by_create(&self.prefix).await?;
        Ok(nw.observe(first.map(leader_of), rev).keeping(nw))
    }

    /// Deletes the first candidate's key, whoever's it is. A Go leader's too, but Go's `Election`
    /// does not watch its own key: it is not told, and goes on believing it leads.
    async fn force_resign(&self) -> Result<bool> {
        crate::ops::delete_first(&self.inner, &self.prefix).await
    }
}

/// The leader a candidate's key names: its value, and its create revision as the term.
fn leader_of(kv: etcd_client::KeyValue) -> Leader {
    Leader::new(kv.value(), FencingToken(kv.create_revision() as u64))
}
