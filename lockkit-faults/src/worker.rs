//! One worker process: acquire, write to the fenced register, release, until its deadline; then
//! report `Done` and keep the handle open until the coordinator lets it go.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockkit::{AcquireOptions, Locks};
use rand::{rngs::StdRng, Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::clock::{now, until, Micros};
use crate::history::Claim;
use crate::proto::{HoldRecord, Msg, Reply};
use crate::subject::{Held, Primitive, Subject};

/// What a worker needs to run.
#[derive(Clone, Debug)]
pub struct WorkerArgs {
    /// Worker id.
    pub id: u32,
    /// Backend URL.
    pub url: String,
    /// Lock name.
    pub name: String,
    /// The register's address.
    pub register: String,
    /// Watchdog lease.
    pub lease: Duration,
    /// Each acquire's wait budget.
    pub wait: Duration,
    /// Stop acquiring at this instant (shared monotonic clock).
    pub until: Micros,
    /// Seed of the hold times.
    pub seed: u64,
    /// Range of a hold's length, in milliseconds.
    pub hold_ms: (u64, u64),
    /// What it contends for.
    pub primitive: Primitive,
}

struct Client {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
}

impl Client {
    async fn send(&mut self, msg: &Msg) -> std::io::Result<Reply> {
        let mut line = serde_json::to_string(msg).map_err(std::io::Error::other)?;
        line.push('\n');
        self.write.write_all(line.as_bytes()).await?;
        let reply = self
            .lines
            .next_line()
            .await?
            .ok_or_else(|| std::io::Error::other("register closed"))?;
        serde_json::from_str(&reply).map_err(std::io::Error::other)
    }
}

/// Runs the worker loop; returns when the deadline passed.
pub async fn run(args: WorkerArgs) -> std::io::Result<()> {
    let (read, write) = TcpStream::connect(&args.register).await?.into_split();
    let mut reg = Client {
        lines: BufReader::new(read).lines(),
        write,
    };
    reg.send(&Msg::Hello {
        worker: args.id,
        pid: std::process::id(),
    })
    .await?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let locks = loop {
        let sent = now();
        match lockkit::connect(&args.url).await {
            Ok(locks) => break locks,
            Err(e) => {
                report_error(&mut reg, args.id, None, sent, &e).await?;
                if now() >= args.until {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let lock = Subject::open(
        &locks,
        args.primitive,
        &args.name,
        &format!("worker-{}", args.id),
    )
    .map_err(|e| std::io::Error::other(e.to_string()))?;
    let opts = AcquireOptions::new()
        .wait(args.wait)
        .watchdog_lease(args.lease);
    while now() < args.until {
        let want = lock.pick(&mut rng);
        let claim = want.claim;
        let sent = now();
        let acquired = tokio::time::timeout(
            until(args.until) + Duration::from_secs(1),
            lock.take(&want, &opts),
        )
        .await;
        match acquired {
            Err(_) => break,
            Ok(Ok(None)) => {
                reg.send(&Msg::NotGranted {
                    worker: args.id,
                    sent,
                    at: now(),
                })
                .await?;
            }
            Ok(Err(e)) => {
                report_error(&mut reg, args.id, Some(claim), sent, &e).await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(Ok(Some(guard))) => {
                let hold = Duration::from_millis(rng.gen_range(args.hold_ms.0..=args.hold_ms.1));
                one_hold(&mut reg, args.id, claim, sent, guard, hold).await?;
                tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=30))).await;
            }
        }
    }
    // Nothing held and no more acquires: report it and stay, the handle and its sessions
    // open, until the coordinator has run the final probe and the leftover scan, so that they
    // see what the protocol left on live sessions rather than what close() cleans up.
    let _ = tokio::time::timeout(
        LEAVE_LIMIT,
        reg.send(&Msg::Done {
            worker: args.id,
            at: now(),
        }),
    )
    .await;
    drop(lock);
    let _ = tokio::time::timeout(Duration::from_secs(5), locks_close(&locks)).await;
    Ok(())
}

/// How long a worker that reported `Done` waits to be let go before it closes anyway (the
/// probe and the scan take well under a minute; a coordinator that died closes the register
/// connection, which ends the wait at once).
const LEAVE_LIMIT: Duration = Duration::from_secs(120);

async fn locks_close(locks: &Locks) {
    let _ = locks.close().await;
}

async fn report_error(
    reg: &mut Client,
    worker: u32,
    claim: Option<Claim>,
    sent: Micros,
    e: &lockkit::Error,
) -> std::io::Result<()> {
    reg.send(&Msg::Error {
        worker,
        claim,
        sent,
        at: now(),
        kind: format!("{:?}", e.kind()),
    })
    .await
    .map(|_| ())
}

/// How often a holder looks at its guard's state while it works: the resolution of
/// [`HoldRecord::believed_until`].
const LOOK_EVERY: Duration = Duration::from_millis(5);

/// One hold: report the acquire, work until `hold` passed or `lost()` resolved (looking at the
/// guard's state as a careful holder would), write the interval to the register with the token
/// (an exclusive hold: readers and permits share the lock, so they do not write to a register
/// that admits one writer at a time), release, report the hold.
async fn one_hold(
    reg: &mut Client,
    worker: u32,
    claim: Claim,
    sent: Micros,
    guard: Held,
    hold: Duration,
) -> std::io::Result<()> {
    let start = now();
    // One lock and its token, or each member of a multi-lock with its own.
    let tokens = guard.tokens();
    // Record the instant lost() resolves, whenever that is before the release finishes.
    let lost_at = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let watcher = {
        let lost = guard.lost();
        let lost_at = lost_at.clone();
        tokio::spawn(async move {
            tokio::select! {
                // Lost first: a release that found the lock gone resolves both at once.
                biased;
                _ = lost => lost_at.store(now(), Ordering::SeqCst),
                _ = done_rx => {}
            }
        })
    };
    for (lock, token) in &tokens {
        reg.send(&Msg::Acquired {
            lock: lock.clone(),
            worker,
            claim,
            token: *token,
            sent,
            at: start,
        })
        .await?;
    }
    let believed_until = work(&guard, start, hold).await;
    let end = match lost_at.load(Ordering::SeqCst) {
        0 => now(),
        t => t,
    };
    // The writes go out even when lost() resolved: the point is to see the register reject
    // them.
    let mut accepted = Vec::with_capacity(tokens.len());
    for (lock, token) in &tokens {
        accepted.push(match claim {
            Claim::Exclusive => {
                reg.send(&Msg::Write {
                    lock: lock.clone(),
                    worker,
                    token: *token,
                    start,
                    end,
                })
                .await?
                .ok
            }
            Claim::Shared | Claim::Permits(_) => false,
        });
    }
    let release_sent = now();
    let release = match guard.release().await {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("{:?}", e.kind()),
    };
    let released_at = now();
    let _ = done_tx.send(());
    let _ = watcher.await;
    let lost_at = match lost_at.load(Ordering::SeqCst) {
        0 => None,
        t => Some(t),
    };
    for ((lock, token), write_accepted) in tokens.into_iter().zip(accepted) {
        reg.send(&Msg::Hold(HoldRecord {
            lock,
            worker,
            claim,
            sent,
            token,
            start,
            end,
            believed_until: believed_until.min(end),
            lost_at,
            release: release.clone(),
            release_sent,
            released_at,
            write_accepted,
        }))
        .await?;
    }
    Ok(())
}

/// Works for `hold`, or until the guard is lost, looking at its state every [`LOOK_EVERY`];
/// returns the last instant it read live (`granted`, when the acquire returned the guard, if no
/// later look did). A look is what a careful holder does before each step of its work, so that
/// instant bounds how long this holder believed it held: a process paused past its lease
/// deadline reads `Lost` at its first look after it resumes.
async fn work(guard: &Held, granted: Micros, hold: Duration) -> Micros {
    let mut believed = granted;
    let done = tokio::time::sleep(hold);
    tokio::pin!(done);
    let mut looks = tokio::time::interval(LOOK_EVERY);
    looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let at = now();
        if !guard.is_live() {
            return believed;
        }
        believed = at;
        tokio::select! {
            biased;
            _ = guard.lost() => return believed,
            _ = &mut done => break,
            _ = looks.tick() => {}
        }
    }
    // The last look, right before the holder stops using the lock.
    let at = now();
    if guard.is_live() {
        believed = at;
    }
    believed
}
