//! Mapping of ZooKeeper client errors onto lockkit's [`ErrorKind`]s.

use lockkit_core::{Error, ErrorKind};
use zookeeper_client as zk;

/// Maps a client error, using the client's own notion of what is transient.
pub(crate) fn map(e: zk::Error, what: &str) -> Error {
    use zk::Error as Z;
    let (kind, retryable) = match &e {
        Z::Timeout => (ErrorKind::Timeout, true),
        Z::ConnectionLoss | Z::NoHosts | Z::SessionMoved | Z::Throttled => {
            (ErrorKind::Connection, true)
        }
        // The client fails requests in flight with the socket's I/O error when a connection
        // breaks (rather than with ConnectionLoss).
        Z::Custom(_) => (ErrorKind::Connection, true),
        // A new session is being established by the session task: retrying may succeed.
        Z::SessionExpired => (ErrorKind::Connection, true),
        Z::AuthFailed | Z::NoAuth => (ErrorKind::Auth, false),
        Z::ClientClosed => (ErrorKind::Closed, false),
        Z::NoChildrenForEphemerals | Z::NodeExists => (ErrorKind::WrongType, false),
        Z::InvalidAcl | Z::BadArguments(_) => (ErrorKind::Config, false),
        _ => (ErrorKind::Backend, false),
    };
    Error::new(kind, format!("zookeeper: {what}"))
        .with_source(e)
        .with_retryable(retryable)
}

/// Whether an operation failed only because the connection dropped while the session lives on:
/// the operation may be retried once the client reconnects.
pub(crate) fn is_transient(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::Custom(_)
    )
}

/// Whether `e` (as [`map`] made it) failed only because the connection dropped while the
/// session lives on.
pub(crate) fn dropped_connection(e: &Error) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<zk::Error>())
        .is_some_and(is_transient)
}

/// Whether `e` (as [`map`] made it), from a request of `client`, failed because the client's
/// session expired: its ephemeral nodes went with it, and the handle opens a new session. Not
/// a closed handle or a refused authentication: those are the acquire's answer.
pub(crate) fn session_ended(client: &zk::Client, e: &Error) -> bool {
    client.state() == zk::SessionState::Expired
        || std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<zk::Error>())
            .is_some_and(|z| matches!(z, zk::Error::SessionExpired))
}
