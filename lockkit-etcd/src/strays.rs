//! Stray keys: keys of ours that no acquisition owns.
//!
//! A create request that timed out on our side may still be applied later: a member that was
//! stopped takes the request up when it resumes and forwards it to the leader, long after our
//! acquire gave up and deleted "its" key (a no-op then). The key that appears sits on a live
//! session lease, ranks before every later waiter, and blocks the lock for as long as the session
//! lives. No timeout on our side can rule that out, so the name's watch, which sees every key
//! arrive, recognises such keys instead: one named by one of this handle's session leases, on
//! that lease, in a slot no acquisition of ours holds (a slot stays reserved from before its
//! create is sent until its key is known to be deleted). It is deleted through the reaper,
//! owner-checked on its create revision, so a newer key in the same slot is never touched.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};

use lockkit_core::spi::{Attempt, Reaper};

use crate::client::Pool;

/// The key slots of one lock name that this handle's acquisitions hold (see `watch::Slot`).
pub(crate) type Slots = Arc<Mutex<BTreeSet<u32>>>;

/// The session leases of one handle, and where their stray keys go.
#[derive(Debug, Clone)]
pub(crate) struct Strays {
    leases: Arc<Mutex<HashSet<i64>>>,
    reaper: Reaper,
}

impl Strays {
    pub(crate) fn new(reaper: Reaper) -> Strays {
        Strays {
            leases: Arc::default(),
            reaper,
        }
    }

    fn leases(&self) -> std::sync::MutexGuard<'_, HashSet<i64>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A session lease of this handle: its keys are ours.
    pub(crate) fn own(&self, lease: i64) {
        self.leases().insert(lease);
    }

    /// A session this handle no longer keeps.
    pub(crate) fn disown(&self, lease: i64) {
        self.leases().remove(&lease);
    }

    /// Whether `lease` is one of the handle's session leases.
    pub(crate) fn owns(&self, lease: i64) -> bool {
        self.leases().contains(&lease)
    }

    /// The slot of `key` (under `prefix`, on `lease`) if it is a key of one of our sessions.
    fn slot_of(&self, prefix: &[u8], key: &[u8], lease: i64) -> Option<u32> {
        if lease == 0 || !self.leases().contains(&lease) {
            return None;
        }
        slot_of(prefix, key, lease)
    }

    /// Whether `kv`, under lock `prefix`, is a key of one of our sessions in a slot no
    /// acquisition of ours holds (`slots` are those they hold): its name and create revision.
    pub(crate) fn stray(
        &self,
        prefix: &[u8],
        slots: &Slots,
        kv: &etcd_client::KeyValue,
    ) -> Option<(Vec<u8>, i64)> {
        let slot = self.slot_of(prefix, kv.key(), kv.lease())?;
        let held = slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&slot);
        (!held).then(|| (kv.key().to_vec(), kv.create_revision()))
    }

    /// Deletes `key` while its create revision is `rev`, retried until the server takes it.
    pub(crate) fn reap(&self, pool: &Arc<Pool>, key: Vec<u8>, rev: i64) {
        tracing::debug!(
            backend = "etcd",
            key = %String::from_utf8_lossy(&key),
            rev,
            "lockkit: deleting a stray lock key (a create applied after we gave up on it)"
        );
        let pool = pool.clone();
        self.reaper.retry("delete a stray lock key", move || {
            let (pool, key) = (pool.clone(), key.clone());
            async move {
                // Tried until the server takes it: the create-revision check keeps a late
                // retry from deleting a key created since.
                let work = pool.delete_if_created(&key, rev).await.map(drop);
                Attempt::of(work, async { false }).await
            }
        });
    }
}

/// The slot a key `<prefix><lease hex>` (slot 0) or `<prefix><lease hex>_<n>` (slot n) names.
fn slot_of(prefix: &[u8], key: &[u8], lease: i64) -> Option<u32> {
    let rest = std::str::from_utf8(key.strip_prefix(prefix)?).ok()?;
    let (hex, slot) = match rest.split_once('_') {
        Some((hex, n)) => (hex, n.parse().ok()?),
        None => (rest, 0),
    };
    (hex == format!("{lease:x}")).then_some(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_read_from_our_key_names_only() {
        let p = b"lockkit/a/";
        assert_eq!(slot_of(p, b"lockkit/a/1f", 0x1f), Some(0));
        assert_eq!(slot_of(p, b"lockkit/a/1f_3", 0x1f), Some(3));
        assert_eq!(slot_of(p, b"lockkit/a/1f_x", 0x1f), None);
        assert_eq!(slot_of(p, b"lockkit/a/2f", 0x1f), None);
        assert_eq!(slot_of(p, b"lockkit/b/1f", 0x1f), None);
    }
}
