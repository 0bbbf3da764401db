//! A session: one lease of one TTL, shared by every watchdog-leased lock of a `Locks` handle that
//! asked for that lease, kept alive every TTL/3.
//!
//! The session's [`LeaseClock`] is every guard's deadline: the instant before the last
//! successful keepalive (or the grant) was sent plus the TTL the server granted, less the core's
//! margin, so a guard reads Lost in time even if this task is late. A failed keepalive makes the
//! session's guards Suspect; a successful one makes them Held again; no success before the
//! deadline, or a server answer that the lease is gone, makes every guard Lost and retires the
//! session, so the next acquire grants a new lease transparently.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockkit_core::spi::{every, Guards, LeaseClock, Pooled, StateCell};
use lockkit_core::{Backoff, Error, ErrorKind, LostReason, Result};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{is_lease_not_found, map_err, Pool};
use crate::strays::Strays;

/// One granted session lease and its keepalive task.
#[derive(Debug)]
pub(crate) struct Session {
    id: i64,
    clock: Arc<LeaseClock>,
    alive: AtomicBool,
    guards: Guards,
    task: Mutex<Option<JoinHandle<()>>>,
    /// The handle's leases, this one among them for as long as it lives.
    strays: Strays,
}

impl Session {
    /// Grants a lease of exactly `ttl` and starts keeping it alive. It is one of the handle's
    /// leases in `strays` until it is dropped.
    pub(crate) async fn grant(
        pool: &Arc<Pool>,
        ttl: Duration,
        strays: &Strays,
    ) -> Result<Arc<Session>> {
        let (id, sent) = grant_exact(pool, ttl).await?;
        strays.own(id);
        let clock = LeaseClock::new(LostReason::SessionExpired);
        clock.renewed(sent, ttl);
        let session = Arc::new(Session {
            id,
            clock,
            alive: AtomicBool::new(true),
            guards: Guards::default(),
            task: Mutex::new(None),
            strays: strays.clone(),
        });
        let task = tokio::spawn(keepalive(
            Arc::downgrade(&session),
            pool.clone(),
            id,
            ttl,
            sent + ttl,
        ));
        *session.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        tracing::debug!(
            backend = "etcd",
            lease = format_args!("{id:x}"),
            "lockkit: session started"
        );
        Ok(session)
    }

    /// The session's deadline, shared by its guards.
    pub(crate) fn clock(&self) -> &Arc<LeaseClock> {
        &self.clock
    }

    /// The lease id.
    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// Whether the lease is still believed alive: never once its guards would read Lost (its
    /// deadline, which comes a margin before the server's, has passed), so a new acquire is
    /// never handed a session in its last moments.
    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire) && !self.clock.has_passed(Instant::now())
    }

    /// Tracks a guard's state so that a session loss makes it Lost.
    pub(crate) fn track(&self, cell: &StateCell) {
        self.guards.prune();
        self.guards.track(cell, ());
        if !self.is_alive() {
            cell.mark_lost(LostReason::SessionExpired);
        }
    }

    /// Retires the session: every guard turns Lost, the keepalive stops.
    pub(crate) fn retire(&self, why: &str) {
        self.mark_dead(why);
        abort_task(&self.task);
    }

    /// Marks the session dead: every guard turns Lost (the keepalive task calls this itself).
    fn mark_dead(&self, why: &str) {
        if self.alive.swap(false, Ordering::AcqRel) {
            tracing::warn!(
                backend = "etcd",
                lease = format_args!("{:x}", self.id),
                why,
                "lockkit: session lost"
            );
        }
        self.guards.lost(LostReason::SessionExpired, every);
    }

    /// Retires the session and revokes its lease (deleting every key attached to it).
    pub(crate) async fn revoke(&self, pool: &Pool) -> Result<()> {
        self.retire("closed");
        let id = self.id;
        pool.run("lease revoke", true, |mut c| async move {
            c.lease_revoke(id).await
        })
        .await
        .map(drop)
        .or_else(|e| {
            // A lease that already expired is revoked as far as we care.
            if is_lease_not_found(&e) {
                Ok(())
            } else {
                Err(e)
            }
        })
    }
}

impl Pooled for Session {
    fn is_alive(&self) -> bool {
        Session::is_alive(self)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        abort_task(&self.task);
        self.strays.disown(self.id);
    }
}

/// Aborts the background task kept in `slot`, if it is still there (the session's keepalive, a
/// name's watch).
pub(crate) fn abort_task(slot: &Mutex<Option<JoinHandle<()>>>) {
    if let Some(t) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
        t.abort();
    }
}

/// A lease as etcd's TTL: whole seconds, at least 1, or `InvalidArgument` (etcd cannot keep
/// another lease, and rounding would make the lease longer or shorter than asked).
pub(crate) fn whole_seconds(d: Duration) -> Result<i64> {
    if d.subsec_nanos() != 0 || d.as_secs() == 0 {
        return Err(Error::invalid(format!(
            "etcd leases are whole seconds (at least 1 s); {d:?} is not"
        )));
    }
    i64::try_from(d.as_secs()).map_err(|_| Error::invalid(format!("lease {d:?} is too long")))
}

/// Grants a lease of exactly `ttl`: returns its id and the instant before the grant was sent. A
/// server that grants a longer TTL (its minimum) gets the lease revoked and the caller an
/// `InvalidArgument`.
pub(crate) async fn grant_exact(pool: &Arc<Pool>, ttl: Duration) -> Result<(i64, Instant)> {
    let secs = whole_seconds(ttl)?;
    let sent = Instant::now();
    let resp = pool
        .run("lease grant", false, |mut c| async move {
            c.lease_grant(secs, None).await
        })
        .await?;
    if resp.ttl() <= 0 {
        return Err(Error::new(
            ErrorKind::Backend,
            format!("etcd refused the lease: {}", resp.error()),
        ));
    }
    if resp.ttl() != secs {
        let id = resp.id();
        let _ = pool
            .run("lease revoke", true, |mut c| async move {
                c.lease_revoke(id).await
            })
            .await;
        return Err(Error::invalid(format!(
            "etcd granted a {} s lease for the {secs} s asked (its minimum TTL); ask for at least {} s",
            resp.ttl(),
            resp.ttl()
        )));
    }
    Ok((resp.id(), sent))
}

async fn keepalive(
    session: std::sync::Weak<Session>,
    pool: Arc<Pool>,
    id: i64,
    ttl: Duration,
    mut deadline: Instant,
) {
    let period = (ttl / 3).max(Duration::from_millis(100));
    // After a failure, try again soon (on the next endpoint), jittered so that the clients of a
    // failed member do not all come back at once.
    let mut retry = Backoff::SESSION
        .capped((period / 2).max(Duration::from_millis(200)))
        .start();
    let mut stream = None;
    let mut next = Instant::now() + period;
    loop {
        tokio::time::sleep_until(next).await;
        let Some(s) = session.upgrade() else { return };
        // The flag, not `is_alive()`: past the guards' deadline (a margin before the server's)
        // this task still has to mark the session dead and revoke its lease below.
        if !s.alive.load(Ordering::Acquire) {
            return;
        }
        let sent = Instant::now();
        if sent >= deadline {
            s.mark_dead("keepalive did not succeed before the lease deadline");
            drop(s);
            // Its keys may outlive our deadline on the server (until the server's own expiry):
            // revoke it if the server is back, so they stop blocking other acquirers at once.
            let _ = tokio::time::timeout(
                pool.timeout(),
                pool.run("lease revoke", true, |mut c| async move {
                    c.lease_revoke(id).await
                }),
            )
            .await;
            return;
        }
        let budget = (deadline - sent)
            .min(pool.timeout())
            .min(period.max(Duration::from_millis(300)));
        // The endpoint this round talks to: a failed or hung one is left for the next endpoint,
        // or a hung member would keep every later round waiting until the lease ran out.
        let on = stream
            .as_ref()
            .map_or_else(|| pool.current().0, |(i, _, _)| *i);
        let outcome =
            tokio::time::timeout(budget, renew(&pool, id, ttl.as_secs() as i64, &mut stream)).await;
        let renewed = matches!(outcome, Ok(Ok(granted)) if granted > 0);
        lockkit_core::telemetry::renewal("etcd", renewed, sent.elapsed());
        match outcome {
            Ok(Ok(granted)) if granted > 0 => {
                let granted = Duration::from_secs(granted as u64);
                deadline = sent + granted;
                s.clock.renewed(sent, granted);
                // Suspect -> Held; mark_held leaves every other state alone.
                s.guards.held(every);
                retry.reset();
                next = sent + period;
            }
            Ok(Ok(_)) => {
                s.mark_dead("the server says the lease is gone");
                return;
            }
            Ok(Err(e)) => {
                tracing::debug!(backend = "etcd", error = %e, "lockkit: keepalive failed");
                pool.failed(on);
                stream = None;
                s.guards.suspect(every);
                next = Instant::now() + retry.next_pause();
            }
            Err(_) => {
                pool.failed(on);
                stream = None;
                s.guards.suspect(every);
                next = Instant::now() + retry.next_pause();
            }
        }
    }
}

/// An open keepalive stream: the endpoint index it runs on, its sender and its receiver.
type KeepAlive = (
    usize,
    etcd_client::LeaseKeeper,
    etcd_client::LeaseKeepAliveStream,
);

/// One keepalive round trip; returns the TTL granted (0 when the lease is gone).
async fn renew(pool: &Pool, id: i64, ttl: i64, stream: &mut Option<KeepAlive>) -> Result<i64> {
    if stream.is_none() {
        let (idx, mut c) = pool.current();
        match c.lease_keep_alive(id).await {
            Ok((keeper, rx)) => {
                // Opening the stream already sent one keepalive and read its answer.
                *stream = Some((idx, keeper, rx));
                return Ok(ttl);
            }
            Err(e) => {
                let err = map_err(e, "lease keepalive");
                if is_lease_not_found(&err) {
                    return Ok(0);
                }
                pool.failed(idx);
                return Err(err);
            }
        }
    }
    let (_, keeper, rx) = stream.as_mut().expect("stream is open");
    keeper
        .keep_alive()
        .await
        .map_err(|e| map_err(e, "lease keepalive"))?;
    match rx.message().await {
        Ok(Some(resp)) => Ok(resp.ttl()),
        Ok(None) => Err(Error::new(ErrorKind::Connection, "keepalive stream closed")),
        Err(e) => Err(map_err(e, "lease keepalive")),
    }
}
