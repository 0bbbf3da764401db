//! `ServerUrl::parse`, `Scheme::parse` and `redact` on arbitrary input: no panic, and a parsed
//! URL's password never shows in its `Display`/`Debug` nor in `redact`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockkit_core::{redact, Scheme, ServerUrl};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Scheme::parse(s);
    let redacted = redact(s);
    if let Ok(url) = ServerUrl::parse(s) {
        let shown = format!("{url} {url:?}");
        let _ = url.host_list();
        if let Some(pw) = url.password.as_ref().map(|p| p.expose()) {
            // Short passwords can occur elsewhere in the URL by chance.
            if pw.len() >= 8 && !url.hosts.iter().any(|h| h.host.contains(pw)) {
                let elsewhere = url.path.contains(pw)
                    || url.username.as_deref().is_some_and(|u| u.contains(pw))
                    || url
                        .params
                        .iter()
                        .any(|(k, v)| k.contains(pw) || v.contains(pw));
                if !elsewhere {
                    assert!(!shown.contains(pw), "password shown: {shown}");
                    assert!(!redacted.contains(pw), "password in redact(): {redacted}");
                }
            }
        }
    }
});
