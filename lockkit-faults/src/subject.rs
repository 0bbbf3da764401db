//! What the workers contend for: a mutex, an election, an RW lock, a semaphore or multi-locks.
//! Every hold is checked by the same rules: a leadership is a hold whose term is its token, a
//! write lock a hold that excludes every other, a read lock one that shares with readers only, a
//! permit one of the semaphore's [`SEMAPHORE_SIZE`], a multi-lock an exclusive hold of each of
//! its members (two of the run's [`MULTI_MEMBERS`] mutexes), each member a lock of its own.

use lockkit::{AcquireOptions, Locks};
use rand::Rng;

use crate::history::Claim;

/// The size of the semaphore the semaphore rows contend for.
pub const SEMAPHORE_SIZE: u32 = 3;

/// The suffixes of the mutexes the multi-lock rows take two at a time (`<name>-a`, ...).
pub const MULTI_MEMBERS: [&str; 3] = ["a", "b", "c"];

/// The names of the mutexes a multi-lock row's sets are drawn from.
pub fn multi_members(name: &str) -> Vec<String> {
    MULTI_MEMBERS
        .iter()
        .map(|m| format!("{name}-{m}"))
        .collect()
}

/// The primitive of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Primitive {
    /// `locks.mutex(name)`: acquire, release.
    #[default]
    Mutex,
    /// `locks.election(name)`: campaign, resign.
    Election,
    /// `locks.rwlock(name)`: two reads in three, a write otherwise.
    Rwlock,
    /// `locks.semaphore(name, 3)`: one or two permits.
    Semaphore,
    /// `locks.multi([two of <name>-a, <name>-b, <name>-c])`: all of a set or none.
    Multi,
}

impl Primitive {
    /// The name `clap` takes and prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Election => "election",
            Primitive::Rwlock => "rwlock",
            Primitive::Semaphore => "semaphore",
            Primitive::Multi => "multi",
        }
    }

    /// The lock's capacity in permits, as the history checker counts it.
    pub fn permits(self) -> u32 {
        match self {
            Primitive::Semaphore => SEMAPHORE_SIZE,
            _ => 1,
        }
    }
}

/// A handle on the run's lock.
pub enum Subject {
    Mutex(lockkit::Mutex),
    Election(lockkit::Election, String),
    RwLock(lockkit::RwLock),
    Semaphore(lockkit::Semaphore),
    /// The handle and the member names sets are drawn from.
    Multi(Locks, Vec<String>),
}

/// What one acquire asks for.
#[derive(Clone, Debug)]
pub struct Want {
    /// What it claims (of each member, for a multi-lock).
    pub claim: Claim,
    /// A multi-lock's members (empty for every other primitive).
    pub members: Vec<String>,
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
            Primitive::Rwlock => Subject::RwLock(locks.rwlock(name)?),
            Primitive::Semaphore => Subject::Semaphore(locks.semaphore(name, SEMAPHORE_SIZE)?),
            Primitive::Multi => Subject::Multi(locks.clone(), multi_members(name)),
        })
    }

    /// What the next acquire asks for (seeded).
    pub fn pick(&self, rng: &mut impl Rng) -> Want {
        let claim = match self {
            Subject::RwLock(_) if rng.gen_ratio(2, 3) => Claim::Shared,
            Subject::Semaphore(_) => Claim::Permits(rng.gen_range(1..=2)),
            _ => Claim::Exclusive,
        };
        let members = match self {
            Subject::Multi(_, names) => {
                let mut set = names.clone();
                set.remove(rng.gen_range(0..set.len()));
                set
            }
            _ => Vec::new(),
        };
        Want { claim, members }
    }

    /// What holds the whole lock: a write lock, every permit, every member (the final probe
    /// takes it, so nothing the run left behind can hide).
    pub fn whole(&self) -> Want {
        match self {
            Subject::Semaphore(_) => Want {
                claim: Claim::Permits(SEMAPHORE_SIZE),
                members: Vec::new(),
            },
            Subject::Multi(_, names) => Want {
                claim: Claim::Exclusive,
                members: names.clone(),
            },
            _ => Want {
                claim: Claim::Exclusive,
                members: Vec::new(),
            },
        }
    }

    /// Acquires (campaigns, reads, writes, takes permits, takes a set) as `want` says, with
    /// `opts`.
    pub async fn take(&self, want: &Want, opts: &AcquireOptions) -> lockkit::Result<Option<Held>> {
        Ok(match (self, want.claim) {
            (Subject::Mutex(m), _) => m.acquire(opts).await?.map(Held::Lock),
            (Subject::Election(e, value), _) => {
                e.campaign_with(value.as_str(), opts).await?.map(Held::Lead)
            }
            (Subject::RwLock(l), Claim::Shared) => l.read(opts).await?.map(Held::Read),
            (Subject::RwLock(l), _) => l.write(opts).await?.map(Held::Write),
            (Subject::Semaphore(s), Claim::Permits(n)) => {
                s.acquire(n, opts).await?.map(Held::Permit)
            }
            (Subject::Semaphore(s), _) => s.acquire(1, opts).await?.map(Held::Permit),
            (Subject::Multi(locks, _), _) => locks
                .multi(&want.members)?
                .acquire(opts)
                .await?
                .map(Held::Multi),
        })
    }
}

/// A hold: a lock guard, a leadership, a read or write guard, permits.
pub enum Held {
    Lock(lockkit::LockGuard),
    Lead(lockkit::Leadership),
    Read(lockkit::ReadGuard),
    Write(lockkit::WriteGuard),
    Permit(lockkit::Permit),
    Multi(lockkit::MultiGuard),
}

/// Calls the same method on whichever guard `$held` holds.
macro_rules! each {
    ($held:expr, $g:ident => $e:expr) => {
        match $held {
            Held::Lock($g) => $e,
            Held::Lead($g) => $e,
            Held::Read($g) => $e,
            Held::Write($g) => $e,
            Held::Permit($g) => $e,
            Held::Multi($g) => $e,
        }
    };
}

impl Held {
    /// Each lock held and its fencing token (a leadership's term): the run's one lock (an
    /// empty name), or each member of a multi-lock.
    pub fn tokens(&self) -> Vec<(String, u64)> {
        let one = |token: lockkit::FencingToken| vec![(String::new(), token.get())];
        match self {
            Held::Lock(g) => one(g.token()),
            Held::Lead(g) => one(g.token()),
            Held::Read(g) => one(g.token()),
            Held::Write(g) => one(g.token()),
            Held::Permit(g) => one(g.token()),
            Held::Multi(g) => g
                .tokens()
                .into_iter()
                .map(|(name, token)| (name.to_string(), token.get()))
                .collect(),
        }
    }

    /// Whether the state reads live (`Held` or `Suspect`): the lock may still be ours.
    pub fn is_live(&self) -> bool {
        each!(self, g => g.state().is_live())
    }

    /// The lost signal.
    pub fn lost(&self) -> lockkit::Lost {
        each!(self, g => g.lost())
    }

    /// Releases (resigns); a leadership that was no longer held is `LockLost`, as a guard's
    /// release says.
    pub async fn release(self) -> lockkit::Result<()> {
        match self {
            Held::Lock(g) => g.release().await,
            Held::Read(g) => g.release().await,
            Held::Write(g) => g.release().await,
            Held::Permit(g) => g.release().await,
            Held::Multi(g) => g.release().await,
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
