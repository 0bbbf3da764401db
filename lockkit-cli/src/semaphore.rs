//! `lockkit semaphore`: a semaphore's size and free permits, and an operator's change of size.

use serde::Serialize;

use crate::exit::{complain, error_code, say};
use crate::target::Target;

/// What `lockkit semaphore --json` prints.
#[derive(Serialize)]
struct View<'a> {
    name: &'a str,
    backend: &'a str,
    /// The size stored with the semaphore (`null`: none yet).
    size: Option<u32>,
    /// The size before `--set` (only with `--set`).
    #[serde(skip_serializing_if = "Option::is_none")]
    previous: Option<Option<u32>>,
    /// Permits free now (`null` while no size is stored).
    available: Option<u32>,
}

/// Shows semaphore `name`'s size and free permits; with `set`, first makes `set` its size for
/// every handle.
pub(crate) async fn run(target: &Target, name: &str, set: Option<u32>, json: bool) -> u8 {
    let (_, locks) = match target.connect().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let backend = locks.backend().to_string();
    let result = async {
        let sem = locks.open_semaphore(name)?;
        let previous = match set {
            Some(n) => Some(sem.set_permits(n).await?),
            None => None,
        };
        let size = sem.size().await?;
        let available = match size {
            Some(_) => Some(sem.available().await?),
            None => None,
        };
        Ok::<_, lockkit::Error>((previous, size, available))
    }
    .await;
    let (previous, size, available) = match result {
        Ok(v) => v,
        Err(e) => {
            complain(format!("semaphore {name:?}: {e}"));
            return error_code(&e);
        }
    };
    if json {
        let view = View {
            name,
            backend: &backend,
            size,
            previous,
            available,
        };
        say!(
            "{}",
            serde_json::to_string(&view).expect("a view serializes")
        );
        return 0;
    }
    if let Some(before) = previous {
        let before = before.map_or("none".to_string(), |n| n.to_string());
        say!(
            "semaphore {name:?} on {backend}: size {before} -> {}",
            set.unwrap_or(0)
        );
    }
    match (size, available) {
        (Some(size), Some(free)) => {
            say!("semaphore {name:?} on {backend}: {size} permits, {free} free");
        }
        _ => {
            say!("semaphore {name:?} on {backend}: no size stored yet");
        }
    }
    0
}
