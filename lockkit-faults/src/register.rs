//! The fenced register: a tiny store in the coordinator process, on 127.0.0.1, that accepts a
//! write only if its token is greater than every token it accepted before for the same lock (a
//! multi-lock's members are locks of their own), and logs every request with its decision.
//!
//! Why a TCP server in the coordinator and not a file under a lock: one owner decides, so the
//! log order is the decision order with no second lock to reason about; and a worker stopped
//! with SIGSTOP while it holds a file lock would block every other worker, which would hide the
//! very overlaps the harness looks for.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::clock::{now, Micros};
use crate::proto::{LogLine, Msg, Reply};

/// The register and the run log.
#[derive(Clone)]
pub struct Register {
    inner: Arc<Mutex<State>>,
    /// Set once the coordinator lets the workers that reported `Done` go.
    leave: Arc<watch::Sender<bool>>,
}

struct State {
    /// The highest token accepted, per lock.
    last: HashMap<String, u64>,
    log: BufWriter<File>,
    lines: Vec<LogLine>,
    holding: HashMap<u32, Micros>,
    pids: HashMap<u32, u32>,
    done: HashSet<u32>,
}

impl Register {
    /// A register logging to `path` (JSON lines).
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Register {
            inner: Arc::new(Mutex::new(State {
                last: HashMap::new(),
                log: BufWriter::new(File::create(path)?),
                lines: Vec::new(),
                holding: HashMap::new(),
                pids: HashMap::new(),
                done: HashSet::new(),
            })),
            leave: Arc::new(watch::Sender::new(false)),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a line to the log.
    pub fn log(&self, line: LogLine) {
        let mut s = self.state();
        s.append(line);
    }

    /// Decides and logs one request.
    pub fn handle(&self, msg: Msg) -> Reply {
        let at = now();
        let mut s = self.state();
        let mut reply = Reply {
            ok: true,
            last: None,
        };
        let mut accepted = None;
        match &msg {
            Msg::Hello { worker, pid } => {
                s.pids.insert(*worker, *pid);
            }
            Msg::Acquired { worker, at, .. } => {
                s.holding.insert(*worker, *at);
            }
            Msg::Write { lock, token, .. } => {
                let last = s.last.get(lock).copied();
                let ok = last.is_none_or(|last| *token > last);
                if ok {
                    s.last.insert(lock.clone(), *token);
                } else {
                    reply = Reply { ok: false, last };
                }
                accepted = Some(ok);
            }
            Msg::Hold(h) => {
                s.holding.remove(&h.worker);
            }
            Msg::Done { worker, .. } => {
                s.done.insert(*worker);
            }
            Msg::Error { .. } | Msg::NotGranted { .. } => {}
        }
        s.append(LogLine::Msg { at, msg, accepted });
        reply
    }

    /// The worker that most recently reported an acquire and no release yet: (worker, pid,
    /// acquired at).
    pub fn current_holder(&self) -> Option<(u32, u32, Micros)> {
        let s = self.state();
        let (worker, at) = s.holding.iter().max_by_key(|(_, at)| **at)?;
        s.pids.get(worker).map(|pid| (*worker, *pid, *at))
    }

    /// Forgets a worker that was killed (it will never report its hold).
    pub fn forget(&self, worker: u32) {
        self.state().holding.remove(&worker);
    }

    /// Whether `worker` reported `Done`.
    pub fn is_done(&self, worker: u32) -> bool {
        self.state().done.contains(&worker)
    }

    /// Answers every `Done`, past and future: the workers close their handles and exit.
    pub fn let_workers_leave(&self) {
        self.leave.send_replace(true);
    }

    /// Every log line so far.
    pub fn lines(&self) -> Vec<LogLine> {
        self.state().lines.clone()
    }

    /// Serves workers on 127.0.0.1 (an ephemeral port) until the runtime stops.
    pub async fn serve(&self) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let reg = self.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(reg.clone().connection(stream));
            }
        });
        Ok(addr)
    }

    async fn connection(self, stream: TcpStream) {
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let reply = match serde_json::from_str::<Msg>(&line) {
                Ok(msg) => {
                    let done = matches!(msg, Msg::Done { .. });
                    let reply = self.handle(msg);
                    if done {
                        let _ = self.leave.subscribe().wait_for(|leave| *leave).await;
                    }
                    reply
                }
                Err(_) => Reply {
                    ok: false,
                    last: None,
                },
            };
            let mut out = serde_json::to_string(&reply).unwrap_or_default();
            out.push('\n');
            if write.write_all(out.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

impl State {
    fn append(&mut self, line: LogLine) {
        if let Ok(text) = serde_json::to_string(&line) {
            let _ = writeln!(self.log, "{text}");
            let _ = self.log.flush();
        }
        self.lines.push(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_tokens_not_above_the_highest_accepted() {
        let path = std::env::temp_dir().join(format!("lockkit-faults-reg-{}", std::process::id()));
        let reg = Register::create(&path).unwrap();
        let write = |token| Msg::Write {
            lock: String::new(),
            worker: 1,
            token,
            start: 0,
            end: 0,
        };
        assert!(reg.handle(write(5)).ok);
        assert!(!reg.handle(write(5)).ok);
        let stale = reg.handle(write(3));
        assert!(!stale.ok);
        assert_eq!(stale.last, Some(5));
        assert!(reg.handle(write(6)).ok);
        let logged = std::fs::read_to_string(&path).unwrap();
        assert_eq!(logged.lines().count(), 4);
        let _ = std::fs::remove_file(&path);
    }
}
