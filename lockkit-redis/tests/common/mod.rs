//! Helpers shared by the Redis test binaries.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockkit_core::{LockConfig, Locks};

/// The shared test server's URL (`LOCKKIT_TEST_REDIS_URL`), or `None` to skip.
pub fn shared_url() -> Option<String> {
    lockkit_testing::server_url("redis")
}

/// Connects to `url` with `options` (query-string keys) set on the config.
pub async fn connect(url: &str, options: &[(&str, &str)]) -> Locks {
    lockkit_redis::connect(&config(url, options)).await.unwrap()
}

pub fn config(url: &str, options: &[(&str, &str)]) -> LockConfig {
    let mut cfg = LockConfig::new(url);
    for (k, v) in options {
        cfg.options.insert(k.to_string(), v.to_string());
    }
    cfg
}

/// A plain connection for admin commands in tests.
pub async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Waits until the server has a subscriber on a channel matching `pattern` (`PUBSUB CHANNELS`),
/// for at most `within`; `what` names it in the failure.
pub async fn until_subscribed(
    admin: &mut redis::aio::MultiplexedConnection,
    pattern: &str,
    within: Duration,
    what: &str,
) {
    let end = Instant::now() + within;
    loop {
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg(pattern)
            .query_async(admin)
            .await
            .unwrap();
        if !channels.is_empty() {
            return;
        }
        assert!(
            Instant::now() < end,
            "{what}: no channel {pattern} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `cmd` (which writes a foreign value under `key`), then `attempt`, and checks that the
/// value is exactly as it was (the same `DUMP`) before deleting it.
pub async fn foreign_value_survives(
    admin: &mut redis::aio::MultiplexedConnection,
    key: &str,
    cmd: &redis::Cmd,
    attempt: impl std::future::Future<Output = ()>,
) {
    let _: () = cmd.query_async(admin).await.unwrap();
    let dump = redis::cmd("DUMP").arg(key).clone();
    let before: Vec<u8> = dump.query_async(admin).await.unwrap();
    attempt.await;
    let after: Vec<u8> = dump.query_async(admin).await.unwrap();
    assert_eq!(after, before, "{key} was changed");
    let _: () = redis::cmd("DEL").arg(key).query_async(admin).await.unwrap();
}

pub use lockkit_testing::free_port;

/// A redis-server of the test's own, on a free loopback port, killed on drop.
pub struct PrivateRedis {
    pub port: u16,
    pub dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts `redis-server` with `extra` arguments (e.g. `["--appendonly", "yes"]`).
    pub fn start(extra: &[&str]) -> PrivateRedis {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("lockkit-redis-test-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = PrivateRedis {
            port,
            dir,
            args: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--save")
            .arg("");
        let has_aof = self.args.iter().any(|a| a == "--appendonly");
        if !has_aof {
            cmd.arg("--appendonly").arg("no");
        }
        cmd.args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(cmd.spawn().expect("redis-server on PATH"));
        let started = Instant::now();
        while !self.answers_ping() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the server answers PING with PONG (not LOADING while it reads its AOF).
    fn answers_ping(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 64];
        matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGTERM (redis saves its AOF and exits) and wait.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let _ = child.wait();
        }
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not stop"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, at once: the server is gone within a millisecond, saving nothing.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and directory.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn start_again(&mut self) {
        self.spawn();
    }

    /// SIGSTOP: the server keeps its connections and answers nothing.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until `f` is true, polling, for at most `limit`.
pub async fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let started = Instant::now();
    while !f() {
        assert!(
            started.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Redis Cluster's key slot (CRC16/XMODEM of the hash tag, mod 16384).
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    let mut crc: u16 = 0;
    for &b in hashed {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Holds `hold` of `name` in a holder process that is then SIGKILLed: a holder that died
/// without releasing. The test binary needs `lockkit_testing::holder_process!`.
pub async fn dead_holder(
    url: &str,
    options: &[(&str, &str)],
    name: &str,
    hold: lockkit_testing::Hold,
    lease: Duration,
) {
    let h = lockkit_testing::Harness::new(config(url, options), |c: LockConfig| async move {
        lockkit_redis::connect(&c).await
    });
    let mut child = h.spawn(name, hold, lease).await;
    child.kill().await;
}

/// Issue 25, item 7: Redis answers PTTL 0 in the millisecond a key expires, and a waiter that
/// reads it must try again then, not sleep a heartbeat.
///
/// `n` locks are held by a foreign holder (`hold(i)`: the lock hash and its fields, the
/// holder's first) whose lease the test keeps 1 ms from its end for 300 ms, refreshing it about
/// every 300 µs: a waiter, told by PTTL to retry within a millisecond, keeps reading 1 or 0.
/// Then the leases end with no release, so no message wakes a waiter: it sees the end only
/// through PTTL. Each lock is waited for by `wait(i, 5 s)` on a client whose heartbeat is far
/// longer (`waiter_heartbeat=60s`), and every waiter must get its lock; 2 s after the leases
/// ended, the foreign holder takes every lock still free again for 10 s, so a waiter that
/// slept through the end does not get it on a last try at its deadline either.
pub async fn waiters_see_unannounced_ends<F, Fut>(
    url: &str,
    n: usize,
    hold: impl Fn(usize) -> (String, Vec<(String, String)>),
    wait: F,
) where
    F: Fn(usize, Duration) -> Fut,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    // ARGV[1]: the lease (ms); ARGV[1 + i]: the fields of KEYS[i], a JSON array of field,
    // value, ... Begins a foreign hold of each lock that is free, and keeps one that is ours.
    const HOLD: &str = r"
        for i, key in ipairs(KEYS) do
          local fields = cjson.decode(ARGV[i + 1])
          if redis.call('exists', key) == 0 then
            redis.call('hset', key, unpack(fields))
            redis.call('pexpire', key, ARGV[1])
          elseif redis.call('hexists', key, fields[1]) == 1 then
            redis.call('pexpire', key, ARGV[1])
          end
        end
        return 0";
    // EVAL, not a prepared script: the command is moved to the keeper thread.
    let holds = |lease_ms: u64| {
        let locks: Vec<_> = (0..n).map(&hold).collect();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(HOLD).arg(n);
        for (key, _) in &locks {
            cmd.arg(key);
        }
        cmd.arg(lease_ms);
        for (_, fields) in &locks {
            let json: Vec<String> = fields
                .iter()
                .map(|(f, v)| format!("\"{f}\",\"{v}\""))
                .collect();
            cmd.arg(format!("[{}]", json.join(",")));
        }
        cmd
    };
    let keep = holds(1);
    let mut keeper_conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: i64 = keep.query(&mut keeper_conn).unwrap();
    let keeper = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            let _: i64 = keep.query(&mut keeper_conn).unwrap();
            std::thread::sleep(Duration::from_micros(300));
        }
    });
    let mut waiters = tokio::task::JoinSet::new();
    for i in 0..n {
        let waiter = wait(i, Duration::from_secs(5));
        waiters.spawn(async move { (i, waiter.await) });
    }
    tokio::task::spawn_blocking(move || keeper.join().unwrap())
        .await
        .unwrap();
    let settled = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut missed = Vec::new();
    let mut taken_again = false;
    loop {
        let next = if taken_again {
            waiters.join_next().await
        } else {
            match tokio::time::timeout_at(settled, waiters.join_next()).await {
                Ok(next) => next,
                Err(_) => {
                    let mut admin = admin(url).await;
                    let _: i64 = holds(10_000).query_async(&mut admin).await.unwrap();
                    taken_again = true;
                    continue;
                }
            }
        };
        let Some(r) = next else { break };
        let (i, got) = r.unwrap();
        if !got {
            missed.push(i);
        }
    }
    missed.sort();
    assert!(
        missed.is_empty(),
        "waiters {missed:?} of {n} slept through the end of their holder's lease"
    );
}

/// Issue 25, item 12: the hold count the server at `url` keeps for the one holder `inspect`
/// shows of lock `name` (a mutex, or a read-write lock's writer), whose hash is `key`, once it
/// is `want` or 3 s have passed: the last count seen. `inspect` runs on `locks`'s command
/// connection, so every reentry `locks` sent before has run on the server by the time it
/// answers.
pub async fn server_hold_count(
    locks: &Locks,
    url: &str,
    name: &str,
    primitive: lockkit_core::Primitive,
    key: &str,
    want: u32,
) -> u32 {
    let mut admin = admin(url).await;
    let started = Instant::now();
    loop {
        let info = locks.inspect(name, primitive).await.unwrap();
        let [holder] = &info.holders[..] else {
            panic!("not one holder: {info:?}")
        };
        let count: u32 = redis::cmd("HGET")
            .arg(key)
            .arg(&holder.owner)
            .query_async(&mut admin)
            .await
            .unwrap();
        if count == want || started.elapsed() > Duration::from_secs(3) {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many times the server ran the commands `names` (lower case), from `INFO commandstats`.
pub async fn command_calls(admin: &mut redis::aio::MultiplexedConnection, names: &[&str]) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            names.contains(&name).then_some(rest)
        })
        .filter_map(|rest| {
            rest.strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
