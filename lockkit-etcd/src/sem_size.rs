//! Where a semaphore keeps its size: the key `<prefix>%size` under its own prefix, with no
//! lease, holding the size in decimal. No queue key starts with `%` (they are
//! `<lease hex>[_n]`), so every reader of the queue tells it apart by its name; the name's
//! prefix watch delivers its changes in order with the queue's, which is how an operator's
//! `set_permits` wakes the waiters that now fit.

use lockkit_core::{Error, ErrorKind, Result};

/// What follows the prefix in the size key.
const SIZE: &[u8] = b"%size";

/// The size key of the semaphore whose prefix is `prefix`.
pub(crate) fn size_key(prefix: &[u8]) -> Vec<u8> {
    [prefix, SIZE].concat()
}

/// Whether `key` is the size key (of whatever prefix it is under; `key` is under a semaphore's
/// prefix, which ends with `/`).
pub(crate) fn is_size_key(key: &[u8]) -> bool {
    key.strip_suffix(SIZE).is_some_and(|p| p.ends_with(b"/"))
}

/// The size a size key holds; anything but a positive number is an error, never a guess.
pub(crate) fn parse_size(value: &[u8]) -> Result<u32> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &u32| n > 0)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::WrongType,
                format!(
                    "a semaphore's size key holds {:?}, not a number of permits",
                    String::from_utf8_lossy(value)
                ),
            )
        })
}

/// The size held by `kv`, when it is the size key (`None` when absent).
pub(crate) fn stored_size(kv: Option<&etcd_client::KeyValue>) -> Result<Option<u32>> {
    kv.map(|kv| parse_size(kv.value())).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_key_is_no_queue_key() {
        let k = size_key(b"lockkit/%sem/jobs/");
        assert_eq!(k, b"lockkit/%sem/jobs/%size");
        assert!(is_size_key(&k));
        assert!(!is_size_key(b"lockkit/%sem/jobs/694d7c1e5a5b0a04"));
        assert!(!is_size_key(b"lockkit/%sem/jobs/694d7c1e5a5b0a04_1"));
        assert_eq!(parse_size(b"3").unwrap(), 3);
        assert!(parse_size(b"0").is_err());
        assert!(parse_size(b"x").is_err());
    }
}
