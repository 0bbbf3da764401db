//! What an election's leader and observers share on Redis: the leader as the server has it (one
//! script call), a listener on the election's channel, and the listener that demotes a leader at
//! once when an announcement shows it no longer leads (an admin's `force_resign`), rather than at
//! its next renewal.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::StateCell;
use lockkit_core::{Backoff, FencingToken, Leader, Result};

use crate::client::Inner;
use crate::keys::LockKeys;
use crate::pubsub::Subscription;

/// A listener on the election's channel, once the server has it: every announcement and every
/// reconnect wake it. Named like no owner field, so a hand-off message never reaches it.
pub(crate) async fn listen(inner: &Arc<Inner>, keys: &LockKeys) -> Result<Subscription> {
    let name = format!("listener:{}", inner.new_owner());
    inner.subs.follow(&keys.channel, &name).await
}

/// Listens on the election's channel while the leadership of `term` (watchdog id `id`, in
/// `state`) lasts, and has the watchdog turn it Lost once a read, after subscribing and after
/// each announcement or reconnect, shows another leader or none. A release unregisters the
/// ownership before its script runs, so a leader's own resignation never reads as a demotion.
/// A subscription or a read that fails is tried again at a pace; meanwhile the renewal is the
/// backstop.
pub(crate) async fn demote_when_announced(
    inner: Arc<Inner>,
    keys: Arc<LockKeys>,
    term: FencingToken,
    id: u64,
    state: StateCell,
) {
    let mut changes = state.changes();
    let mut closed = inner.closed.subscribe();
    let mut retry = Backoff::WATCH.start();
    let mut sub: Option<Subscription> = None;
    loop {
        if sub.is_none() {
            sub = listen(&inner, &keys).await.ok();
        }
        // Whether this pass read the leader (else the next pass tries again after a pause).
        let mut read_it = false;
        if sub.is_some() {
            if let Ok((leader, _)) = read(&inner, &keys).await {
                if leader.map(|l| l.term()) != Some(term) {
                    inner.watchdog.lost(id);
                    return;
                }
                read_it = true;
                retry.reset();
            }
        }
        // An announcement or a reconnect; after a failed subscribe or read, the time to try
        // again (an announcement before it may be the demotion).
        let woken = async {
            match &sub {
                Some(sub) if read_it => sub.notified().await,
                _ => retry.wait().await,
            }
        };
        let ended = async { while changes.next().await.is_some() {} };
        tokio::select! {
            () = woken => {}
            // Resigned, lost or closed.
            () = ended => return,
            _ = closed.wait_for(|c| *c) => return,
        }
    }
}

/// The leader, and how long the lock has left when it is held (`None`: free).
pub(crate) async fn read(
    inner: &Inner,
    keys: &LockKeys,
) -> Result<(Option<Leader>, Option<Duration>)> {
    let mut inv = inner.scripts.leader.prepare_invoke();
    inv.key(&keys.lock);
    if let Some(leader) = &keys.leader {
        inv.key(leader);
    }
    let (term, value, pttl): (String, Vec<u8>, i64) = inner.invoke(&inv, "leader").await?;
    let leader = term
        .parse::<u64>()
        .ok()
        .map(|t| Leader::new(value, FencingToken(t)));
    Ok((
        leader,
        (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
    ))
}
