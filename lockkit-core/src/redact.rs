//! Hiding secrets in URLs and option lists, for messages and logs.

/// Whether an option or query key names a secret (its value is never shown).
pub(crate) fn is_secret_param(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    k.contains("password") || k.contains("secret") || k.contains("token") || k.ends_with("key")
}

/// Redaction without parsing: hides everything before the last `@`, and any `password=` value.
pub(crate) fn redact_raw(url: &str) -> String {
    let hidden = match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***@{}", &url[..s + 3], &url[at + 1..]),
        (None, Some(at)) => format!("***@{}", &url[at + 1..]),
        _ => url.to_string(),
    };
    match hidden.split_once('?') {
        Some((base, _)) => format!("{base}?***"),
        None => hidden,
    }
}
