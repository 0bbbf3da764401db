//! `lockkit inspect` and `lockkit force-unlock`.

use std::io::{BufRead, IsTerminal, Write};

use lockkit::{LockInfo, Primitive};
use serde::Serialize;

use crate::exit::{code, complain, error_code, say};
use crate::target::Target;

/// Which primitive a name refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Kind {
    /// A mutex.
    Mutex,
    /// A read-write lock.
    Rwlock,
    /// A semaphore.
    Semaphore,
    /// A leader election (its leader and candidates).
    Election,
}

fn primitive(kind: Kind) -> Primitive {
    match kind {
        Kind::Mutex => Primitive::Mutex,
        Kind::Rwlock => Primitive::RwLock,
        Kind::Semaphore => Primitive::Semaphore,
        Kind::Election => Primitive::Election,
    }
}

fn kind_name(kind: Kind) -> &'static str {
    primitive(kind).as_str()
}

/// What `lockkit inspect --json` prints: the lock's name, kind and backend around the core's
/// serialized [`LockInfo`].
#[derive(Serialize)]
struct View<'a> {
    name: &'a str,
    kind: &'static str,
    backend: &'a str,
    locked: bool,
    /// A semaphore's stored size (`null`: none yet), where the backend keeps one.
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<Option<u32>>,
    #[serde(flatten)]
    info: &'a LockInfo,
}

/// The JSON form of `lockkit inspect --json`; `size` as [`semaphore_size`] gave it.
pub(crate) fn to_json(
    name: &str,
    kind: Kind,
    backend: &str,
    size: Option<Option<u32>>,
    info: &LockInfo,
) -> String {
    let view = View {
        name,
        kind: kind_name(kind),
        backend,
        locked: !info.holders.is_empty(),
        size,
        info,
    };
    serde_json::to_string(&view).expect("a LockInfo serializes")
}

fn print_human(name: &str, kind: Kind, backend: &str, size: Option<Option<u32>>, info: &LockInfo) {
    let state = if info.holders.is_empty() {
        "free"
    } else {
        "held"
    };
    let size = match size {
        Some(Some(n)) => format!(" (size {n})"),
        Some(None) => " (no size stored)".to_string(),
        None => String::new(),
    };
    say!("{} {name:?} on {backend}: {state}{size}", kind_name(kind));
    if !info.holders.is_empty() {
        say!("holders:");
        say!(
            "  {:<40} {:<12} {:>10} {:>12}",
            "OWNER",
            "MODE",
            "TOKEN",
            "LEASE LEFT"
        );
        for h in &info.holders {
            let token = h.token.map_or("-".to_string(), |t| t.0.to_string());
            let lease = h.remaining_lease.map_or("-".to_string(), |d| {
                humantime::format_duration(std::time::Duration::from_millis(d.as_millis() as u64))
                    .to_string()
            });
            say!("  {:<40} {:<12} {token:>10} {lease:>12}", h.owner, h.mode);
        }
    }
    if info.waiters.is_empty() {
        say!("waiters: none");
    } else {
        say!("waiters (in queue order):");
        for (i, w) in info.waiters.iter().enumerate() {
            say!("  {:>3}. {:<40} {}", i + 1, w.owner, w.mode);
        }
    }
}

pub(crate) async fn inspect(target: &Target, name: &str, kind: Kind, json: bool) -> u8 {
    let (_, locks) = match target.connect().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let backend = locks.backend().to_string();
    let viewed = match locks.inspect(name, primitive(kind)).await {
        Ok(info) => semaphore_size(&locks, name, kind)
            .await
            .map(|size| (info, size)),
        Err(e) => Err(e),
    };
    match viewed {
        Ok((info, size)) => {
            if json {
                say!("{}", to_json(name, kind, &backend, size, &info));
            } else {
                print_human(name, kind, &backend, size, &info);
            }
            0
        }
        Err(e) => {
            if e.kind() == lockkit::ErrorKind::Unsupported {
                complain(format!(
                    "the {backend} backend cannot inspect locks yet: {e}"
                ));
            } else {
                complain(format!("inspect {name:?}: {e}"));
            }
            error_code(&e)
        }
    }
}

/// A semaphore's stored size, where the backend keeps one (`None` for other kinds).
async fn semaphore_size(
    locks: &lockkit::Locks,
    name: &str,
    kind: Kind,
) -> lockkit::Result<Option<Option<u32>>> {
    if kind != Kind::Semaphore || !locks.capabilities().semaphore_size {
        return Ok(None);
    }
    Ok(Some(locks.open_semaphore(name)?.size().await?))
}

fn confirm(question: &str) -> Result<bool, String> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err("refusing to force-unlock without --yes: stdin is not a terminal".into());
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| format!("cannot read the answer: {e}"))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

pub(crate) async fn force_unlock(target: &Target, name: &str, kind: Kind, yes: bool) -> u8 {
    if kind == Kind::Semaphore {
        complain("semaphores cannot be force-unlocked: their permits come back when their leases run out");
        return code::UNSUPPORTED;
    }
    let (cfg, locks) = match target.connect().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !yes {
        let who = match kind {
            Kind::Election => "Its leader will lose leadership.",
            _ => "Its holder will lose it.",
        };
        let q = format!(
            "Force-unlock {} {name:?} on {}? {who}",
            kind_name(kind),
            lockkit::redact(&cfg.url)
        );
        match confirm(&q) {
            Ok(true) => {}
            Ok(false) => {
                complain("not confirmed; nothing done");
                return code::FAILURE;
            }
            Err(e) => {
                complain(e);
                return code::FAILURE;
            }
        }
    }
    let result = match kind {
        Kind::Rwlock => match locks.rwlock(name) {
            Ok(l) => l.force_unlock().await,
            Err(e) => Err(e),
        },
        Kind::Election => match locks.election(name) {
            Ok(e) => e.force_resign().await,
            Err(e) => Err(e),
        },
        _ => match locks.mutex(name) {
            Ok(l) => l.force_unlock().await,
            Err(e) => Err(e),
        },
    };
    match (result, kind) {
        (Ok(true), Kind::Election) => {
            say!("election {name:?} had a leader; demoted it");
            0
        }
        (Ok(false), Kind::Election) => {
            say!("election {name:?} had no leader");
            0
        }
        (Ok(true), _) => {
            say!("{} {name:?} was held; released it", kind_name(kind));
            0
        }
        (Ok(false), _) => {
            say!("{} {name:?} was not held", kind_name(kind));
            0
        }
        (Err(e), _) => {
            complain(format!("force-unlock {name:?}: {e}"));
            error_code(&e)
        }
    }
}
