//! Where one lock's files live in the lock directory.
//!
//! Every file of a lock starts with `<primitive>.<stem>`, where the stem is the name encoded with
//! [`encode_name`] (injective, `[A-Za-z0-9._-%]` only). Long stems are cut and completed with a
//! 128-bit hash of the full name, so every file name stays under the usual 255-byte limit.

use std::path::{Path, PathBuf};

use crate::inspect::{LockEntry, Primitive};
use crate::name::{decode_name, encode_name};

/// Longest encoded stem used as is.
const MAX_STEM: usize = 160;

/// The files of one named primitive.
#[derive(Clone, Debug)]
pub(crate) struct LockPaths {
    base: PathBuf,
    prefix: String,
}

impl LockPaths {
    /// The files of `name` for primitive `kind` (`mutex`, `rw`, `sem`) under `dir`.
    pub(crate) fn new(dir: &Path, kind: &str, name: &str) -> Self {
        LockPaths {
            base: dir.to_path_buf(),
            prefix: format!("{kind}.{}", stem(name)),
        }
    }

    fn file(&self, suffix: &str) -> PathBuf {
        self.base.join(format!("{}.{suffix}", self.prefix))
    }

    /// Which lock on disk these files are: their common prefix, in one case where the file
    /// system folds case (`folds_case`).
    pub(crate) fn resource(&self, folds_case: bool) -> String {
        if folds_case {
            self.prefix.to_ascii_lowercase()
        } else {
            self.prefix.clone()
        }
    }

    /// The lock file held by the holder (mutex, RW lock).
    pub(crate) fn lock(&self) -> PathBuf {
        self.file("lock")
    }

    /// The RW lock's writer gate: a waiting writer holds it to keep new readers out.
    pub(crate) fn gate(&self) -> PathBuf {
        self.file("gate")
    }

    /// The waiting file: every waiter holds a shared lock on it while it waits.
    pub(crate) fn waiting(&self) -> PathBuf {
        self.file("waiting")
    }

    /// The fencing-token counter.
    pub(crate) fn counter(&self) -> PathBuf {
        self.file("token")
    }

    /// The sidecar of the exclusive holder.
    pub(crate) fn holder(&self) -> PathBuf {
        self.file("holder")
    }

    /// A semaphore's size (see `file/size.rs`).
    pub(crate) fn size(&self) -> PathBuf {
        self.file("size")
    }

    /// The gate of a semaphore's size: shared while an acquirer admits itself against the size,
    /// exclusive while the size is stored or changed.
    pub(crate) fn size_gate(&self) -> PathBuf {
        self.file("size-gate")
    }

    /// Semaphore slot `i`.
    pub(crate) fn slot(&self, i: u32) -> PathBuf {
        self.file(&format!("slot.{i}.lock"))
    }

    /// The sidecar of semaphore slot `i`.
    pub(crate) fn slot_holder(&self, i: u32) -> PathBuf {
        self.file(&format!("slot.{i}.holder"))
    }

    /// The sidecar of one reader.
    pub(crate) fn reader(&self, owner: &str) -> PathBuf {
        self.file(&format!("reader.{owner}"))
    }

    /// The slot numbers of the semaphore found in the directory.
    pub(crate) fn slots_present(&self) -> Vec<u32> {
        let head = format!("{}.slot.", self.prefix);
        let mut slots: Vec<u32> = std::fs::read_dir(&self.base)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_prefix(&head)?
                    .strip_suffix(".lock")?
                    .parse()
                    .ok()
            })
            .collect();
        slots.sort_unstable();
        slots
    }

    /// The reader sidecars found in the directory. A reader's owner id (`p<pid>-…`) has no `.`,
    /// so neither a sidecar being written (`….tmp~`) nor a file of the lock named `<name>.reader`
    /// (`rw.<name>.reader.holder`) is taken for one.
    pub(crate) fn readers_present(&self) -> Vec<PathBuf> {
        let head = format!("{}.reader.", self.prefix);
        let mut found: Vec<PathBuf> = std::fs::read_dir(&self.base)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix(&head))
                    .is_some_and(|owner| owner.starts_with('p') && !owner.contains('.'))
            })
            .map(|e| e.path())
            .collect();
        found.sort();
        found
    }
}

/// The primitives whose files are in `dir`, named by their stems (the ones [`stem`] kept whole).
pub(crate) fn named_in(dir: &Path) -> std::io::Result<Vec<LockEntry>> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let Ok(file) = e?.file_name().into_string() else {
            continue;
        };
        let Some((kind, rest)) = file.split_once('.') else {
            continue;
        };
        let (primitive, stem) = match kind {
            "mutex" => (Primitive::Mutex, rest.strip_suffix(".lock")),
            "rw" => (Primitive::RwLock, rest.strip_suffix(".lock")),
            "elect" => (Primitive::Election, rest.strip_suffix(".lock")),
            "sem" => (
                Primitive::Semaphore,
                rest.strip_suffix(".lock")
                    .and_then(|r| r.rsplit_once(".slot."))
                    .filter(|(_, i)| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
                    .map(|(stem, _)| stem),
            ),
            _ => continue,
        };
        if let Some(name) = stem.and_then(decode_name) {
            found.push(LockEntry::new(name, primitive));
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}

/// Whether `dir`'s file system folds case: a probe file named in lower case is looked for in
/// upper case (`id`: the handle's, so that handles never share a probe). `false` when the probe
/// cannot be written (the first acquire reports the directory's problem).
pub(crate) fn folds_case(dir: &Path, id: &str) -> bool {
    let lower = dir.join(format!(".lockkit-case-probe-{id}"));
    let upper = dir.join(format!(".LOCKKIT-CASE-PROBE-{}", id.to_ascii_uppercase()));
    if std::fs::write(&lower, b"").is_err() {
        return false;
    }
    let folds = upper.exists();
    let _ = std::fs::remove_file(&lower);
    folds
}

fn stem(name: &str) -> String {
    let enc = encode_name(name);
    if enc.len() <= MAX_STEM {
        return enc;
    }
    // The encoding is ASCII, so any byte index is a char boundary.
    let (a, b) = hash128(name.as_bytes());
    format!("{}~{a:016x}{b:016x}", &enc[..MAX_STEM - 40])
}

/// Two independent 64-bit FNV-1a hashes with a final mix: stable across versions and platforms.
fn hash128(bytes: &[u8]) -> (u64, u64) {
    fn fnv(bytes: &[u8], seed: u64) -> u64 {
        let mut h = seed;
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // splitmix64 finaliser
        h ^= h >> 30;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 27;
        h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^ (h >> 31)
    }
    (
        fnv(bytes, 0xcbf2_9ce4_8422_2325),
        fnv(bytes, 0x6c62_272e_07bb_0142),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_are_short_distinct_and_safe() {
        let long_a = format!("{}a", "x".repeat(250));
        let long_b = format!("{}b", "x".repeat(250));
        let names = [
            "a/b",
            "a%2Fb",
            "..",
            ".",
            "锁",
            long_a.as_str(),
            long_b.as_str(),
        ];
        let stems: Vec<String> = names.iter().map(|n| stem(n)).collect();
        for (i, s) in stems.iter().enumerate() {
            assert!(s.len() <= MAX_STEM, "{s}");
            assert!(!s.contains('/'), "{s}");
            for t in &stems[i + 1..] {
                assert_ne!(s, t);
            }
        }
        let p = LockPaths::new(Path::new("/d"), "mutex", "..");
        assert_eq!(p.lock(), Path::new("/d/mutex.%2E%2E.lock"));
    }

    /// Where the file system folds case, `A` and `a` are one lock (one file); elsewhere two.
    /// A long name's hash keeps its case, as its file name does.
    #[test]
    fn resources_fold_case_only_where_files_do() {
        let d = Path::new("/d");
        let r = |name: &str, folds: bool| LockPaths::new(d, "mutex", name).resource(folds);
        assert_ne!(r("Orders", false), r("orders", false));
        assert_eq!(r("Orders", true), r("orders", true));
        assert_ne!(r("a/b", true), r("a%2Fb", true));
        let (long_a, long_b) = ("X".repeat(300), "x".repeat(300));
        assert_ne!(r(&long_a, true), r(&long_b, true));
        let dir = std::env::temp_dir();
        // This machine's temporary directory (Linux: case-sensitive), and no probe left behind.
        let id = format!("t{}", std::process::id());
        assert!(!folds_case(&dir, &id));
        assert!(!dir.join(format!(".lockkit-case-probe-{id}")).exists());
    }
}
