//! Where a semaphore keeps its size: the persistent node `<dir>/size` beside Curator's `locks/`
//! and `leases/`, holding the size as Curator's `SharedCount` does (a 4-byte big-endian int),
//! so a Curator `InterProcessSemaphoreV2` built with `new SharedCount(client, "<dir>/size", n)`
//! counts against the same size. The first handle to acquire creates it; an operator's
//! `set_permits` sets it (its data watch wakes the acquirer waiting for room).
//!
//! Admission reads the lease set and then the size: lease nodes are only added by the holder
//! of the entry mutex (the acquirer deciding), so the count can only have fallen by the time
//! the size is read, and a count that fits that size fits it at the moment it was read.

use std::time::Duration;

use lockkit_core::spi::{settle_size, too_many};
use lockkit_core::{Error, ErrorKind, Result};
use zookeeper_client as zk;

use crate::ops::{retry, retry_resent};
use crate::session::Session;

/// The size node of the semaphore in `dir`.
pub(crate) fn size_path(dir: &str) -> String {
    format!("{dir}/size")
}

/// A size as a `SharedCount` writes it: a 32-bit int, so at most `i32::MAX`.
fn encode(n: u32) -> Result<[u8; 4]> {
    i32::try_from(n).map(i32::to_be_bytes).map_err(|_| {
        Error::invalid(format!(
            "a ZooKeeper semaphore has at most {} permits (a SharedCount is a 32-bit int), not {n}",
            i32::MAX
        ))
    })
}

/// The size a size node holds; anything but a positive 4-byte int is a foreign node.
fn decode(path: &str, data: &[u8]) -> Result<u32> {
    <[u8; 4]>::try_from(data)
        .ok()
        .map(i32::from_be_bytes)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::WrongType,
                format!("{path} holds {data:?}, not a semaphore size (a 4-byte count)"),
            )
        })
}

/// The size stored in `dir`, `None` when there is none.
pub(crate) async fn read(client: &zk::Client, dir: &str, limit: Duration) -> Result<Option<u32>> {
    let path = size_path(dir);
    let got = retry(limit, "read the semaphore size", || async {
        match client.get_data(&path).await {
            Ok((data, _)) => Ok(Some(data)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    })
    .await?;
    got.map(|d| decode(&path, &d)).transpose()
}

/// The size stored in `dir` and a watch that fires when it changes (or appears).
pub(crate) async fn read_and_watch(
    client: &zk::Client,
    dir: &str,
    limit: Duration,
) -> Result<(Option<u32>, zk::OneshotWatcher)> {
    let path = size_path(dir);
    loop {
        let data = retry(limit, "watch the semaphore size", || async {
            match client.get_and_watch_data(&path).await {
                Ok((data, _, watcher)) => Ok(Some((data, watcher))),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await?;
        if let Some((data, watcher)) = data {
            return Ok((Some(decode(&path, &data)?), watcher));
        }
        let (stat, watcher) = retry(limit, "watch the semaphore size", || {
            client.check_and_watch_stat(&path)
        })
        .await?;
        if stat.is_none() {
            return Ok((None, watcher));
        }
        // Created just now: read it.
    }
}

/// Settles the size an acquire of `n` permits counts against, creating the size node with the
/// size asked for when there is none.
pub(crate) async fn settle(
    session: &Session,
    client: &zk::Client,
    dir: &str,
    name: &str,
    asked: Option<u32>,
    n: u32,
) -> Result<u32> {
    let limit = session.cfg.command_timeout;
    loop {
        let stored = read(client, dir, limit).await?;
        let (size, store) = settle_size(name, asked, stored)?;
        if n > size {
            return Err(too_many(name, n, size));
        }
        if !store || create(session, client, dir, size).await? {
            return Ok(size);
        }
        // Someone stored a size first: settle against theirs.
    }
}

/// Creates the size node holding `size`; `false` when one exists already.
async fn create(session: &Session, client: &zk::Client, dir: &str, size: u32) -> Result<bool> {
    let (path, limit) = (size_path(dir), session.cfg.command_timeout);
    let data = encode(size)?;
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&session.acls));
    for _ in 0..3 {
        let made = retry_resent(limit, "store the semaphore size", |resent| {
            let (path, data, options) = (&path, &data, &options);
            async move {
                match client.create(path, data, options).await {
                    Ok(_) => Ok(Some(true)),
                    // Sent again after a try that went unanswered: it may be ours, if it holds
                    // our size and was never set since.
                    Err(zk::Error::NodeExists) if resent => match client.get_data(path).await {
                        Ok((held, stat)) => Ok(Some(held == *data && stat.version == 0)),
                        Err(zk::Error::NoNode) => Ok(None),
                        Err(e) => Err(e),
                    },
                    Err(zk::Error::NodeExists) => Ok(Some(false)),
                    Err(zk::Error::NoNode) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        })
        .await?;
        match made {
            Some(made) => return Ok(made),
            // The directory (a container) is not there, or was reaped: make it.
            None => session.ensure_dir(client, dir).await?,
        }
    }
    Err(Error::new(
        ErrorKind::Backend,
        format!("cannot create {path}: its directory keeps vanishing"),
    ))
}

/// Admin: stores `size` for every handle; the size stored before.
pub(crate) async fn set(
    session: &Session,
    client: &zk::Client,
    dir: &str,
    size: u32,
) -> Result<Option<u32>> {
    let (path, limit) = (size_path(dir), session.cfg.command_timeout);
    let new = encode(size)?;
    loop {
        let got = retry(limit, "read the semaphore size", || async {
            match client.get_data(&path).await {
                Ok((data, stat)) => Ok(Some((data, stat.version))),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await?;
        let Some((data, version)) = got else {
            if create(session, client, dir, size).await? {
                return Ok(None);
            }
            continue;
        };
        let before = decode(&path, &data)?;
        let set = retry_resent(limit, "set the semaphore size", |resent| {
            let (path, new) = (&path, &new);
            async move {
                match client.set_data(path, new, Some(version)).await {
                    Ok(_) => Ok(true),
                    // Sent again after a try that went unanswered: ours if the node holds our
                    // size at the version our set made.
                    Err(zk::Error::BadVersion) if resent => match client.get_data(path).await {
                        Ok((held, stat)) => Ok(held == *new && stat.version == version + 1),
                        Err(zk::Error::NoNode) => Ok(false),
                        Err(e) => Err(e),
                    },
                    Err(zk::Error::BadVersion | zk::Error::NoNode) => Ok(false),
                    Err(e) => Err(e),
                }
            }
        })
        .await?;
        if set {
            return Ok(Some(before));
        }
        // Changed or deleted since we read it: again.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_shared_counts() {
        assert_eq!(encode(3).unwrap(), [0, 0, 0, 3]);
        assert_eq!(decode("p", &encode(70_000).unwrap()).unwrap(), 70_000);
        let e = encode(u32::MAX).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        for bad in [&[0, 0, 0, 0][..], &[255, 255, 255, 255], b"3", b""] {
            assert_eq!(decode("p", bad).unwrap_err().kind(), ErrorKind::WrongType);
        }
    }
}
