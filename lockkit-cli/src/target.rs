//! Which backend to talk to: `--url`, `LOCKKIT_URL` or `--config FILE`.

use std::path::PathBuf;

use lockkit::{LockConfig, Locks};

use crate::exit::code;

/// The backend selection from the command line and the environment.
#[derive(Debug)]
pub(crate) struct Target {
    urls: Vec<String>,
    config: Option<PathBuf>,
}

impl Target {
    pub(crate) fn new(urls: Vec<String>, config: Option<PathBuf>) -> Self {
        Target { urls, config }
    }

    /// Every configuration given: one per `--url` (over the config file's options), else the
    /// config file, else `LOCKKIT_URL`.
    pub(crate) fn configs(&self) -> Result<Vec<LockConfig>, String> {
        let base = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                Some(
                    LockConfig::from_toml_str(&text)
                        .map_err(|e| format!("config {}: {e}", path.display()))?,
                )
            }
            None => None,
        };
        if !self.urls.is_empty() {
            return Ok(self
                .urls
                .iter()
                .map(|u| {
                    let mut cfg = base.clone().unwrap_or_else(|| LockConfig::new(u.clone()));
                    cfg.url = u.clone();
                    cfg
                })
                .collect());
        }
        if let Some(cfg) = base {
            return Ok(vec![cfg]);
        }
        match std::env::var("LOCKKIT_URL") {
            Ok(u) if !u.is_empty() => Ok(vec![LockConfig::new(u)]),
            _ => Err("no backend: give --url URL, set LOCKKIT_URL, or --config FILE".into()),
        }
    }

    /// The single configuration of a command that talks to one backend.
    pub(crate) fn config(&self) -> Result<LockConfig, String> {
        let mut all = self.configs()?;
        if all.len() > 1 {
            return Err("this command takes one --url (only bench compares several)".into());
        }
        Ok(all.remove(0))
    }

    /// Connects to the single backend, or prints why not and returns the exit code.
    pub(crate) async fn connect(&self) -> Result<(LockConfig, Locks), u8> {
        self.connect_with_lease(None).await
    }

    /// Like [`connect`](Self::connect), with `lease` (when given) as the handle's default
    /// lease: on ZooKeeper and etcd that is the session's timeout, so a command run with
    /// `--lease` needs no second session.
    pub(crate) async fn connect_with_lease(
        &self,
        lease: Option<std::time::Duration>,
    ) -> Result<(LockConfig, Locks), u8> {
        let mut cfg = self.config().map_err(|e| {
            crate::exit::complain(e);
            code::FAILURE
        })?;
        if lease.is_some() {
            cfg.lease = lease;
        }
        match lockkit::from_config(&cfg).await {
            Ok(locks) => Ok((cfg, locks)),
            Err(e) => {
                crate::exit::complain(format!(
                    "cannot connect to {}: {e}",
                    lockkit::redact(&cfg.url)
                ));
                Err(crate::exit::error_code(&e))
            }
        }
    }
}
