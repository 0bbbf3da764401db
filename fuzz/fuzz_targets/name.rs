//! Lock-name validation and encoding: no panic; a valid name encodes to a safe, non-empty path
//! segment that decodes back to the name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockkit_core::{encode_name, validate_name};

fuzz_target!(|data: &[u8]| {
    let Ok(name) = std::str::from_utf8(data) else {
        return;
    };
    if validate_name(name).is_err() {
        return;
    }
    let enc = encode_name(name);
    assert!(!enc.is_empty() && enc != "." && enc != "..");
    assert!(enc
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"._-%".contains(&c)));
    let mut decoded = Vec::new();
    let b = enc.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
            decoded.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            decoded.push(b[i]);
            i += 1;
        }
    }
    assert_eq!(decoded, name.as_bytes());
});
