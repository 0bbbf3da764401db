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
    let _ = cfg.to_toml_string();
    if cfg.password.is_none() {
        return;
    }
    // The exact oracle: with any other password the config must look the same. (Looking for the
    // password as a substring gives false alarms when it also spells part of another field.)
    let mut other = cfg.clone();
    other.password = Some(lockkit_core::Secret::new("a different password"));
    assert_eq!(
        format!("{cfg:?}"),
        format!("{other:?}"),
        "the password shows"
    );
}
