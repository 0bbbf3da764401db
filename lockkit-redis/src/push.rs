//! Where pub/sub pushes go: the sink every connection of a client sends its pushes to, as the
//! connection code sees it (the subscriptions implement it).

/// A sink for a client's pub/sub pushes.
pub(crate) trait PushSink: redis::aio::AsyncPushSender + Clone {
    /// Every waiter of the client tries again: pushes may have been lost (a failover, a new
    /// connection).
    fn wake_everyone(&self);
}
