//! Acquire options.

use std::time::Duration;

/// The default lease of a handle whose config names none: 30 s, renewed by the watchdog
/// (Redisson's `lockWatchdogTimeout`).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The shortest lease any backend takes.
pub const MIN_LEASE: Duration = Duration::from_millis(100);

/// The longest lease any backend takes: 365 days.
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// Why `lease` is no lease lockkit takes, if it is not (too short or too long).
pub(crate) fn lease_problem(lease: Duration) -> Option<String> {
    if lease < MIN_LEASE {
        Some(format!(
            "a lease of {lease:?} is too short (minimum {MIN_LEASE:?})"
        ))
    } else if lease > MAX_LEASE {
        Some(format!(
            "a lease of {lease:?} is too long (maximum {MAX_LEASE:?}, 365 days)"
        ))
    } else {
        None
    }
}

/// Refuses a lease asked for (per acquire or `extend`) that is too short or too long:
/// `InvalidArgument`.
pub(crate) fn check_asked_lease(lease: Duration) -> crate::Result<()> {
    lease_problem(lease).map_or(Ok(()), |why| Err(crate::Error::invalid(why)))
}

/// How long an acquire may wait for a busy lock.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Do not wait: one attempt.
    None,
    /// Wait up to this long.
    For(Duration),
    /// Wait until acquired.
    Forever,
}

/// How long the lock lives without its holder.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lease {
    /// A lease of this length, renewed in the background every third of it while the guard lives.
    Watchdog(Duration),
    /// A lease of this length with no renewal: the lock expires unless [`extend`]ed.
    ///
    /// [`extend`]: crate::LockGuard::extend
    Fixed(Duration),
}

impl Lease {
    /// The lease length.
    pub fn duration(&self) -> Duration {
        match *self {
            Lease::Watchdog(d) | Lease::Fixed(d) => d,
        }
    }

    /// Whether the lease is renewed in the background.
    pub fn is_watchdog(&self) -> bool {
        matches!(self, Lease::Watchdog(_))
    }
}

/// Options for one acquire. Build with the methods; the defaults wait forever with the handle's
/// default lease (`LockConfig::lease`, 30 s unless set), renewed by the watchdog.
///
/// ```
/// use std::time::Duration;
/// use lockkit_core::AcquireOptions;
/// let opts = AcquireOptions::new().wait(Duration::from_secs(2)).fixed_lease(Duration::from_secs(10));
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquireOptions {
    /// How long to wait for a busy lock.
    pub wait: Wait,
    /// The lease; `None` takes the handle's default lease, renewed by the watchdog.
    pub lease: Option<Lease>,
    /// Ask for first-come-first-served order where the backend offers both orders.
    pub fair: bool,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            wait: Wait::Forever,
            lease: None,
            fair: false,
        }
    }
}

impl AcquireOptions {
    /// Waits forever, the handle's default lease, the backend's default order.
    pub fn new() -> Self {
        Self::default()
    }

    /// One attempt, no waiting.
    pub fn no_wait(mut self) -> Self {
        self.wait = Wait::None;
        self
    }

    /// Waits at most `d` (a zero duration means one attempt).
    pub fn wait(mut self, d: Duration) -> Self {
        self.wait = if d.is_zero() {
            Wait::None
        } else {
            Wait::For(d)
        };
        self
    }

    /// Waits until acquired.
    pub fn wait_forever(mut self) -> Self {
        self.wait = Wait::Forever;
        self
    }

    /// A watchdog lease of `d`, renewed while the guard lives.
    pub fn watchdog_lease(mut self, d: Duration) -> Self {
        self.lease = Some(Lease::Watchdog(d));
        self
    }

    /// A fixed lease of `d`, not renewed.
    pub fn fixed_lease(mut self, d: Duration) -> Self {
        self.lease = Some(Lease::Fixed(d));
        self
    }

    /// Sets the lease.
    pub fn lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Asks for fair (FIFO) order.
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// The wait budget as an optional deadline duration: `None` means forever.
    pub fn wait_budget(&self) -> Option<Duration> {
        match self.wait {
            Wait::None => Some(Duration::ZERO),
            Wait::For(d) => Some(d),
            Wait::Forever => None,
        }
    }
}
