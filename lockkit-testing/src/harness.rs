//! `Harness`: how the conformance suite reaches one backend, and holders in child processes.

use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::{FencingToken, LockConfig, Locks, Result};
use tokio::io::{AsyncBufReadExt, BufReader};

type Connect =
    dyn Fn(LockConfig) -> Pin<Box<dyn Future<Output = Result<Locks>> + Send>> + Send + Sync;

/// The environment variable that makes a conformance test binary a holder process: the TOML
/// config to connect with.
pub const CHILD_CONFIG: &str = "LOCKKIT_CHILD_CONFIG";
/// The lock the holder process takes.
pub const CHILD_NAME: &str = "LOCKKIT_CHILD_NAME";
/// The watchdog lease it takes it with (milliseconds).
pub const CHILD_LEASE_MS: &str = "LOCKKIT_CHILD_LEASE_MS";
/// What it holds ([`Hold`]).
pub const CHILD_HOLD: &str = "LOCKKIT_CHILD_HOLD";

/// What a holder process holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The mutex.
    Mutex,
    /// A read lock of the RW lock.
    Read,
    /// The write lock of the RW lock.
    Write,
    /// Leadership of the election (campaigning with the value `child`).
    Leader,
    /// `n` permits of a semaphore of `total`.
    Permits {
        /// Permits held.
        n: u32,
        /// The semaphore's size.
        total: u32,
    },
    /// A multi-lock over the mutexes named by the lines of the name, given in reverse order:
    /// taken and released `rounds` times (a round that waits out its 20 s is "not held"), then
    /// held.
    Multi {
        /// Times taken and released before it is held.
        rounds: u32,
    },
}

impl Hold {
    fn encode(self) -> String {
        match self {
            Hold::Mutex => "mutex".into(),
            Hold::Read => "read".into(),
            Hold::Write => "write".into(),
            Hold::Leader => "leader".into(),
            Hold::Permits { n, total } => format!("permits:{n}/{total}"),
            Hold::Multi { rounds } => format!("multi:{rounds}"),
        }
    }

    fn decode(s: &str) -> Option<Hold> {
        Some(match s {
            "mutex" => Hold::Mutex,
            "read" => Hold::Read,
            "write" => Hold::Write,
            "leader" => Hold::Leader,
            _ if s.starts_with("multi:") => Hold::Multi {
                rounds: s.strip_prefix("multi:")?.parse().ok()?,
            },
            _ => {
                let (n, total) = s.strip_prefix("permits:")?.split_once('/')?;
                Hold::Permits {
                    n: n.parse().ok()?,
                    total: total.parse().ok()?,
                }
            }
        })
    }
}

/// One backend as a conformance case sees it: a base config (one per case, so a `file://`
/// directory is shared by every handle of the case) and the backend's connect function.
#[derive(Clone)]
pub struct Harness {
    cfg: LockConfig,
    connect: Arc<Connect>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness").field("cfg", &self.cfg).finish()
    }
}

impl Harness {
    /// A harness connecting with `connect` (for example `lockkit_redis::connect`, wrapped).
    pub fn new<F, Fut>(cfg: LockConfig, connect: F) -> Self
    where
        F: Fn(LockConfig) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Locks>> + Send + 'static,
    {
        Harness {
            cfg,
            connect: Arc::new(move |c| Box::pin(connect(c))),
        }
    }

    /// The base config.
    pub fn config(&self) -> LockConfig {
        self.cfg.clone()
    }

    /// A new handle with the base config (a connect of its own: its own connection or session).
    pub async fn locks(&self) -> Locks {
        self.connect_with(self.config())
            .await
            .expect("the backend connects")
    }

    /// A new handle with `cfg`.
    pub async fn connect_with(&self, cfg: LockConfig) -> Result<Locks> {
        (self.connect)(cfg).await
    }

    /// Starts this test binary again as a holder process that connects with the base config,
    /// takes the mutex `name` with a watchdog lease of `lease` and holds it until killed.
    /// Returns once it holds. The binary needs the `__conformance_child` test
    /// ([`conformance_suite!`](crate::conformance_suite) or [`holder_process!`](crate::holder_process)).
    pub async fn spawn_holder(&self, name: &str, lease: Duration) -> ChildHolder {
        self.spawn(name, Hold::Mutex, lease).await
    }

    /// Like [`spawn_holder`](Self::spawn_holder), holding `hold` of `name`.
    pub async fn spawn(&self, name: &str, hold: Hold, lease: Duration) -> ChildHolder {
        let exe = std::env::current_exe().expect("the test binary's path");
        let toml = self.cfg.to_toml_string().expect("config as TOML");
        let mut child = tokio::process::Command::new(exe)
            .args([
                "__conformance_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_CONFIG, toml)
            .env(CHILD_NAME, name)
            .env(CHILD_LEASE_MS, lease.as_millis().to_string())
            .env(CHILD_HOLD, hold.encode())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the holder process");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let lines_ref = &mut lines;
        let token = tokio::time::timeout(Duration::from_secs(30), async {
            let lines = lines_ref;
            while let Some(line) = lines.next_line().await.expect("read the holder's output") {
                // libtest prints "test __conformance_child ... " before the holder's own words.
                if let Some((_, t)) = line.split_once("HELD ") {
                    return FencingToken(t.trim().parse().expect("a token"));
                }
                if let Some((_, why)) = line.split_once("NOT HELD: ") {
                    panic!("the holder process could not take {name:?}: {why}");
                }
            }
            panic!("the holder process ended before it held {name:?}");
        })
        .await
        .expect("the holder process took its lock within 30 s");
        ChildHolder {
            child,
            token,
            lines,
        }
    }
}

/// A holder process started by [`Harness::spawn_holder`]; killed when dropped.
#[derive(Debug)]
pub struct ChildHolder {
    child: tokio::process::Child,
    token: FencingToken,
    /// What it prints after `HELD` (`LOST` when its guard's lost signal fires).
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl ChildHolder {
    /// The token the holder got.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// SIGKILLs the holder and reaps it: it releases nothing.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// SIGSTOPs the holder: it keeps its connections and does nothing (a GC pause, a VM
    /// migration, a debugger).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.id().expect("the holder runs");
        let ok = std::process::Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    }

    /// Whether the holder says its guard was lost (its lost signal fired) within `limit`.
    pub async fn says_lost(&mut self, limit: Duration) -> bool {
        let lines = &mut self.lines;
        tokio::time::timeout(limit, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("LOST") {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false)
    }
}

/// Keeps a holder process's guard `g` until the process is killed (it is never released), and
/// what the process reports of it: its token and its lost signal.
fn never_released<G>(
    held: (FencingToken, lockkit_core::Lost),
    g: G,
) -> (FencingToken, lockkit_core::Lost) {
    std::mem::forget(g);
    held
}

/// The body of the `__conformance_child` test: in a holder process, connects, takes the lock,
/// says `HELD <token>`, says `LOST` if its guard's lost signal fires, and sleeps until killed;
/// in a normal test run, returns at once.
pub async fn run_child<F, Fut>(connect: F)
where
    F: Fn(LockConfig) -> Fut,
    Fut: Future<Output = Result<Locks>>,
{
    let Ok(toml) = std::env::var(CHILD_CONFIG) else {
        return;
    };
    let name = std::env::var(CHILD_NAME).expect("the lock name");
    let lease_ms: u64 = std::env::var(CHILD_LEASE_MS)
        .expect("the lease")
        .parse()
        .expect("milliseconds");
    let hold = std::env::var(CHILD_HOLD)
        .ok()
        .and_then(|h| Hold::decode(&h))
        .unwrap_or(Hold::Mutex);
    let cfg = LockConfig::from_toml_str(&toml).expect("the config");
    let held = async {
        let locks = connect(cfg).await?;
        let opts = lockkit_core::AcquireOptions::new()
            .watchdog_lease(Duration::from_millis(lease_ms))
            .wait(Duration::from_secs(20));
        let token = match hold {
            Hold::Mutex => locks
                .mutex(&name)?
                .acquire(&opts)
                .await?
                .map(|g| never_released((g.token(), g.lost()), g)),
            Hold::Read => locks
                .rwlock(&name)?
                .read(&opts)
                .await?
                .map(|g| never_released((g.token(), g.lost()), g)),
            Hold::Write => locks
                .rwlock(&name)?
                .write(&opts)
                .await?
                .map(|g| never_released((g.token(), g.lost()), g)),
            Hold::Leader => locks
                .election(&name)?
                .campaign_with("child", &opts)
                .await?
                .map(|g| never_released((g.term(), g.lost()), g)),
            Hold::Permits { n, total } => locks
                .semaphore(&name, total)?
                .acquire(n, &opts)
                .await?
                .map(|g| never_released((g.token(), g.lost()), g)),
            Hold::Multi { rounds } => {
                let set = locks.multi(name.lines().rev())?;
                for _ in 0..rounds {
                    match set.acquire(&opts).await? {
                        Some(g) => g.release().await?,
                        // A round that waits out its budget is what the rounds look for.
                        None => return Ok((locks, None)),
                    }
                }
                set.acquire(&opts).await?.map(|g| {
                    let first = g.tokens().first().map_or(FencingToken(0), |(_, t)| *t);
                    never_released((first, g.lost()), g)
                })
            }
        };
        Ok::<_, lockkit_core::Error>((locks, token))
    }
    .await;
    match held {
        Ok((_locks, Some((token, lost)))) => {
            println!("\nHELD {}", token.0);
            tokio::select! {
                _ = lost => println!("\nLOST"),
                () = tokio::time::sleep(Duration::from_secs(600)) => {}
            }
            tokio::time::sleep(Duration::from_secs(600)).await;
        }
        Ok((_, None)) => println!("\nNOT HELD: the lock stayed busy"),
        Err(e) => println!("\nNOT HELD: {e}"),
    }
}
