//! The fencing-token counter: one file per lock, read, incremented and written back under an
//! exclusive OS lock on that file, then synced, so tokens strictly increase across processes,
//! crashes and restarts.
//!
//! The value is written in place as a fixed-width decimal (21 bytes), so a write never changes
//! the file's length and a torn write cannot shorten it. A counter that does not parse is an
//! error, never a reset: going back would break fencing.

use std::fs::OpenOptions;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use super::oslock::lock_within;

/// The next token of the counter at `path`. Waits at most `within` for the counter's lock (a
/// draw takes it for a write and a sync; a process stopped mid-draw keeps it), so it blocks:
/// call it from `spawn_blocking`.
pub(crate) fn next_token(path: &Path, sync: bool, within: Duration) -> io::Result<u64> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    // A draw in progress elsewhere leaves a new count when it is done: the wait starts over
    // while the counter moves, and fails only on a holder that stopped.
    let mut last = std::fs::read(path).ok();
    let progressed = || {
        let now = std::fs::read(path).ok();
        std::mem::replace(&mut last, now.clone()) != now
    };
    lock_within(&f, path, within, progressed)?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let current = match text.trim() {
        "" => 0,
        t => t.parse::<u64>().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("fencing counter {} is corrupt: {t:?}", path.display()),
            )
        })?,
    };
    let next = current + 1;
    f.seek(SeekFrom::Start(0))?;
    f.write_all(format!("{next:020}\n").as_bytes())?;
    if sync {
        f.sync_data()?;
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_up_and_refuses_garbage() {
        let dir = std::env::temp_dir().join(format!("lockkit-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.token");
        let _ = std::fs::remove_file(&p);
        let within = Duration::from_secs(1);
        assert_eq!(next_token(&p, true, within).unwrap(), 1);
        assert_eq!(next_token(&p, false, within).unwrap(), 2);
        std::fs::write(&p, "garbage").unwrap();
        assert!(next_token(&p, true, within).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
