//! `LockConfig` from TOML and from environment-like pairs: no panic, and the password never
//! shows in `Debug`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockkit_core::LockConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cfg) = LockConfig::from_toml_str(s) {
        check(&cfg);
    }
    // The same bytes as `KEY=VALUE` lines, the shape of `from_env`.
    let vars = s.lines().filter_map(|l| {
        l.split_once('=')
            .map(|(k, v)| (format!("LOCKKIT_{k}"), v.to_string()))
    });
    if let Ok(cfg) = LockConfig::from_vars(vars) {
        check(&cfg);
    }
});

fn check(cfg: &LockConfig) {
    let _ = cfg.server_url();
    let _ = cfg.default_lease();
    let _ = cfg.prefix();
    let shown = format!("{cfg:?}");
    let Some(pw) = cfg.password.as_ref().map(|p| p.expose()) else {
        return;
    };
    // What Debug may show: the other fields. Skip passwords that occur there by chance.
    let others = format!(
        "{} {:?} {:?} {:?}",
        lockkit_core::redact(&cfg.url),
        cfg.key_prefix,
        cfg.username,
        cfg.options
    );
    if pw.len() >= 8 && !others.contains(pw) {
        assert!(!shown.contains(pw), "password shown: {shown}");
    }
}
