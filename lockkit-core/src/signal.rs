//! `Signal`: a value that tasks wait on for changes, the small part of `tokio::sync::watch` the
//! lease clock and the state cell need.
//!
//! Why not `watch`: its channel is about 340 bytes (a lock, eight `Notify`s to spread wake-ups
//! over, reference counts), and every held lock has two of them (its clock and its state), where
//! a change wakes one or two waiters. This is a mutex, a version and one `Notify`: about 60
//! bytes.

use std::sync::Mutex;

use tokio::sync::Notify;

/// A value and a version that counts its changes.
#[derive(Debug)]
pub(crate) struct Signal<T: Copy> {
    value: Mutex<(T, u64)>,
    changed: Notify,
}

impl<T: Copy> Signal<T> {
    pub(crate) fn new(value: T) -> Signal<T> {
        Signal {
            value: Mutex::new((value, 0)),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (T, u64)> {
        self.value.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value now.
    pub(crate) fn get(&self) -> T {
        self.lock().0
    }

    /// The value now and its version, for [`changed`](Self::changed).
    pub(crate) fn seen(&self) -> (T, u64) {
        *self.lock()
    }

    /// Lets `modify` change the value; when it says it did, the version moves on and every
    /// waiter is woken. Returns what `modify` said.
    pub(crate) fn send_if_modified(&self, modify: impl FnOnce(&mut T) -> bool) -> bool {
        let mut v = self.lock();
        if !modify(&mut v.0) {
            return false;
        }
        v.1 += 1;
        drop(v);
        self.changed.notify_waiters();
        true
    }

    /// Resolves once the version is no longer `seen`.
    pub(crate) async fn changed(&self, seen: u64) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the version is read: a change after the read wakes it.
            notified.as_mut().enable();
            if self.lock().1 != seen {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_change_wakes_every_waiter_and_no_change_wakes_none() {
        let s = Arc::new(Signal::new(1u32));
        let (v, seen) = s.seen();
        assert_eq!(v, 1);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move { s.changed(seen).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!s.send_if_modified(|_| false));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(waiters.iter().all(|w| !w.is_finished()));
        assert!(s.send_if_modified(|v| {
            *v = 2;
            true
        }));
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .unwrap()
                .unwrap();
        }
        assert_eq!(s.get(), 2);
        // A change that came before the wait began is seen at once.
        tokio::time::timeout(Duration::from_secs(5), s.changed(seen))
            .await
            .unwrap();
    }
}
