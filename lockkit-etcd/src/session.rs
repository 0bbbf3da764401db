//! A session: one lease of one TTL, shared by every watchdog-leased lock of a `Locks` handle that
//! asked for that lease. The core's [`SharedLease`] keeps it alive every TTL/3 and decides what
//! its renewals mean for the guards (Suspect, Held, Lost); this file supplies the grant, the
//! keep-alive round trip (on a stream that moves to the next endpoint after a failure) and the
//! revoke.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::spi::{KeepAlive, LeaseClock, Pooled, SharedLease, StateCell};
use lockkit_core::{async_trait, Error, ErrorKind, Result};
use tokio::time::Instant;

use crate::client::{is_lease_not_found, map_err, Pool};
use crate::strays::Strays;

/// One granted session lease.
#[derive(Debug)]
pub(crate) struct Session {
    id: i64,
    lease: Arc<SharedLease>,
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
        let keeper = Keeper {
            pool: pool.clone(),
            id,
            ttl: ttl.as_secs() as i64,
            stream: None,
            on: 0,
        };
        let lease = SharedLease::start("etcd", format!("{id:x}"), ttl, sent, keeper);
        tracing::debug!(
            backend = "etcd",
            lease = format_args!("{id:x}"),
            "lockkit: session started"
        );
        Ok(Arc::new(Session {
            id,
            lease,
            strays: strays.clone(),
        }))
    }

    /// The session's deadline, shared by its guards.
    pub(crate) fn clock(&self) -> &Arc<LeaseClock> {
        self.lease.clock()
    }

    /// The lease id.
    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// Whether the lease is still believed alive (see [`SharedLease::is_alive`]).
    pub(crate) fn is_alive(&self) -> bool {
        self.lease.is_alive()
    }

    /// Tracks a guard's state so that a session loss makes it Lost.
    pub(crate) fn track(&self, cell: &StateCell) {
        self.lease.track(cell);
    }

    /// Retires the session: every guard turns Lost, the keepalive stops.
    pub(crate) fn retire(&self, why: &str) {
        self.lease.retire(why);
    }

    /// Retires the session and revokes its lease (deleting every key attached to it).
    pub(crate) async fn revoke(&self, pool: &Pool) -> Result<()> {
        self.retire("closed");
        pool.revoke_lease(self.id).await
    }
}

impl Pooled for Session {
    fn is_alive(&self) -> bool {
        Session::is_alive(self)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.strays.disown(self.id);
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
        let _ = pool.revoke_lease(resp.id()).await;
        return Err(Error::invalid(format!(
            "etcd granted a {} s lease for the {secs} s asked (its minimum TTL); ask for at least {} s",
            resp.ttl(),
            resp.ttl()
        )));
    }
    Ok((resp.id(), sent))
}

/// An open keepalive stream: the endpoint index it runs on, its sender and its receiver.
type KeepAliveStream = (
    usize,
    etcd_client::LeaseKeeper,
    etcd_client::LeaseKeepAliveStream,
);

/// The keep-alive round trip of one session lease.
struct Keeper {
    pool: Arc<Pool>,
    id: i64,
    ttl: i64,
    stream: Option<KeepAliveStream>,
    /// The endpoint of the last round trip.
    on: usize,
}

#[async_trait]
impl KeepAlive for Keeper {
    async fn renew(&mut self) -> Result<Option<Duration>> {
        let (pool, id) = (self.pool.clone(), self.id);
        if self.stream.is_none() {
            let (idx, mut c) = pool.current();
            self.on = idx;
            match c.lease_keep_alive(id).await {
                Ok((keeper, rx)) => {
                    // Opening the stream already sent one keepalive and read its answer.
                    self.stream = Some((idx, keeper, rx));
                    return Ok(Some(Duration::from_secs(self.ttl as u64)));
                }
                Err(e) => {
                    let err = map_err(e, "lease keepalive");
                    if is_lease_not_found(&err) {
                        return Ok(None);
                    }
                    return Err(err);
                }
            }
        }
        let (idx, keeper, rx) = self.stream.as_mut().expect("stream is open");
        self.on = *idx;
        keeper
            .keep_alive()
            .await
            .map_err(|e| map_err(e, "lease keepalive"))?;
        match rx.message().await {
            Ok(Some(resp)) if resp.ttl() > 0 => Ok(Some(Duration::from_secs(resp.ttl() as u64))),
            Ok(Some(_)) => Ok(None),
            Ok(None) => Err(Error::new(ErrorKind::Connection, "keepalive stream closed")),
            Err(e) => Err(map_err(e, "lease keepalive")),
        }
    }

    /// The endpoint failed or hung: the next round trip opens a stream on the next one, or a
    /// hung member would keep every later round waiting until the lease ran out.
    fn failed(&mut self) {
        self.pool.failed(self.on);
        self.stream = None;
    }

    async fn revoke(&mut self) {
        let _ = self.pool.revoke_lease(self.id).await;
    }

    fn request_timeout(&self) -> Duration {
        self.pool.timeout()
    }
}
