//! What the workers contend for: a mutex (its guard's token) or an election (its leadership's
//! term). Both are fenced the same way and checked by the same rules: a leadership is a hold,
//! its term a token.

use lockkit::{AcquireOptions, Locks};

/// The primitive of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Primitive {
    /// `locks.mutex(name)`: acquire, release.
    #[default]
    Mutex,
    /// `locks.election(name)`: campaign, resign.
    Election,
}

impl Primitive {
    /// The name `clap` takes and prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Election => "election",
        }
    }
}

/// A handle on the run's lock.
pub enum Subject {
    Mutex(lockkit::Mutex),
    Election(lockkit::Election, String),
}

impl Subject {
    /// The handle on `name` through `locks`; a candidate campaigns with `value`.
    pub fn open(
        locks: &Locks,
        primitive: Primitive,
        name: &str,
        value: &str,
    ) -> lockkit::Result<Self> {
        Ok(match primitive {
            Primitive::Mutex => Subject::Mutex(locks.mutex(name)?),
            Primitive::Election => Subject::Election(locks.election(name)?, value.to_string()),
        })
    }

    /// Acquires or campaigns as `opts` says.
    pub async fn take(&self, opts: &AcquireOptions) -> lockkit::Result<Option<Held>> {
        Ok(match self {
            Subject::Mutex(m) => m.acquire(opts).await?.map(Held::Lock),
            Subject::Election(e, value) => {
                e.campaign_with(value.as_str(), opts).await?.map(Held::Lead)
            }
        })
    }
}

/// A hold: a lock guard or a leadership.
pub enum Held {
    Lock(lockkit::LockGuard),
    Lead(lockkit::Leadership),
}

impl Held {
    /// The fencing token (a leadership's term).
    pub fn token(&self) -> u64 {
        match self {
            Held::Lock(g) => g.token().get(),
            Held::Lead(l) => l.term().get(),
        }
    }

    /// Whether the state reads live (`Held` or `Suspect`): the lock may still be ours.
    pub fn is_live(&self) -> bool {
        match self {
            Held::Lock(g) => g.state().is_live(),
            Held::Lead(l) => l.state().is_live(),
        }
    }

    /// The lost signal.
    pub fn lost(&self) -> lockkit::Lost {
        match self {
            Held::Lock(g) => g.lost(),
            Held::Lead(l) => l.lost(),
        }
    }

    /// Releases (resigns); a leadership that was no longer held is `LockLost`, as a guard's
    /// release says.
    pub async fn release(self) -> lockkit::Result<()> {
        match self {
            Held::Lock(g) => g.release().await,
            Held::Lead(l) => match l.resign().await? {
                true => Ok(()),
                false => Err(lockkit::Error::new(
                    lockkit::ErrorKind::LockLost,
                    "the leadership was lost before the resignation",
                )),
            },
        }
    }
}
