//! `lockkit exec` and `lockkit elect` against a redis-server of the test's own, frozen with
//! SIGSTOP while the command runs (the shared test servers are never frozen).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::suite;

/// A redis-server on a free loopback port, without persistence; killed on drop.
struct PrivateRedis {
    port: u16,
    child: Child,
}

impl PrivateRedis {
    fn start() -> Self {
        let port = lockkit_testing::free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let server = PrivateRedis { port, child };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn redis_watchdog_command_is_dead_when_a_frozen_servers_lease_ends() {
    let server = PrivateRedis::start();
    suite::watchdog_command_is_dead_when_a_frozen_servers_lease_ends(
        &server.url(),
        "exec",
        || server.signal("-STOP"),
        || server.signal("-CONT"),
    );
}

#[test]
fn redis_elect_command_is_dead_when_a_frozen_servers_lease_ends() {
    let server = PrivateRedis::start();
    suite::watchdog_command_is_dead_when_a_frozen_servers_lease_ends(
        &server.url(),
        "elect",
        || server.signal("-STOP"),
        || server.signal("-CONT"),
    );
}
