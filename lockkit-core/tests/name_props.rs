//! Property tests of lock-name validation and encoding, and of URL redaction.

use lockkit_core::{encode_name, validate_name, ErrorKind, ServerUrl, MAX_NAME_LEN};
use proptest::prelude::*;

/// The inverse of [`encode_name`]: `%XX` escapes back to bytes.
fn decode(encoded: &str) -> Vec<u8> {
    let b = encoded.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fn valid_name() -> impl Strategy<Value = String> {
    // Any non-control characters, including %, /, '.', spaces and non-ASCII.
    proptest::string::string_regex("[^\\p{Cc}]{1,64}").unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn encoding_round_trips(name in valid_name()) {
        let enc = encode_name(&name);
        prop_assert_eq!(decode(&enc), name.as_bytes());
    }

    #[test]
    fn encoding_is_a_safe_path_segment(name in valid_name()) {
        let enc = encode_name(&name);
        prop_assert!(enc.bytes().all(|c| c.is_ascii_alphanumeric() || b"._-%".contains(&c)), "{}", enc);
        prop_assert!(enc != "." && enc != "..");
        prop_assert!(!enc.is_empty());
    }

    #[test]
    fn encoding_is_injective(a in valid_name(), b in valid_name()) {
        prop_assert_eq!(a == b, encode_name(&a) == encode_name(&b));
    }

    #[test]
    fn validation_matches_its_rule(name in any::<String>()) {
        let expected = !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && !name.chars().any(char::is_control);
        match validate_name(&name) {
            Ok(()) => prop_assert!(expected),
            Err(e) => {
                prop_assert!(!expected);
                prop_assert_eq!(e.kind(), ErrorKind::InvalidName);
            }
        }
    }

    #[test]
    fn url_parsing_never_panics(url in any::<String>()) {
        let _ = ServerUrl::parse(&url);
        let _ = lockkit_core::redact(&url);
    }

    #[test]
    fn urls_never_show_the_password(
        scheme in prop::sample::select(vec!["redis", "rediss", "zk", "etcd", "etcds"]),
        user in "[a-z]{1,8}",
        password in "[A-Za-z0-9]{12,24}",
        token in "[A-Za-z0-9]{12,24}",
        host in "[a-z]{1,10}",
        port in 1u16..,
    ) {
        let url = format!("{scheme}://{user}:{password}@{host}:{port}/p?api_token={token}&x=1");
        let parsed = ServerUrl::parse(&url).unwrap();
        prop_assert_eq!(parsed.password.as_ref().unwrap().expose(), password.as_str());
        for shown in [parsed.to_string(), format!("{parsed:?}"), lockkit_core::redact(&url)] {
            prop_assert!(!shown.contains(&password), "{}", shown);
            prop_assert!(!shown.contains(&token), "{}", shown);
        }
    }
}
