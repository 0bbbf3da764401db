//! A semaphore's stored size against the size a handle asks for: one rule and one wording for
//! every backend that keeps the size with the semaphore.

use crate::error::{Error, Result};

/// The size an acquire of semaphore `name` counts against, given the size its handle asks for
/// (`None` for a handle that adopts the stored one) and the size stored on the server, read in
/// the same atomic step. `Ok((size, store))`: `store` is true when nothing was stored and the
/// backend must store `size` in that same step. A stored size other than the one asked for, or
/// no size anywhere, is `InvalidArgument`.
pub fn settle_size(name: &str, asked: Option<u32>, stored: Option<u32>) -> Result<(u32, bool)> {
    match (stored, asked) {
        (Some(s), Some(a)) if s != a => Err(size_mismatch(name, a, s)),
        (Some(s), _) => Ok((s, false)),
        (None, Some(a)) => Ok((a, true)),
        (None, None) => Err(no_size(name)),
    }
}

/// The size a handle asks for, on a backend that keeps no size with the semaphore (where the
/// core never asks for the stored one).
pub fn own_size(permits: Option<u32>) -> Result<u32> {
    permits.ok_or_else(|| Error::unsupported("this backend keeps no semaphore size"))
}

/// A handle of semaphore `name` asked for `asked` permits where `stored` are stored.
pub fn size_mismatch(name: &str, asked: u32, stored: u32) -> Error {
    Error::invalid(format!(
        "semaphore {name:?} has {stored} permits, not the {asked} this handle asks for \
         (Locks::open_semaphore adopts the stored size)"
    ))
}

/// Semaphore `name` has no stored size and its handle asks for none.
pub fn no_size(name: &str) -> Error {
    Error::invalid(format!(
        "semaphore {name:?} has no size yet: make it with Locks::semaphore(name, permits) or \
         Semaphore::set_permits"
    ))
}

/// `n` permits asked of semaphore `name` whose size is `size`.
pub fn too_many(name: &str, n: u32, size: u32) -> Error {
    Error::invalid(format!(
        "cannot acquire {n} of semaphore {name:?}'s {size} permits"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn stored_size_rules() {
        assert_eq!(settle_size("s", Some(3), None).unwrap(), (3, true));
        assert_eq!(settle_size("s", Some(3), Some(3)).unwrap(), (3, false));
        assert_eq!(settle_size("s", None, Some(5)).unwrap(), (5, false));
        let e = settle_size("s", Some(3), Some(5)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("has 5 permits"), "{e}");
        let e = settle_size("s", None, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}
