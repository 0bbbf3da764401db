//! Holder sidecars: small `key=value` files a holder writes next to its lock (owner, pid, token,
//! lease), read by `inspect`. Best effort: they are for operators, never for correctness.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::fencing::FencingToken;
use crate::inspect::{HoldMode, HolderInfo};

/// Ends the names of records being written (never listed as holders).
pub(crate) const TMP_SUFFIX: &str = ".tmp~";

/// What a holder tells operators about itself.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub(crate) owner: String,
    pub(crate) pid: u32,
    pub(crate) token: u64,
    pub(crate) mode: HoldMode,
    /// Fixed-lease deadline, in ms since the Unix epoch.
    pub(crate) deadline_ms: Option<u64>,
    /// A watchdog lease's length: it is "renewed" for as long as the holder lives.
    pub(crate) watchdog_ms: Option<u64>,
    /// An elected leader's value (written in hex).
    pub(crate) value: Option<Vec<u8>>,
    /// The writer's PID namespace (Linux), so that a reader in another one does not look its
    /// pid up in its own.
    pub(crate) pidns: Option<u64>,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Record {
    /// The holder recorded in `sidecar`, or an unknown exclusive holder while it has none yet.
    pub(crate) fn holder_info(sidecar: &Path) -> HolderInfo {
        Record::read(sidecar).map_or_else(
            || HolderInfo::new("unknown (no holder record yet)", HoldMode::Exclusive),
            |r| r.info(),
        )
    }

    /// Writes the record to `path` (whole or not at all). Holders of locks treat a failure as
    /// harmless (the record is for operators); an elected leader's record is what names it.
    pub(crate) fn write(&self, path: &Path) -> std::io::Result<()> {
        let mode = match self.mode {
            HoldMode::Shared => "shared".to_string(),
            HoldMode::Permits(k) => format!("permits:{k}"),
            _ => "exclusive".to_string(),
        };
        let mut text = format!(
            "owner={}\npid={}\ntoken={}\nmode={mode}\nacquired_ms={}\n",
            self.owner,
            self.pid,
            self.token,
            now_ms()
        );
        if let Some(ns) = self.pidns {
            text.push_str(&format!("pidns={ns}\n"));
        }
        if let Some(d) = self.deadline_ms {
            text.push_str(&format!("deadline_ms={d}\n"));
        }
        if let Some(w) = self.watchdog_ms {
            text.push_str(&format!("watchdog_ms={w}\n"));
        }
        if let Some(v) = &self.value {
            text.push_str("value=");
            for b in v {
                text.push_str(&format!("{b:02x}"));
            }
            text.push('\n');
        }
        // Write then rename, so a reader never sees half a record.
        // The temporary name is unique per owner, so concurrent holders never share one.
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}{TMP_SUFFIX}", self.owner));
        let tmp = std::path::PathBuf::from(tmp);
        let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    pub(crate) fn read(path: &Path) -> Option<Record> {
        let text = std::fs::read_to_string(path).ok()?;
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .map(str::to_string)
        };
        let mode = match get("mode")?.as_str() {
            "shared" => HoldMode::Shared,
            m => match m.strip_prefix("permits:") {
                Some(k) => HoldMode::Permits(k.parse().ok()?),
                None => HoldMode::Exclusive,
            },
        };
        Some(Record {
            owner: get("owner")?,
            pid: get("pid")?.parse().ok()?,
            token: get("token")?.parse().ok()?,
            mode,
            deadline_ms: get("deadline_ms").and_then(|d| d.parse().ok()),
            watchdog_ms: get("watchdog_ms").and_then(|d| d.parse().ok()),
            pidns: get("pidns").and_then(|n| n.parse().ok()),
            value: match get("value") {
                Some(hex) => Some(from_hex(&hex)?),
                None => None,
            },
        })
    }

    pub(crate) fn info(&self) -> HolderInfo {
        let mut h = HolderInfo::new(format!("{} (pid {})", self.owner, self.pid), self.mode)
            .with_token(FencingToken(self.token));
        if let Some(d) = self.deadline_ms {
            h = h.with_remaining_lease(Duration::from_millis(d.saturating_sub(now_ms())));
        } else if let Some(w) = self.watchdog_ms {
            h = h.with_remaining_lease(Duration::from_millis(w));
        }
        h
    }

    /// Whether the writing process may still be alive: true where we cannot tell (not Linux, or
    /// written in another PID namespace, where its pid means another process here).
    pub(crate) fn process_alive(&self) -> bool {
        match (self.pidns, pid_namespace()) {
            (Some(theirs), Some(ours)) if theirs == ours => {
                Path::new(&format!("/proc/{}", self.pid)).exists()
            }
            _ => true,
        }
    }
}

/// The bytes of lowercase hex `s` (`None` when it is not hex).
fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            let pair = s.get(i..i + 2)?;
            // from_str_radix would take a sign.
            pair.bytes()
                .all(|b| b.is_ascii_hexdigit())
                .then(|| u8::from_str_radix(pair, 16).ok())?
        })
        .collect()
}

/// This process's PID namespace: the inode of `/proc/self/ns/pid` (`None` off Linux).
pub(crate) fn pid_namespace() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}
