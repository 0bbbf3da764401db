//! The one error type of lockkit.

use std::borrow::Cow;
use std::fmt;

/// A `Result` whose error is lockkit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, coarsely. Match on this; read the message for detail.
///
/// Contention is never an error: a lock that stays busy past the wait budget gives `Ok(None)`.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A server operation did not finish within its time limit (not contention).
    Timeout,
    /// The guard's lock is no longer held: its lease ran out, its session expired, its key or
    /// node was deleted or force-unlocked, or its handle was closed. Every operation on a guard
    /// that finds its ownership gone (release, extend, reenter, downgrade, proclaim) answers
    /// this; [`LostReason`](crate::LostReason) from `lost()` says why.
    LockLost,
    /// The backend does not offer this primitive or option.
    Unsupported,
    /// The lock name is empty, too long or holds control characters.
    InvalidName,
    /// An argument is out of range (for example zero permits, or more permits than exist).
    InvalidArgument,
    /// A read lock cannot be upgraded to a write lock: it would deadlock with other readers.
    UpgradeNotSupported,
    /// The URL or configuration is malformed.
    Config,
    /// The URL names a backend whose cargo feature is not compiled in.
    BackendDisabled {
        /// The URL scheme, such as `redis`.
        scheme: &'static str,
        /// The cargo feature of the `lockkit` crate that enables it.
        feature: &'static str,
    },
    /// Credentials were rejected.
    Auth,
    /// A key or node under the lock's name holds data lockkit did not write.
    WrongType,
    /// The server could not be reached or the connection broke.
    Connection,
    /// Replicas did not acknowledge the acquire in time; the acquire was rolled back.
    ReplicaSync,
    /// The handle was closed.
    Closed,
    /// Any other error reported by the backend.
    Backend,
}

impl ErrorKind {
    fn default_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Timeout | ErrorKind::Connection | ErrorKind::ReplicaSync
        )
    }
}

/// A lockkit error: a [`ErrorKind`], a message, and the backend's error as [`source`].
///
/// [`source`]: std::error::Error::source
pub struct Error {
    kind: ErrorKind,
    message: Cow<'static, str>,
    retryable: Option<bool>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// A new error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Error {
            kind,
            message: message.into(),
            retryable: None,
            source: None,
        }
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Overrides the retry advice derived from the kind (backends use their client's own signal).
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = Some(retryable);
        self
    }

    /// The kind of error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human-readable message, without the source.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying the same operation may succeed (a broken connection, a timeout).
    pub fn is_retryable(&self) -> bool {
        self.retryable
            .unwrap_or_else(|| self.kind.default_retryable())
    }

    /// Shorthand for an [`ErrorKind::Unsupported`] error.
    pub fn unsupported(what: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::Unsupported, what)
    }

    /// Shorthand for an [`ErrorKind::LockLost`] error naming the lock.
    pub fn lost(name: &str) -> Self {
        Error::new(
            ErrorKind::LockLost,
            format!("lock {name:?} is no longer held by this guard"),
        )
    }

    /// Shorthand for an [`ErrorKind::InvalidArgument`] error.
    pub fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    /// Shorthand for an [`ErrorKind::Closed`] error.
    pub fn closed() -> Self {
        Error::new(ErrorKind::Closed, "this Locks handle was closed")
    }

    /// An error saying that a backend broke its contract with the core (a bug, reported
    /// instead of a panic).
    pub fn contract(what: impl Into<Cow<'static, str>>) -> Self {
        let what = what.into();
        Error::new(
            ErrorKind::Backend,
            format!("lockkit backend contract broken: {what}"),
        )
    }

    /// Shorthand for an [`ErrorKind::Config`] error.
    pub fn config(message: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::Config, message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// The first error of type `T` in `e`'s chain of sources, `e` included: what a backend looks
/// for in its client's errors (an I/O error's kind, a TLS refusal).
///
/// Client libraries wrap errors in their own: this looks through `source()`, through the
/// payload an `io::Error` carries (whose `source()` skips it), and through a shared
/// `Arc<dyn Error>`; at most 16 errors deep (an end to a chain whose error names itself).
pub fn find_source<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut next = Some(e);
    for _ in 0..SOURCE_DEPTH {
        let e = next?;
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        // A wrapper's own source() leads to the same error its payload does: one way down.
        next = carried(e).or_else(|| e.source());
    }
    None
}

/// How deep [`find_source`] looks: further than any client's chain.
const SOURCE_DEPTH: usize = 16;

type DynError = dyn std::error::Error + 'static;

/// What `e` carries without naming it as its source: the payload of an `io::Error`, or the
/// error behind an `Arc`.
fn carried(e: &DynError) -> Option<&DynError> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    if let Some(shared) = e.downcast_ref::<Shared>() {
        return Some(&**shared);
    }
    let payload = e.downcast_ref::<std::io::Error>()?.get_ref()?;
    Some(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_advice_follows_kind_unless_overridden() {
        assert!(Error::new(ErrorKind::Connection, "x").is_retryable());
        assert!(!Error::new(ErrorKind::Auth, "x").is_retryable());
        assert!(!Error::new(ErrorKind::Connection, "x")
            .with_retryable(false)
            .is_retryable());
        assert!(Error::new(ErrorKind::Backend, "x")
            .with_retryable(true)
            .is_retryable());
    }

    #[test]
    fn display_includes_source() {
        let io = std::io::Error::other("boom");
        let e = Error::new(ErrorKind::Connection, "connect failed").with_source(io);
        assert_eq!(e.to_string(), "connect failed: boom");
        assert!(std::error::Error::source(&e).is_some());
    }
}
