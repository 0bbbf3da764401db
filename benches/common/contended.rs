//! The contended runs of the Redis benches: clients taking one lock in turn, what a run of one
//! variant measured, and the table of alternating rounds that compares the variants.

use std::fmt::Write;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use lockkit::Locks;
use lockkit_measure::{CpuCost, CpuSpan, Tally};

use super::us;

/// What a contended run of one variant measured (one round's, or its rounds' added up).
pub struct Contended {
    label: &'static str,
    secs: f64,
    tally: Tally,
    /// Each round's busiest client's share: rounds have clients of their own, so shares are
    /// kept per round, never merged by client index.
    busiest: Vec<f64>,
    overlaps: usize,
    /// Acquires or releases that returned an error (tried again).
    errors: usize,
    /// The server's CPU time over the run and the acquisitions granted in it, when the bench
    /// can read the server's CPU ([`measure_server`]).
    server: Option<CpuCost>,
    /// The same for this process's CPU (the clients'), where `/proc` tells it.
    clients: Option<CpuCost>,
}

/// Two rounds' CPU and grants added up (`None` unless both were read).
fn add(a: Option<CpuCost>, b: Option<CpuCost>) -> Option<CpuCost> {
    Some(a? + b?)
}

/// The server process whose CPU every run reads.
static SERVER: OnceLock<u32> = OnceLock::new();

/// Makes every later run read the CPU of server `pid` at its start and its end and print the
/// server's CPU per acquisition beside its throughput: what bounds a lock's rate when the
/// server is the busy side. For a bench whose contestants all use one server; set once.
pub fn measure_server(pid: u32) {
    assert!(SERVER.set(pid).is_ok(), "one server a bench");
}

impl Contended {
    /// Acquisitions per second.
    pub fn rate(&self) -> f64 {
        self.tally.ops() as f64 / self.secs
    }

    /// The `q` quantile of the clients' waits, in microseconds.
    pub fn wait(&self, q: f64) -> f64 {
        us(self.tally.waits().quantile(q))
    }

    /// The server's CPU per acquisition, in microseconds (every acquisition granted while the
    /// clock ran, the ones a client made after the run had its count included).
    pub fn server_us(&self) -> Option<f64> {
        self.server.as_ref().map(CpuCost::per_op_us)
    }

    /// The clients' CPU (this process's) per acquisition, in microseconds, counted as
    /// [`Contended::server_us`] is.
    pub fn clients_us(&self) -> Option<f64> {
        self.clients.as_ref().map(CpuCost::per_op_us)
    }

    /// The busiest client's share of its round's acquisitions, averaged over the rounds.
    pub fn busiest_share(&self) -> f64 {
        self.busiest.iter().sum::<f64>() / self.busiest.len().max(1) as f64
    }

    /// Adds another round of the same variant.
    fn absorb(&mut self, other: Contended) {
        self.secs += other.secs;
        self.tally.add(&other.tally);
        self.busiest.extend(other.busiest);
        self.overlaps += other.overlaps;
        self.errors += other.errors;
        self.server = add(self.server, other.server);
        self.clients = add(self.clients, other.clients);
    }

    /// Prints the table row, with the errors column if `errors`.
    fn print(&self, errors: bool) {
        let mut row = format!(
            "{:<34} {:>9.0} {:>10.2} {:>10.2} {:>9.1}% {:>9}",
            self.label,
            self.rate(),
            self.wait(0.5) / 1000.0,
            self.wait(0.99) / 1000.0,
            100.0 * self.busiest_share(),
            self.overlaps
        );
        if errors {
            write!(row, " {:>7}", self.errors).unwrap();
        }
        for cpu in [self.server_us(), self.clients_us()].into_iter().flatten() {
            write!(row, " {cpu:>10.1}").unwrap();
        }
        println!("{row}");
    }
}

/// The work done under the lock: none, or waiting `hold` (an I/O call, say).
async fn work(hold: Duration) {
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
}

/// Shared bookkeeping of a contended run: a ticket counter, an overlap detector, an error count.
pub struct Arena {
    /// The run's acquisitions.
    total: usize,
    /// The work done under the lock.
    hold: Duration,
    taken: AtomicUsize,
    /// When the last counted acquisition was granted: the run's clock stops there, not when
    /// the last client has made its one uncounted acquisition more.
    done: OnceLock<Instant>,
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    errors: AtomicUsize,
}

impl Arena {
    /// Enters the critical section; returns false once the run has its acquisitions.
    fn enter(&self) -> bool {
        if self.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let nth = self.taken.fetch_add(1, Ordering::SeqCst);
        if nth + 1 == self.total {
            let _ = self.done.set(Instant::now());
        }
        nth < self.total
    }

    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    /// Counts a lockkit call that failed (and is tried again); the first three are printed.
    pub fn failed(&self, what: &str, e: &lockkit::Error) {
        if self.errors.fetch_add(1, Ordering::SeqCst) < 3 {
            eprintln!("lockkit {what} failed: {e}");
        }
    }

    /// One client's loop: `acquire`, timed, then the work under the lock, then `release`, until
    /// the run has its acquisitions. An acquire that gives `None` (it failed) is tried again on
    /// the same clock, as a peer's retries are. Returns the client's waits, all but that of the
    /// acquisition that found the run complete.
    ///
    /// Give it `async move` closures that own what they use (clones of a handle where both need
    /// it): with closures that borrow the task's locals, rustc cannot prove the spawned task
    /// `Send` ("implementation of `Send` is not general enough").
    pub async fn client<G>(
        &self,
        mut acquire: impl AsyncFnMut() -> Option<G>,
        mut release: impl AsyncFnMut(G),
    ) -> Vec<Duration> {
        let mut waits = Vec::new();
        loop {
            let t = Instant::now();
            let held = loop {
                if let Some(held) = acquire().await {
                    break held;
                }
            };
            let wait = t.elapsed();
            let more = self.enter();
            work(self.hold).await;
            self.leave();
            release(held).await;
            if !more {
                return waits;
            }
            waits.push(wait);
        }
    }
}

/// A contended run of one variant: its arena, its clock and its clients' tasks.
pub struct Run {
    arena: Arc<Arena>,
    started: Instant,
    /// The server's and this process's CPU time since the clock started, where they are read.
    cpu: CpuSpan,
    tasks: Vec<tokio::task::JoinHandle<Vec<Duration>>>,
}

impl Run {
    /// Starts the clock of a run of `total` acquisitions with `hold` of work under the lock
    /// (and reads the server's CPU, if the bench can).
    pub fn start(total: usize, hold: Duration) -> Self {
        let arena = Arena {
            total,
            hold,
            taken: AtomicUsize::new(0),
            done: OnceLock::new(),
            inside: AtomicUsize::new(0),
            overlaps: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
        };
        let cpu = CpuSpan::start(SERVER.get().copied());
        Run {
            arena: Arc::new(arena),
            started: Instant::now(),
            cpu,
            tasks: Vec::new(),
        }
    }

    /// The arena, for a client's task.
    pub fn arena(&self) -> Arc<Arena> {
        self.arena.clone()
    }

    /// Spawns a client's task, which returns its waits (see [`Arena::client`]).
    pub fn spawn(&mut self, client: impl Future<Output = Vec<Duration>> + Send + 'static) {
        self.tasks.push(tokio::spawn(client));
    }

    /// Waits for every client; the clock stops before `clients` (lockkit handles that had to stay
    /// open for the run) are dropped.
    pub async fn finish(self, label: &'static str, clients: Vec<Locks>) -> Contended {
        let mut tally = Tally::new(self.tasks.len());
        for (client, t) in self.tasks.into_iter().enumerate() {
            for wait in t.await.unwrap() {
                tally.record(client, wait);
            }
        }
        // CPU is counted until the last client stopped, and so are the acquisitions.
        let grants = self.arena.taken.load(Ordering::SeqCst);
        let (server, client_cpu) = self.cpu.end(grants);
        let done = self.arena.done.get().copied().unwrap_or_else(Instant::now);
        let secs = done.duration_since(self.started).as_secs_f64();
        drop(clients);
        Contended {
            label,
            secs,
            busiest: vec![tally.busiest_share()],
            tally,
            overlaps: self.arena.overlaps.load(Ordering::SeqCst),
            errors: self.arena.errors.load(Ordering::SeqCst),
            server,
            clients: client_cpu,
        }
    }
}

/// `rounds` alternating rounds of `variants` contended variants among `count` clients, `hold` of
/// work under the lock: machine noise hits every variant alike. `run(variant, tag)` runs one,
/// `tag` ending its lock's name (`{hold in µs}-{count}-{round}`, so that no two runs share a
/// lock); a round runs them in order, odd rounds in reverse, so none always follows another.
/// `per_round` takes what the caller wants of a round's rows (in variant order): its ratios.
///
/// Prints the heading, then a row a variant (its rounds added up), with an errors column if
/// `errors`. Returns the rows, for [`assert_no_overlaps`], and each round's `per_round`.
pub async fn alternate<F: Future<Output = Contended>, R>(
    (total, count): (usize, usize),
    rounds: usize,
    hold: Duration,
    errors: bool,
    variants: usize,
    mut run: impl FnMut(usize, String) -> F,
    per_round: impl Fn(&[Contended]) -> R,
) -> (Vec<Contended>, Vec<R>) {
    println!(
        "\ncontended: {count} clients, one lock, {hold:?} of work under it, {total} acquisitions \
         per round, {rounds} alternating rounds"
    );
    let mut heading = format!(
        "{:<34} {:>9} {:>10} {:>10} {:>10} {:>9}",
        "", "acq/s", "p50 ms", "p99 ms", "busiest", "overlaps"
    );
    if errors {
        write!(heading, " {:>7}", "errors").unwrap();
    }
    if SERVER.get().is_some() {
        write!(heading, " {:>10}", "srv µs/acq").unwrap();
    }
    if lockkit_measure::process_cpu(0).is_some() {
        write!(heading, " {:>10}", "cli µs/acq").unwrap();
    }
    println!("{heading}");
    let mut rows: Vec<Contended> = Vec::new();
    let mut each = Vec::new();
    for round in 0..rounds {
        let mut round_rows: Vec<Option<Contended>> = (0..variants).map(|_| None).collect();
        let order: Vec<usize> = if round % 2 == 0 {
            (0..variants).collect()
        } else {
            (0..variants).rev().collect()
        };
        let tag = format!("{}-{count}-{round}", hold.as_micros());
        for i in order {
            round_rows[i] = Some(run(i, tag.clone()).await);
        }
        let round_rows: Vec<Contended> = round_rows.into_iter().flatten().collect();
        each.push(per_round(&round_rows));
        for (i, r) in round_rows.into_iter().enumerate() {
            match rows.get_mut(i) {
                Some(acc) => acc.absorb(r),
                None => rows.push(r),
            }
        }
    }
    for r in &rows {
        r.print(errors);
    }
    (rows, each)
}

/// Panics if two clients ever held the lock at once.
pub fn assert_no_overlaps(rows: &[Contended]) {
    assert!(rows.iter().all(|r| r.overlaps == 0), "overlapping holders");
}
