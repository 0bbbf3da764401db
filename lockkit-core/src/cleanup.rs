//! [`OnDrop`]: the one armed cleanup guard of every backend.

use std::fmt;

/// Runs a cleanup when dropped while armed.
///
/// An acquire arms one before it sends a request whose effect it must undo if the acquire
/// fails, or its future is dropped, half-way (a queue entry, a node, a key that a lost reply
/// may still have created), and disarms it once the result belongs to a guard or nothing is
/// left to undo. The cleanup runs synchronously in `drop`, so it should only hand the work to
/// the handle's [`Reaper`](crate::spi::Reaper).
///
/// ```
/// use lockkit_core::spi::OnDrop;
/// let ran = std::cell::Cell::new(0);
/// let mut undo = OnDrop::disarmed(|| ran.set(ran.get() + 1));
/// undo.arm(); // the request goes out
/// undo.disarm(); // its answer came: nothing to undo
/// drop(undo);
/// assert_eq!(ran.get(), 0);
/// drop(OnDrop::armed(|| ran.set(ran.get() + 1))); // dropped half-way
/// assert_eq!(ran.get(), 1);
/// ```
#[must_use = "an armed OnDrop dropped at once runs its cleanup at once"]
pub struct OnDrop<F: FnOnce()> {
    cleanup: Option<F>,
    armed: bool,
}

impl<F: FnOnce()> OnDrop<F> {
    /// Armed from the start.
    pub fn armed(cleanup: F) -> Self {
        OnDrop {
            cleanup: Some(cleanup),
            armed: true,
        }
    }

    /// Disarmed until [`arm`](Self::arm)ed.
    pub fn disarmed(cleanup: F) -> Self {
        OnDrop {
            cleanup: Some(cleanup),
            armed: false,
        }
    }

    /// The cleanup runs on drop.
    pub fn arm(&mut self) {
        self.armed = true;
    }

    /// The cleanup does not run on drop (until armed again).
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    /// Arms (`true`) or disarms.
    pub fn set_armed(&mut self, armed: bool) {
        self.armed = armed;
    }

    /// Whether the cleanup runs on drop.
    pub fn is_armed(&self) -> bool {
        self.armed
    }
}

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if self.armed {
            if let Some(cleanup) = self.cleanup.take() {
                cleanup();
            }
        }
    }
}

impl<F: FnOnce()> fmt::Debug for OnDrop<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnDrop")
            .field("armed", &self.armed)
            .finish_non_exhaustive()
    }
}
