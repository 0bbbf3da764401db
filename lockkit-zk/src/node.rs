//! Node names: Curator's protected-mode names and sequence ordering that survives rollover.
//!
//! A participant node is `_c_<uuid>-<marker><sequence>`: `_c_<uuid>-` is Curator's protection
//! prefix (so a create retried after a connection loss can find the node it may already have
//! made), the marker says what the node is (`lock-`, `__READ__`, `__WRIT__`, `lease-`, `latch-`), and the
//! sequence is ZooKeeper's ten-digit counter of the parent, which is a signed 32-bit number that
//! wraps to negative values after 2^31 - 1.

use std::cmp::Ordering;

/// Curator's InterProcessMutex node marker.
pub const MUTEX_MARKER: &str = "lock-";
/// Curator's InterProcessReadWriteLock read node marker.
pub const READ_MARKER: &str = "__READ__";
/// Curator's InterProcessReadWriteLock write node marker.
pub const WRITE_MARKER: &str = "__WRIT__";
/// Semaphore lease node marker (Curator's InterProcessSemaphoreV2 uses the same).
pub const LEASE_MARKER: &str = "lease-";
/// Curator's LeaderLatch candidate node marker.
pub const LATCH_MARKER: &str = "latch-";

/// The protection prefix of a node created with `uuid`: `_c_<uuid>-`.
pub fn protected_prefix(uuid: &uuid::Uuid) -> String {
    format!("_c_{uuid}-")
}

/// One participant found among a lock directory's children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Participant {
    /// The node name (no directory).
    pub name: String,
    /// Which of the accepted markers it carries (index into the marker list).
    pub marker: usize,
    /// Its sequence number.
    pub seq: i64,
}

/// Parses `name` as a participant carrying one of `markers`, the way Curator's
/// `fixForSorting` does: the sequence is what follows the last occurrence of the marker.
pub fn parse(name: &str, markers: &[&str]) -> Option<Participant> {
    let (marker, seq) = marker_and_seq(name, markers)?;
    Some(Participant {
        name: name.to_string(),
        marker,
        seq,
    })
}

/// The marker index and sequence of `name`, as [`parse`] reads them, without copying the name:
/// a wake reads every child of the lock's directory, which at 256 contending clients made these
/// copies most of a waiter's work.
pub fn marker_and_seq(name: &str, markers: &[&str]) -> Option<(usize, i64)> {
    let mut best: Option<(usize, usize)> = None;
    for (i, m) in markers.iter().enumerate() {
        if let Some(at) = name.rfind(m) {
            let end = at + m.len();
            if best.is_none_or(|(_, e)| end > e) {
                best = Some((i, end));
            }
        }
    }
    let (marker, end) = best?;
    let digits = &name[end..];
    let body = digits.strip_prefix('-').unwrap_or(digits);
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq = digits.parse::<i64>().ok()?;
    Some((marker, seq))
}

/// The position of sequence `seq` relative to `reference`, in ZooKeeper's creation order.
///
/// Sequences are 32-bit counters that wrap from 2^31 - 1 to -2^31; serial-number arithmetic
/// (RFC 1982) orders them correctly as long as the live nodes of one directory span fewer than
/// 2^31 creations, which a lock queue always does. 64-bit sequences (never wrapping) compare
/// plainly.
pub fn offset(seq: i64, reference: i64) -> i64 {
    match (i32::try_from(seq), i32::try_from(reference)) {
        (Ok(s), Ok(r)) => i64::from(s.wrapping_sub(r)),
        _ => seq.saturating_sub(reference),
    }
}

/// Compares two sequences in creation order (rollover-safe for sequences less than 2^31 apart).
pub fn seq_cmp(a: i64, b: i64) -> Ordering {
    offset(a, b).cmp(&0)
}

/// Parses and sorts the participants among `children`, in creation order. Sorting is by offset
/// from one reference node, which is a total order (a plain comparator over wrapped numbers is
/// not, and Rust's sort may panic on one that is not).
pub fn sorted(children: &[String], markers: &[&str], reference: Option<i64>) -> Vec<Participant> {
    let mut nodes: Vec<Participant> = children.iter().filter_map(|c| parse(c, markers)).collect();
    let reference = reference.or_else(|| {
        // With no node of our own, use the oldest: the one no other node comes before.
        nodes
            .iter()
            .map(|p| p.seq)
            .min_by_key(|&r| nodes.iter().filter(|p| offset(p.seq, r) < 0).count())
    });
    if let Some(r) = reference {
        nodes.sort_by(|a, b| {
            offset(a.seq, r)
                .cmp(&offset(b.seq, r))
                .then_with(|| a.name.cmp(&b.name))
        });
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_curator_names() {
        let p = parse(
            "_c_0b6b8d2e-7d0b-4a73-9a69-2a1b1c1d1e1f-lock-0000000042",
            &[MUTEX_MARKER],
        )
        .unwrap();
        assert_eq!(p.seq, 42);
        let p = parse("_c_x-__READ__-2147483648", &[READ_MARKER, WRITE_MARKER]).unwrap();
        assert_eq!((p.marker, p.seq), (0, i64::from(i32::MIN)));
        assert!(parse("_c_x-lock-", &[MUTEX_MARKER]).is_none());
        assert!(parse("_c_x-lock-12a", &[MUTEX_MARKER]).is_none());
        assert!(parse("other", &[MUTEX_MARKER]).is_none());
        assert!(parse("_c_x-__WRIT__0000000001", &[MUTEX_MARKER]).is_none());
    }

    #[test]
    fn order_survives_rollover() {
        let max = i64::from(i32::MAX);
        let min = i64::from(i32::MIN);
        assert_eq!(seq_cmp(1, 2), Ordering::Less);
        assert_eq!(
            seq_cmp(max, min),
            Ordering::Less,
            "2^31-1 comes before the wrapped -2^31"
        );
        assert_eq!(seq_cmp(max - 1, min + 5), Ordering::Less);
        assert_eq!(seq_cmp(min + 5, max - 1), Ordering::Greater);
        assert_eq!(seq_cmp(7, 7), Ordering::Equal);
        let children = names(&[
            "_c_a-lock--2147483647",
            "_c_b-lock-2147483646",
            "_c_c-lock--2147483648",
            "_c_d-lock-2147483647",
            "junk",
        ]);
        for reference in [None, Some(2147483646), Some(-2147483647)] {
            let order: Vec<i64> = sorted(&children, &[MUTEX_MARKER], reference)
                .iter()
                .map(|p| p.seq)
                .collect();
            assert_eq!(order, vec![max - 1, max, min, min + 1], "{reference:?}");
        }
    }

    #[test]
    fn plain_order() {
        let children = names(&[
            "_c_a-lock-0000000003",
            "_c_b-lock-0000000001",
            "_c_c-lock-0000000002",
        ]);
        let order: Vec<i64> = sorted(&children, &[MUTEX_MARKER], None)
            .iter()
            .map(|p| p.seq)
            .collect();
        assert_eq!(order, vec![1, 2, 3]);
    }
}
