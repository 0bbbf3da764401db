//! The Redlock side of the core's [`Watchdog`](lockkit_core::spi::Watchdog): a batch of held
//! locks renewed on every master in parallel, each counted renewed only when a quorum of
//! masters renewed it, and gone once so many masters said "not ours" that no quorum can.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::async_trait;
use lockkit_core::spi::{Due, Renew, Renewed};
use lockkit_core::Result;

use super::client::{Client, Renewal};
use super::masters::Resend;

/// One client's renewal round trip.
pub(crate) struct Renewer {
    pub(crate) client: Arc<Client>,
}

/// What `n` masters' answers about one lock amount to: renewed on a quorum, gone when more
/// than `n - quorum` said it is not ours (no quorum can hold it), unsure otherwise (masters
/// that did not answer may still hold it).
pub(crate) fn verdict(yes: usize, no: usize, n: usize, quorum: usize) -> Renewed {
    if yes >= quorum {
        Renewed::Yes
    } else if no > n - quorum {
        Renewed::Gone
    } else {
        Renewed::Unsure
    }
}

/// Renews `batch` on every master within `limit`: each master's answers, in master order.
pub(crate) async fn renew_on_all(
    client: &Client,
    batch: &[(&Renewal, Duration)],
    limit: Duration,
) -> Vec<Result<Vec<i64>>> {
    let mut inv = client.scripts.renew.prepare_invoke();
    for (entry, lease) in batch {
        inv.key(&*entry.key)
            .arg(&*entry.owner)
            .arg(lease.as_millis().max(1) as u64);
    }
    client
        .masters
        .all(&inv, limit, "redlock renewal", Resend::Once)
        .await
}

/// The verdict on entry `k` of a batch from every master's `answers`.
pub(crate) fn verdict_of(client: &Client, answers: &[Result<Vec<i64>>], k: usize) -> Renewed {
    let (mut yes, mut no) = (0, 0);
    for a in answers.iter().flatten() {
        match a.get(k) {
            Some(1) => yes += 1,
            Some(_) => no += 1,
            None => {}
        }
    }
    verdict(yes, no, client.masters.len(), client.quorum())
}

#[async_trait]
impl Renew<Renewal> for Renewer {
    type Group = ();

    fn group(&self, _: &Renewal) -> Self::Group {}

    async fn renew(&self, batch: &[Due<Renewal>], limit: Duration) -> Option<Vec<Renewed>> {
        let entries: Vec<(&Renewal, Duration)> =
            batch.iter().map(|d| (&d.entry, d.lease)).collect();
        let answers = renew_on_all(&self.client, &entries, limit).await;
        if answers.iter().all(|a| a.is_err()) {
            return None;
        }
        Some(
            (0..batch.len())
                .map(|k| verdict_of(&self.client, &answers, k))
                .collect(),
        )
    }

    fn request_timeout(&self) -> Duration {
        self.client.settings.command_timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_renews_and_a_blocking_minority_loses() {
        // Five masters, a quorum of three.
        assert_eq!(verdict(3, 2, 5, 3), Renewed::Yes);
        assert_eq!(verdict(2, 2, 5, 3), Renewed::Unsure);
        assert_eq!(verdict(2, 3, 5, 3), Renewed::Gone);
        assert_eq!(verdict(0, 0, 5, 3), Renewed::Unsure);
        // One master.
        assert_eq!(verdict(1, 0, 1, 1), Renewed::Yes);
        assert_eq!(verdict(0, 1, 1, 1), Renewed::Gone);
    }
}
