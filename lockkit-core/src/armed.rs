//! [`Armed`]: the one armed cleanup guard. Whatever a backend has started on the server and no
//! guard owns yet (a claim in a queue, a reentry whose answer was not seen, nodes no guard
//! took, a grant in flight) is held in an `Armed`, so every way out that is not a
//! [`disarm`](Armed::disarm), a dropped future included, runs its [`Undo`] (which hands the work
//! to the reaper when it needs I/O).

use std::ops::{Deref, DerefMut};

/// What undoing a value means, run when its [`Armed`] is dropped without being disarmed. It
/// cannot wait: work that needs I/O goes to the handle's [`Reaper`](crate::spi::Reaper).
pub trait Undo {
    /// Undoes what the value stands for.
    fn undo(self);
}

/// A value whose [`Undo`] runs unless it is disarmed first.
#[derive(Debug)]
pub struct Armed<T: Undo>(Option<T>);

impl<T: Undo> Armed<T> {
    /// Arms `value`.
    pub fn new(value: T) -> Self {
        Armed(Some(value))
    }

    /// Takes the value out: nothing is undone.
    pub fn disarm(mut self) -> T {
        self.0
            .take()
            .expect("an armed value is present until disarmed")
    }
}

impl<T: Undo> Deref for Armed<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0
            .as_ref()
            .expect("an armed value is present until disarmed")
    }
}

impl<T: Undo> DerefMut for Armed<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0
            .as_mut()
            .expect("an armed value is present until disarmed")
    }
}

impl<T: Undo> Drop for Armed<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            value.undo();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    struct Count<'a>(&'a Cell<u32>);
    impl Undo for Count<'_> {
        fn undo(self) {
            self.0.set(self.0.get() + 1);
        }
    }

    #[test]
    fn dropped_undoes_and_disarmed_does_not() {
        let undone = Cell::new(0);
        drop(Armed::new(Count(&undone)));
        assert_eq!(undone.get(), 1);
        let kept = Armed::new(Count(&undone)).disarm();
        assert_eq!(undone.get(), 1);
        kept.undo();
        assert_eq!(undone.get(), 2);
    }

    #[tokio::test]
    async fn a_dropped_future_undoes() {
        let undone = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        struct Flag(std::sync::Arc<std::sync::atomic::AtomicU32>);
        impl Undo for Flag {
            fn undo(self) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let armed = Armed::new(Flag(undone.clone()));
        let fut = async move {
            let _armed = armed;
            std::future::pending::<()>().await;
        };
        let _ = tokio::time::timeout(std::time::Duration::from_millis(1), fut).await;
        assert_eq!(undone.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
