#![doc = include_str!("../README.md")]

mod acquire;
mod backend;
mod client;
mod config;
mod election;
mod held;
mod inner;
mod key_stream;
mod key_watch;
mod multi;
mod mutex;
mod ops;
mod rwlock;
mod sem_size;
mod semaphore;
mod session;
mod strays;
mod stream;
mod tls;
mod watch;
mod watch_ids;

use std::sync::Arc;

use lockkit_core::settings::Settings;
use lockkit_core::{
    BackendInfo, Error, ErrorKind, LockConfig, LockGuard, LockState, Locks, Permit, ReadGuard,
    Result, SchemeInfo, WriteGuard,
};

pub use etcd_client;

use backend::EtcdBackend;
pub use config::{EtcdKey, KIND};
use inner::Inner;

/// The etcd backend's descriptor: `etcd://` and `etcds://` (TLS), port 2379 by default.
pub static INFO: BackendInfo = BackendInfo {
    kind: KIND,
    schemes: &[
        SchemeInfo {
            name: "etcd",
            aliases: &[],
            default_port: Some(2379),
            tls: false,
        },
        SchemeInfo {
            name: "etcds",
            aliases: &[],
            default_port: Some(2379),
            tls: true,
        },
    ],
    feature: Some("etcd"),
    connect: |cfg| Box::pin(connect(cfg)),
};

/// Connects to etcd as described by `cfg` and returns a [`Locks`] handle.
///
/// URL: `etcd://[user:password@]host1:2379[,host2:2379…][?lease=10s]` (or `etcds://` for TLS).
/// Options (from the URL query or `cfg.options`): `lease` (the handle's default lease, which is
/// the TTL of its session lease; whole seconds, at least 1 s; `lease_ttl` is its older name),
/// `prefix` (or `cfg.key_prefix`, default `lockkit`), `connect_timeout`, `command_timeout`
/// (every request), and for `etcds://` `tls_ca`, `tls_cert`, `tls_key`, `tls_domain`. An
/// acquire that asks for another watchdog lease gets a session lease of that TTL; a fixed lease
/// gets a lease of its own.
///
/// Fails with a retryable [`ErrorKind::Connection`] error when no endpoint answers, with
/// [`ErrorKind::Auth`] when the credentials are rejected and with [`ErrorKind::Config`] for a bad
/// URL or option.
///
/// # Cancel safety
/// Dropping the future leaves nothing behind (no lease is granted before the first acquire).
pub async fn connect(cfg: &LockConfig) -> Result<Locks> {
    Ok(connect_etcd(cfg).await?.locks)
}

/// Like [`connect`], but returns an [`EtcdLocks`], which also offers etcd-specific extensions
/// such as [`EtcdLocks::is_owner`].
pub async fn connect_etcd(cfg: &LockConfig) -> Result<EtcdLocks> {
    let settings = Settings::<EtcdKey>::parse_with_tls(cfg, &INFO, tls::RULES)?;
    let url = settings.url().clone();
    let tls = settings.tls().map(tls::options);
    let lease = settings.lease_or_alias(EtcdKey::LeaseTtl)?;
    session::whole_seconds(lease).map_err(|e| Error::config(e.message().to_string()))?;
    let http = if tls.is_some() { "https" } else { "http" };
    let endpoints: Vec<String> = url.hosts.iter().map(|h| format!("{http}://{h}")).collect();
    let user = match (&url.username, &url.password) {
        (Some(u), Some(p)) => Some((u.clone(), p.expose().to_string())),
        (Some(u), None) => Some((u.clone(), String::new())),
        (None, Some(_)) => {
            return Err(Error::config(
                "an etcd user needs a name, not only a password (etcd://user:password@host)",
            ))
        }
        (None, None) => None,
    };
    let tls_on = tls.is_some();
    let connected = async {
        let pool = client::Pool::connect(
            &endpoints,
            user,
            tls,
            settings.connect_timeout(),
            settings.command_timeout(),
        )
        .await?;
        pool.probe().await?;
        Ok::<_, Error>(pool)
    }
    .await;
    let pool = match connected {
        Err(e) if tls_on && e.kind() == ErrorKind::Connection => {
            // etcd-client reports a client certificate the server rejects (expired, missing,
            // from another CA) sometimes as the server's alert and sometimes only as a closed
            // connection, which would look retryable: a handshake of our own tells.
            let refusal = match settings.tls() {
                Some(tls) => tls.refusal(&url.hosts, settings.connect_timeout()).await,
                None => None,
            };
            return Err(match refusal {
                Some(why) => Error::new(
                    ErrorKind::Auth,
                    format!("etcd: TLS with {} refused: {why}", url.host_list()),
                )
                .with_retryable(false),
                None => e,
            });
        }
        connected => connected?,
    };
    let inner = Inner::new(pool, settings.prefix().to_string(), lease);
    let locks = Locks::new(EtcdBackend {
        inner: inner.clone(),
    });
    Ok(EtcdLocks { locks, inner })
}

/// A [`Locks`] handle on etcd with etcd-specific extensions. It dereferences to [`Locks`].
#[derive(Debug, Clone)]
pub struct EtcdLocks {
    locks: Locks,
    inner: Arc<Inner>,
}

impl std::ops::Deref for EtcdLocks {
    type Target = Locks;
    fn deref(&self) -> &Locks {
        &self.locks
    }
}

impl From<EtcdLocks> for Locks {
    fn from(e: EtcdLocks) -> Locks {
        e.locks
    }
}

impl EtcdLocks {
    /// The plain [`Locks`] handle.
    pub fn locks(&self) -> &Locks {
        &self.locks
    }

    /// An etcd client on the current endpoint, for your own requests (for example transactions
    /// guarded by [`is_owner`](Self::is_owner)).
    pub fn client(&self) -> etcd_client::Client {
        self.inner.pool.current().1
    }

    /// The etcd key that backs `guard`'s ownership: `<prefix>/<encoded name>/<lease hex>[_n]`.
    /// Fails with `LockLost` when this handle holds no such ownership (any more).
    pub async fn key_of(&self, guard: &impl Ownership) -> Result<Vec<u8>> {
        let prefix = self.inner.prefix(guard.kind(), guard.name());
        let rev = guard.token().get() as i64;
        let kvs = self.inner.keys_by_create(&prefix, 0).await?;
        // A semaphore's first permit key is created with the size key, at one revision.
        kvs.iter()
            .find(|kv| kv.create_revision() == rev && !sem_size::is_size_key(kv.key()))
            .map(|kv| kv.key().to_vec())
            .ok_or_else(|| Error::lost(guard.name()))
    }

    /// A compare that holds exactly while `guard` owns its lock: its key still exists with the
    /// create revision that is the guard's fencing token. Put it in the `when` of your own etcd
    /// transaction so that the writes happen only while you hold the lock:
    ///
    /// ```no_run
    /// # async fn demo(locks: lockkit_etcd::EtcdLocks) -> lockkit_core::Result<()> {
    /// use lockkit_etcd::etcd_client::{Txn, TxnOp};
    /// let guard = locks.mutex("orders/42")?.lock().await?;
    /// let txn = Txn::new()
    ///     .when([locks.is_owner(&guard).await?])
    ///     .and_then([TxnOp::put("orders/42/state", "shipped", None)]);
    /// let resp = locks.client().txn(txn).await.expect("etcd answered");
    /// assert!(resp.succeeded(), "we lost the lock before writing");
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Works for every guard type: [`LockGuard`], [`WriteGuard`], [`ReadGuard`] and [`Permit`].
    pub async fn is_owner(&self, guard: &impl Ownership) -> Result<etcd_client::Compare> {
        if !guard.state().is_live() {
            return Err(Error::new(
                ErrorKind::LockLost,
                format!("lock {:?} is no longer held", guard.name()),
            ));
        }
        let key = self.key_of(guard).await?;
        Ok(etcd_client::Compare::create_revision(
            key,
            etcd_client::CompareOp::Equal,
            guard.token().get() as i64,
        ))
    }
}

/// A guard whose ownership is an etcd key: [`LockGuard`], [`WriteGuard`], [`ReadGuard`],
/// [`Permit`]. Sealed: implemented by lockkit only.
pub trait Ownership: sealed::Sealed {
    /// The lock's name.
    fn name(&self) -> &str;
    /// The fencing token (the key's create revision).
    fn token(&self) -> lockkit_core::FencingToken;
    /// The guard's state.
    fn state(&self) -> LockState;
}

mod sealed {
    /// Which prefix a guard's key lives under.
    pub enum Prim {
        Mutex,
        RwLock,
        Semaphore,
    }

    pub trait Sealed {
        fn prim(&self) -> Prim;
    }
}

impl<T: Ownership + ?Sized> OwnershipExt for T {}

trait OwnershipExt: Ownership {
    fn kind(&self) -> watch::Kind {
        match sealed::Sealed::prim(self) {
            sealed::Prim::Mutex => watch::Kind::Mutex,
            sealed::Prim::RwLock => watch::Kind::RwLock,
            sealed::Prim::Semaphore => watch::Kind::Semaphore,
        }
    }
}

macro_rules! ownership {
    ($($t:ty => $k:ident),*) => {$(
        impl sealed::Sealed for $t {
            fn prim(&self) -> sealed::Prim {
                sealed::Prim::$k
            }
        }
        impl Ownership for $t {
            fn name(&self) -> &str {
                <$t>::name(self)
            }
            fn token(&self) -> lockkit_core::FencingToken {
                <$t>::token(self)
            }
            fn state(&self) -> LockState {
                <$t>::state(self)
            }
        }
    )*};
}
ownership!(
    LockGuard => Mutex,
    WriteGuard => RwLock,
    ReadGuard => RwLock,
    Permit => Semaphore
);
