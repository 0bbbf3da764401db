//! The `file://` election: the leader holds an exclusive OS lock on `elect.<name>.lock`, and its
//! holder record (`elect.<name>.holder`) carries its value and its term, the token it drew.
//! A record counts only while the lock is held, its token is the counter's last one (the
//! holder drew it after locking) and its process is alive, so a record left by an earlier
//! leader never names a leader.
//!
//! OS locks keep no queue (no FIFO order, as for the mutex) and a lock freed by a process that
//! died sends no event, so observers look every [`OBSERVE_EVERY`].

use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::inner::Inner;
use super::oslock::{force_remove, io_error, is_held, remove, LockMode};
use super::paths::LockPaths;
use super::sidecar::Record;
use crate::error::{Error, ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::leader::{Leader, LeaderChanges};
use crate::spi::{GuardParts, LeaderFeed, Look, RawElection, Request};

/// How often an observer looks at the election.
pub(crate) const OBSERVE_EVERY: Duration = Duration::from_millis(50);

#[derive(Debug)]
pub(super) struct FileElection {
    pub(super) inner: Arc<Inner>,
    pub(super) name: Arc<str>,
    pub(super) paths: LockPaths,
}

#[async_trait]
impl RawElection for FileElection {
    async fn campaign(&self, value: &[u8], req: &Request) -> Result<Option<GuardParts>> {
        let Some(files) = Inner::lock_exclusive(req, &self.paths).await? else {
            return Ok(None);
        };
        // We hold the lock: a record there is a leader's that died without removing it. It
        // goes before we draw our term, so it never names a leader again.
        remove(&self.paths.holder()).map_err(io_error)?;
        let parts = self
            .inner
            .finish_exclusive(
                &self.name,
                &self.paths,
                files,
                req.lease(),
                None,
                Some(value.to_vec()),
            )
            .await?;
        // The record is what names the leader: a leadership nobody can see is refused (dropping
        // the parts lets the lock go).
        let written = Record::read(&self.paths.holder()).is_some_and(|r| r.token == parts.token.0);
        if !written {
            return Err(Error::new(
                ErrorKind::Backend,
                format!(
                    "lock directory: could not write the leader record {}",
                    self.paths.holder().display()
                ),
            ));
        }
        Ok(Some(parts))
    }

    async fn leader(&self) -> Result<Option<Leader>> {
        leader_of(&self.paths).map_err(io_error)
    }

    async fn observe(&self) -> Result<LeaderChanges> {
        let (feed, changes) = LeaderFeed::channel();
        let mut closed = self.inner.closed.subscribe();
        // Also when the backend is dropped (its sender goes).
        let stop = async move {
            let _ = closed.wait_for(|c| *c).await;
        };
        tokio::spawn(feed.follow(Poll(self.paths.clone()), stop));
        Ok(changes)
    }

    async fn force_resign(&self) -> Result<bool> {
        force_remove(&self.paths.lock()).map_err(io_error)
    }
}

/// The leader as the files show it now.
fn leader_of(p: &LockPaths) -> io::Result<Option<Leader>> {
    if !is_held(&p.lock(), LockMode::Shared)? {
        return Ok(None);
    }
    let Some(record) = Record::read(&p.holder()) else {
        return Ok(None);
    };
    let last = match std::fs::read_to_string(p.counter()) {
        Ok(text) => text.trim().parse::<u64>().ok(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let current = last == Some(record.token) && record.process_alive();
    Ok(match (current, record.value) {
        (true, Some(value)) => Some(Leader::new(value, FencingToken(record.token))),
        _ => None,
    })
}

/// An observer's look at the files: the leader as they show it, then a pause of
/// [`OBSERVE_EVERY`].
struct Poll(LockPaths);

#[async_trait]
impl Look for Poll {
    async fn look(&mut self, feed: &mut LeaderFeed) -> Result<()> {
        feed.send(leader_of(&self.0).map_err(io_error)?);
        tokio::time::sleep(OBSERVE_EVERY).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::oslock::try_lock_path;
    use super::*;
    use crate::file::FileBackend;
    use crate::Locks;

    fn locks(tag: &str) -> (Locks, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "lockkit-elect-{tag}-{}-{}",
            std::process::id(),
            super::super::sidecar::now_ms()
        ));
        (Locks::new(FileBackend::open(&dir).unwrap()), dir)
    }

    /// A resigned leader's record goes before its lock, so a candidate that has locked but not
    /// yet drawn its term never shows the previous leader again.
    #[tokio::test]
    async fn a_resigned_leaders_record_goes_with_it() {
        let (locks, dir) = locks("resign");
        let e = locks.election("e").unwrap();
        let lead = e.campaign("a").await.unwrap();
        let paths = LockPaths::new(&dir, "elect", "e");
        assert!(paths.holder().exists());
        assert_eq!(
            leader_of(&paths).unwrap().map(|l| l.term()),
            Some(lead.term())
        );
        assert!(lead.resign().await.unwrap());
        assert!(!paths.holder().exists());
        // Locked by the next candidate, before it drew its term: nobody leads yet.
        let next = try_lock_path(&paths.lock(), LockMode::Exclusive)
            .unwrap()
            .expect("free");
        assert!(leader_of(&paths).unwrap().is_none());
        drop(next);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A record whose process is gone names no leader, even while its term is the last one.
    #[tokio::test]
    async fn a_dead_processs_record_names_no_leader() {
        let (locks, dir) = locks("dead");
        let e = locks.election("e").unwrap();
        let lead = e.campaign("a").await.unwrap();
        let paths = LockPaths::new(&dir, "elect", "e");
        let mut record = Record::read(&paths.holder()).unwrap();
        assert!(record.pidns.is_some(), "Linux records their PID namespace");
        record.pid = u32::MAX; // no such process
        record.write(&paths.holder()).unwrap();
        assert!(leader_of(&paths).unwrap().is_none());
        // Written in another PID namespace, its pid says nothing here: the lock and the term
        // decide.
        record.pidns = record.pidns.map(|n| n + 1);
        record.write(&paths.holder()).unwrap();
        assert_eq!(
            leader_of(&paths).unwrap().map(|l| l.term()),
            Some(lead.term())
        );
        lead.resign().await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Observers end when their handle is closed.
    #[tokio::test]
    async fn observers_end_when_the_handle_closes() {
        let (locks, dir) = locks("close");
        let mut changes = locks.election("e").unwrap().observe().await.unwrap();
        assert_eq!(changes.next().await.unwrap().unwrap(), None);
        locks.close().await.unwrap();
        let end = tokio::time::timeout(Duration::from_secs(5), changes.next())
            .await
            .expect("ends within 5 s");
        assert!(end.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A campaign dropped while its term is being drawn keeps the lock until the draw is done,
    /// so the next leader's term is the last drawn and it is seen. The dropped campaign's draw
    /// is held up in its runtime's only blocking thread; the next candidate runs in another.
    #[test]
    fn a_campaign_dropped_mid_draw_does_not_hide_the_next_leader() {
        let rt = |blocking| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .max_blocking_threads(blocking)
                .enable_all()
                .build()
                .unwrap()
        };
        let (starved, free) = (rt(1), rt(4));
        let (locks, dir) = locks("dropped");
        let e = locks.election("e").unwrap();
        let (release, parked) = std::sync::mpsc::channel::<()>();
        starved.spawn_blocking(move || parked.recv());
        let dropped = starved.block_on(async {
            tokio::time::timeout(Duration::from_millis(300), e.campaign("dropped")).await
        });
        assert!(dropped.is_err(), "its draw waits for the blocking thread");
        let next = free.spawn({
            let e = e.clone();
            async move { e.campaign_for("next", Duration::from_secs(10)).await }
        });
        std::thread::sleep(Duration::from_millis(300));
        release.send(()).unwrap();
        let lead = free.block_on(next).unwrap().unwrap().expect("leads");
        // The dropped campaign's draw is done once the lock was let go (in the starved runtime).
        std::thread::sleep(Duration::from_millis(100));
        let seen = free.block_on(e.leader()).unwrap();
        assert_eq!(
            seen.map(|l| l.term()),
            Some(lead.term()),
            "the leader is seen"
        );
        free.block_on(lead.resign()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A leader whose lock file is deleted (as a force-unlock does) is told `Lost`, and the next
    /// candidate leads on a fresh file in a higher term.
    #[tokio::test]
    async fn a_leader_whose_lock_file_is_deleted_is_told() {
        let (locks, dir) = locks("deleted");
        let paths = LockPaths::new(&dir, "elect", "e");
        let e = locks.election("e").unwrap();
        let lead = e.campaign("a").await.unwrap();
        std::fs::remove_file(paths.lock()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), lead.lost())
            .await
            .expect("told Lost");
        assert_eq!(lead.state(), crate::LockState::Lost);
        let next = e.campaign_for("b", Duration::from_secs(5)).await.unwrap();
        let next = next.expect("leads");
        assert!(next.term() > lead.term());
        assert!(!lead.resign().await.unwrap(), "it no longer led");
        assert_eq!(
            e.leader().await.unwrap().map(|l| l.term()),
            Some(next.term())
        );
        next.resign().await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A leader record that cannot be replaced fails the campaign, and lets the lock go.
    #[tokio::test]
    async fn a_leader_record_that_cannot_be_replaced_fails_the_campaign() {
        let (locks, dir) = locks("unwritable");
        let paths = LockPaths::new(&dir, "elect", "e");
        // A directory where the record goes: neither written nor removed.
        std::fs::create_dir(paths.holder()).unwrap();
        std::fs::write(paths.holder().join("keep"), b"").unwrap();
        let e = locks.election("e").unwrap();
        let err = e
            .campaign_for("a", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Backend, "{err}");
        assert!(
            !is_held(&paths.lock(), LockMode::Exclusive).unwrap(),
            "the lock went"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
