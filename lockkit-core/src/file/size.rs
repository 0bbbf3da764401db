//! A `file://` semaphore's size: the file `sem.<stem>.size` (a decimal count, replaced whole by
//! a rename), guarded by the OS lock on `sem.<stem>.size-gate`.
//!
//! An acquirer admits itself under a shared lock on the gate: it reads the size and takes `n`
//! free slots among the first `size` (all or none), so while every holder sits in those slots
//! the slots themselves bound the holders. Storing the size and changing it take the gate
//! exclusively. After a shrink, holders may sit in slots at or past the size (they keep their
//! permits); while any does, an acquirer admits itself under the exclusive gate instead, where
//! nobody else admits, counting every holder.

use std::io::{self, Write};
use std::path::Path;

use super::oslock::{is_held, lock_within, refusal, try_lock_path, LockMode, Locked};
use super::paths::LockPaths;
use crate::error::{Error, ErrorKind};
use crate::spi::{settle_size, too_many};

/// The size stored at `path`, `None` when there is none.
pub(super) fn read(path: &Path) -> io::Result<Option<u32>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match text.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(refusal(Error::new(
            ErrorKind::WrongType,
            format!("{} holds {text:?}, not a semaphore size", path.display()),
        ))),
    }
}

/// Stores `size` at `path` (written aside, synced when `sync`, then renamed over it). Only one
/// writer at a time (under the exclusive gate), so the file aside has a fixed name; whatever
/// is found there (left by a crash, or a symlink planted in a directory others may write) is
/// removed, and the new one is created afresh, never opened through a link.
pub(super) fn write(path: &Path, size: u32, sync: bool) -> io::Result<()> {
    let tmp = path.with_extension(format!("size{}", super::sidecar::TMP_SUFFIX));
    super::oslock::remove(&tmp)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    f.write_all(format!("{size}\n").as_bytes())?;
    if sync {
        f.sync_data()?;
    }
    std::fs::rename(&tmp, path)
}

/// Slots in use, among those present.
pub(super) fn in_use(p: &LockPaths) -> io::Result<u32> {
    let mut used = 0;
    for i in p.slots_present() {
        if is_held(&p.slot(i), LockMode::Exclusive)? {
            used += 1;
        }
    }
    Ok(used)
}

/// Whether a holder sits in a slot at or past `size` (only after a shrink).
fn held_past(p: &LockPaths, size: u32) -> io::Result<bool> {
    for i in p.slots_present().into_iter().filter(|&i| i >= size) {
        if is_held(&p.slot(i), LockMode::Exclusive)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `n` free slots among the first `size`, or none.
fn take(p: &LockPaths, n: u32, size: u32) -> io::Result<Option<Vec<(u32, Locked)>>> {
    let mut got = Vec::new();
    for i in 0..size {
        if got.len() == n as usize {
            break;
        }
        if let Some(l) = try_lock_path(&p.slot(i), LockMode::Exclusive)? {
            got.push((i, l));
        }
    }
    // All or nothing: a partial set is dropped, and so released, here.
    Ok((got.len() == n as usize).then_some(got))
}

/// One attempt at `n` permits of semaphore `name` whose handle asks for `asked` (`None`: the
/// stored size); never blocks. A size that refuses it is an error (carried by the `io::Error`,
/// see [`refusal`]). Once the size is settled, `asked` turns `None`: a waiter counts against
/// whatever size is stored from then on, as an operator's `set_permits` changes it.
pub(super) fn admit(
    p: &LockPaths,
    name: &str,
    asked: &mut Option<u32>,
    n: u32,
    sync: bool,
) -> io::Result<Option<Vec<(u32, Locked)>>> {
    let settle = |stored: Option<u32>, asked: Option<u32>| {
        let (size, store) = settle_size(name, asked, stored).map_err(refusal)?;
        if n > size {
            return Err(refusal(too_many(name, n, size)));
        }
        Ok((size, store))
    };
    let gate = p.size_gate();
    let Some(shared) = try_lock_path(&gate, LockMode::Shared)? else {
        return Ok(None);
    };
    let (size, store) = settle(read(&p.size())?, *asked)?;
    if !store {
        *asked = None;
        if !held_past(p, size)? {
            return take(p, n, size);
        }
    }
    drop(shared);
    let Some(_exclusive) = try_lock_path(&gate, LockMode::Exclusive)? else {
        return Ok(None);
    };
    let (size, store) = settle(read(&p.size())?, *asked)?;
    if store {
        write(&p.size(), size, sync)?;
    }
    *asked = None;
    if u64::from(in_use(p)?) + u64::from(n) > u64::from(size) {
        return Ok(None);
    }
    take(p, n, size)
}

/// Admin: stores `size` for every handle under the exclusive gate (waiting, at most `within`,
/// for acquirers that are admitting themselves); the size before. Blocks: call it from
/// `spawn_blocking`.
pub(super) fn set(
    p: &LockPaths,
    size: u32,
    sync: bool,
    within: std::time::Duration,
) -> io::Result<Option<u32>> {
    let gate = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(p.size_gate())?;
    lock_within(&gate, &p.size_gate(), within, || false)?;
    let before = read(&p.size())?;
    write(&p.size(), size, sync)?;
    Ok(before)
}
