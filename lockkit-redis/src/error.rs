//! Mapping of redis-rs errors onto lockkit's [`ErrorKind`], using the client's own signals.

use lockkit_core::{Error, ErrorKind};
use redis::{RedisError, RetryMethod};

/// Maps a redis-rs error met while doing `what`.
pub(crate) fn map(e: RedisError, what: &str) -> Error {
    let code = e.code().map(str::to_owned);
    let (kind, retryable) = if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(code.as_deref(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
    {
        (ErrorKind::Auth, false)
    } else if is_handshake_refusal(&e) {
        // A refused handshake (a certificate, a fatal alert): reconnecting cannot fix it.
        (ErrorKind::Auth, false)
    } else if code.as_deref() == Some("WRONGTYPE") {
        (ErrorKind::WrongType, false)
    } else if e.is_timeout() {
        (ErrorKind::Timeout, true)
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        (ErrorKind::Connection, true)
    } else if code.as_deref() == Some("BUSY") {
        // A script is running past the server's limit: every command waits for it to end (or
        // for `SCRIPT KILL`), as after a restart.
        (ErrorKind::Backend, true)
    } else {
        let retry = !matches!(e.retry_method(), RetryMethod::NoRetry);
        (ErrorKind::Backend, retry)
    };
    Error::new(kind, format!("redis: {what} failed"))
        .with_retryable(retryable)
        .with_source(e)
}

/// A command that did not answer within its time limit.
pub(crate) fn timeout(what: &str) -> Error {
    Error::new(ErrorKind::Timeout, format!("redis: {what} timed out"))
}

/// The I/O error kind behind `e`, if it is an I/O failure (redis-rs keeps the `io::Error` behind
/// an `Arc<dyn Error>`, which the core's chain walk looks through).
pub(crate) fn io_kind(e: &RedisError) -> Option<std::io::ErrorKind> {
    lockkit_core::find_source::<std::io::Error>(e).map(std::io::Error::kind)
}

/// Whether `e` is a TLS handshake refusal (by the core's rule, `tls_probe::refusal_in`):
/// a problem of configuration or credentials that a reconnect will not fix.
fn is_handshake_refusal(e: &redis::RedisError) -> bool {
    #[cfg(feature = "tls")]
    {
        lockkit_core::tls_probe::refusal_in(e).is_some()
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = e;
        false
    }
}

/// The error of an acquire the replicas did not acknowledge, which was rolled back.
pub(crate) fn rolled_back(name: &str, e: Error) -> Error {
    Error::new(
        e.kind(),
        format!("lock {name:?}: the acquire was rolled back: {e}"),
    )
    .with_retryable(true)
    .with_source(e)
}
