//! `Member`: one lock of a multi-lock, as a [`MultiLock`](crate::MultiLock) names it and a
//! backend's atomic take ([`Backend::take_all`](crate::spi::Backend::take_all)) receives it.

use crate::inspect::Primitive;

/// One member of a [`MultiLock`](crate::MultiLock): a mutex, or a read or write hold of an RW
/// lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Member<'a> {
    /// The mutex of this name.
    Mutex(&'a str),
    /// A read (shared) hold of the RW lock of this name.
    Read(&'a str),
    /// A write (exclusive) hold of the RW lock of this name.
    Write(&'a str),
}

impl Member<'_> {
    /// The lock's name.
    pub fn name(&self) -> &str {
        match self {
            Member::Mutex(n) | Member::Read(n) | Member::Write(n) => n,
        }
    }

    /// The primitive the member is a lock of.
    pub fn primitive(&self) -> Primitive {
        match self {
            Member::Mutex(_) => Primitive::Mutex,
            Member::Read(_) | Member::Write(_) => Primitive::RwLock,
        }
    }

    /// The names of `members` when every one is a mutex, else `None`: what a backend's atomic
    /// take of mutexes takes.
    pub fn mutex_names<'a>(members: &[Member<'a>]) -> Option<Vec<&'a str>> {
        members
            .iter()
            .map(|m| match m {
                Member::Mutex(n) => Some(*n),
                Member::Read(_) | Member::Write(_) => None,
            })
            .collect()
    }
}
