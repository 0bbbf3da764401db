//! The full check: a run's history against a lock model with fencing tokens, by Porcupine.
//!
//! The checker is a small Go program in `lockkit-faults/porcupine` (the model is in its
//! `model.go`), built by `scripts/faults.sh`. This module writes the history to
//! `history.json`, runs the program on it and reads its verdict. For a history that is not
//! linearizable (or that the search could not settle in time) the program leaves Porcupine's
//! HTML visualisation, `porcupine.html`, beside the history.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use crate::history::History;

/// The verdict on one history.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Linearizability {
    /// `Ok`, `Illegal` (no linearization exists) or `Unknown` (the search ran out of time);
    /// empty when the check could not run (see `error`).
    #[serde(default)]
    pub result: String,
    /// How many operations the model checked.
    #[serde(default)]
    pub operations: usize,
    /// The visualisation, written for a result that is not `Ok`.
    #[serde(default)]
    pub html: Option<PathBuf>,
    /// Why the check could not run.
    #[serde(default)]
    pub error: Option<String>,
}

impl Linearizability {
    fn failed(error: String) -> Self {
        Linearizability {
            error: Some(error),
            ..Default::default()
        }
    }

    /// One word for the result line: the result, or `error`.
    pub fn word(&self) -> &str {
        if self.error.is_some() {
            "error"
        } else {
            &self.result
        }
    }
}

/// Writes `history` to `dir/history.json`.
pub fn write_history(history: &History, dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join("history.json");
    std::fs::write(
        &path,
        serde_json::to_vec(history).map_err(std::io::Error::other)?,
    )?;
    Ok(path)
}

/// Runs the checker `program` on `history` (written to `dir/history.json` first), giving the
/// search `timeout`.
pub async fn check(
    program: &Path,
    history: &History,
    dir: &Path,
    timeout: Duration,
) -> Linearizability {
    let path = match write_history(history, dir) {
        Ok(path) => path,
        Err(e) => return Linearizability::failed(format!("cannot write history.json: {e}")),
    };
    let html = dir.join("porcupine.html");
    let run = Command::new(program)
        .arg("-history")
        .arg(&path)
        .arg("-html")
        .arg(&html)
        .arg("-timeout")
        .arg(format!("{}ms", timeout.as_millis()))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    // The program stops its own search at `timeout`; the margin covers reading and writing.
    let out = match tokio::time::timeout(timeout + Duration::from_secs(30), run).await {
        Err(_) => return Linearizability::failed(format!("{} did not finish", program.display())),
        Ok(Err(e)) => return Linearizability::failed(format!("{}: {e}", program.display())),
        Ok(Ok(out)) => out,
    };
    if !out.status.success() {
        return Linearizability::failed(format!(
            "{} failed ({}): {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        Linearizability::failed(format!(
            "{} answered {:?}: {e}",
            program.display(),
            String::from_utf8_lossy(&out.stdout).trim()
        ))
    })
}
