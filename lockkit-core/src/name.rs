//! Lock-name validation. A name valid for one backend is valid for all; backends encode names
//! where their key or path syntax needs it.

use crate::error::{Error, ErrorKind, Result};

/// The longest lock name accepted, in bytes of UTF-8.
pub const MAX_NAME_LEN: usize = 256;

/// Checks a lock name: non-empty, at most [`MAX_NAME_LEN`] bytes, no control characters.
///
/// ```
/// assert!(lockkit_core::validate_name("orders/42").is_ok());
/// assert!(lockkit_core::validate_name("").is_err());
/// assert!(lockkit_core::validate_name("a\nb").is_err());
/// ```
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::new(ErrorKind::InvalidName, "lock name is empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!(
                "lock name is {} bytes long; the limit is {MAX_NAME_LEN}",
                name.len()
            ),
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!("lock name {name:?} contains the control character {c:?}"),
        ));
    }
    Ok(())
}

/// Encodes a validated name into a string of `[A-Za-z0-9._-]` plus `%XX` escapes, for backends
/// whose keys or paths cannot hold arbitrary characters (ZooKeeper node names, etcd prefixes).
/// The encoding is injective and stable across versions.
pub fn encode_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    // "." and ".." are reserved path segments in ZooKeeper.
    if out == "." || out == ".." {
        return out.replace('.', "%2E");
    }
    out
}

/// The name [`encode_name`] encoded into `encoded`, or `None` when `encoded` is not exactly
/// what `encode_name` produces for some name (a stray byte, a bad or needless escape, lowercase
/// hex, invalid UTF-8).
///
/// ```
/// use lockkit_core::{decode_name, encode_name};
/// assert_eq!(decode_name(&encode_name("orders/42 ü")).as_deref(), Some("orders/42 ü"));
/// assert_eq!(decode_name("a%2"), None);
/// assert_eq!(decode_name("%41"), None); // encode_name never escapes "A"
/// ```
pub fn decode_name(encoded: &str) -> Option<String> {
    let name = decode_bytes(encoded)?;
    (encode_name(&name) == encoded).then_some(name)
}

fn decode_bytes(encoded: &str) -> Option<String> {
    let b = encoded.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = encoded.get(i + 1..i + 3)?;
                if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            c @ (b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-') => {
                out.push(c);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_inverts_encode() {
        for name in ["a", "orders/42", "ünïcødé 锁", ".", "..", "%41", "a b/c"] {
            assert_eq!(decode_name(&encode_name(name)).as_deref(), Some(name));
        }
        assert_eq!(decode_name("%zz"), None);
        assert_eq!(decode_name("a/b"), None);
        assert_eq!(decode_name("%FF"), None);
        for not_canonical in ["%2f", "%41", ".", "..", "%+F"] {
            assert_eq!(decode_name(not_canonical), None, "{not_canonical}");
        }
    }

    #[test]
    fn validation_table() {
        let long = "x".repeat(MAX_NAME_LEN + 1);
        let max = "x".repeat(MAX_NAME_LEN);
        let cases: &[(&str, bool)] = &[
            ("a", true),
            ("orders/42", true),
            ("ünïcødé 锁", true),
            ("with space", true),
            (&max, true),
            ("", false),
            (&long, false),
            ("tab\there", false),
            ("nul\0", false),
            ("del\u{7f}", false),
        ];
        for (name, ok) in cases {
            let r = validate_name(name);
            assert_eq!(r.is_ok(), *ok, "{name:?}");
            if let Err(e) = r {
                assert_eq!(e.kind(), ErrorKind::InvalidName);
            }
        }
    }

    #[test]
    fn encoding_is_safe_and_distinct() {
        assert_eq!(encode_name("abc-1.2_3"), "abc-1.2_3");
        assert_eq!(encode_name("a/b"), "a%2Fb");
        assert_eq!(encode_name(".."), "%2E%2E");
        assert_ne!(encode_name("a/b"), encode_name("a%2Fb"));
        assert!(encode_name("锁")
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '%'));
    }
}
