//! Eight workers contend for one lock and write to a fenced store that rejects stale tokens.
//!
//! Runs on the embedded backend with no server:
//!
//! ```text
//! cargo run --example quickstart
//! LOCKKIT_URL=redis://127.0.0.1:6379 cargo run --example quickstart --features redis
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockkit::FencingToken;

/// The resource the lock protects. It remembers the highest token it has seen and refuses any
/// write carrying a lower one, so a holder that lost its lock without noticing cannot corrupt it.
#[derive(Default)]
struct FencedStore {
    highest: Option<FencingToken>,
    log: Vec<(usize, FencingToken)>,
}

impl FencedStore {
    fn write(&mut self, worker: usize, token: FencingToken) -> Result<(), String> {
        if self.highest.is_some_and(|h| token <= h) {
            return Err(format!(
                "stale token {token} (highest seen {})",
                self.highest.unwrap()
            ));
        }
        self.highest = Some(token);
        self.log.push((worker, token));
        Ok(())
    }
}

#[tokio::main]
async fn main() -> lockkit::Result<()> {
    let url = std::env::var("LOCKKIT_URL").unwrap_or_else(|_| "mem://".to_string());
    let locks = lockkit::connect(&url).await?;
    println!(
        "lockkit quickstart on {} ({})",
        lockkit::redact(&url),
        locks.backend()
    );

    let store = Arc::new(Mutex::new(FencedStore::default()));
    let name = format!("quickstart/{}", std::process::id());
    let mut workers = Vec::new();
    for worker in 0..8 {
        let lock = locks.mutex(&name)?;
        let store = store.clone();
        workers.push(tokio::spawn(async move {
            for round in 0..3 {
                let guard = lock.lock().await?;
                let token = guard.token();
                println!("worker {worker} holds the lock (round {round}, token {token})");
                tokio::time::sleep(Duration::from_millis(5)).await;
                if let Err(e) = store.lock().unwrap().write(worker, token) {
                    eprintln!("worker {worker}: the store refused the write: {e}");
                }
                guard.release().await?;
            }
            Ok::<_, lockkit::Error>(())
        }));
    }
    for w in workers {
        w.await.expect("worker panicked")?;
    }

    {
        let store = store.lock().unwrap();
        let handoffs = store.log.windows(2).filter(|w| w[0].0 != w[1].0).count();
        println!(
            "{} writes accepted, {handoffs} hand-offs between workers, tokens {} .. {}",
            store.log.len(),
            store.log.first().map(|e| e.1).unwrap(),
            store.log.last().map(|e| e.1).unwrap()
        );
    }
    locks.close().await
}
