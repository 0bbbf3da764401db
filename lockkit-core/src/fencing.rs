//! Fencing tokens.

use std::fmt;

/// A number issued with every acquisition, strictly increasing per lock name.
///
/// Pass it to the resource you protect and have that resource reject any token lower than the
/// highest it has seen. A lease-based lock alone cannot stop a paused or partitioned holder from
/// writing after its lease ran out; the token check at the resource can.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(transparent)
)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Anything that carries a fencing token: every guard and permit.
pub trait Fencing {
    /// The token issued when this ownership was acquired.
    fn token(&self) -> FencingToken;
}
