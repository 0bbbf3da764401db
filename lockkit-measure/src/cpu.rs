//! The CPU time a process has used, to tell what a contestant costs the machine from what it
//! costs the clock.

use std::time::Duration;

/// Ticks a second in `/proc/<pid>/stat` (`USER_HZ`, 100 on every Linux architecture).
const TICKS: u64 = 100;

/// The CPU time (user + system, every thread) process `pid` has used so far, read from
/// `/proc/<pid>/stat` in hundredths of a second; `None` where there is no such file (not Linux,
/// or no such process). `pid` 0 is this process.
///
/// ```
/// let cpu = lockkit_measure::process_cpu(0);
/// assert!(cfg!(not(target_os = "linux")) || cpu.is_some());
/// ```
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let path = if pid == 0 {
        "/proc/self/stat".to_string()
    } else {
        format!("/proc/{pid}/stat")
    };
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// CPU time spent over some operations: added up over rounds, read per operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuCost {
    /// The CPU time used.
    pub cpu: Duration,
    /// The operations it was used for.
    pub ops: usize,
}

impl CpuCost {
    /// The CPU time per operation, in microseconds.
    pub fn per_op_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.ops.max(1) as f64
    }
}

/// Two stretches added up.
impl std::ops::Add for CpuCost {
    type Output = CpuCost;

    fn add(self, other: CpuCost) -> CpuCost {
        CpuCost {
            cpu: self.cpu + other.cpu,
            ops: self.ops + other.ops,
        }
    }
}

/// The CPU a server process and this process use over one stretch of a run: read at the start,
/// and again at the end with [`CpuSpan::end`].
///
/// ```
/// let span = lockkit_measure::CpuSpan::start(None);
/// let (server, own) = span.end(1000);
/// assert!(server.is_none());
/// assert!(cfg!(not(target_os = "linux")) || own.is_some());
/// ```
#[derive(Clone, Copy, Debug)]
pub struct CpuSpan {
    server: Option<(u32, Duration)>,
    own: Option<Duration>,
}

impl CpuSpan {
    /// Reads what server `pid` (none: no server to read) and this process have used so far.
    pub fn start(server: Option<u32>) -> CpuSpan {
        CpuSpan {
            server: server.and_then(|pid| Some((pid, process_cpu(pid)?))),
            own: process_cpu(0),
        }
    }

    /// What the server and this process used since the start, over `ops` operations; `None`
    /// for one that could not be read, or whose count went backwards (a server restarted).
    pub fn end(&self, ops: usize) -> (Option<CpuCost>, Option<CpuCost>) {
        let since = |start: Option<Duration>, now: Option<Duration>| {
            Some(CpuCost {
                cpu: now?.checked_sub(start?)?,
                ops,
            })
        };
        let server = self
            .server
            .and_then(|(pid, start)| since(Some(start), process_cpu(pid)));
        (server, since(self.own, process_cpu(0)))
    }
}

/// utime + stime of a `/proc/<pid>/stat` line. The command name in parentheses may hold spaces
/// and parentheses, so the fields are counted from the last `)`: state is field 3, utime 14 and
/// stime 15.
fn parse_stat(stat: &str) -> Option<Duration> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 1000 / TICKS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_fields_from_the_last_parenthesis() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 36 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat(line), Some(Duration::from_millis(2860)));
        assert_eq!(parse_stat("42 (x) S 1"), None);
    }

    #[test]
    fn costs_add_up_and_divide_per_operation() {
        let a = CpuCost {
            cpu: Duration::from_millis(3),
            ops: 10,
        };
        let both = a
            + (CpuCost {
                cpu: Duration::from_millis(1),
                ops: 30,
            });
        assert_eq!(both.ops, 40);
        assert!((both.per_op_us() - 100.0).abs() < 1e-9);
        assert!(
            (CpuCost::default().per_op_us()).abs() < 1e-9,
            "no operations: zero, not NaN"
        );
    }

    #[test]
    fn this_process_uses_more_as_it_runs() {
        if cfg!(target_os = "linux") {
            let (start, spin) = (process_cpu(0).unwrap(), std::time::Instant::now());
            // Spin until the count moves a tick or two (on a loaded machine the wall time
            // that takes is anyone's guess, so it is bounded generously).
            while process_cpu(0).unwrap() < start + Duration::from_millis(20) {
                assert!(spin.elapsed() < Duration::from_secs(60), "no CPU counted");
            }
        }
    }
}
