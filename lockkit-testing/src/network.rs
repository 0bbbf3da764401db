//! Network faults between one holder and its server, through a [`Proxy`]: a half-open
//! connection, a link slower than the lease, a partition that heals in place, a reset of
//! every connection at once (under a holder, and under a waiter), and a multi-acquire whose
//! answers are held. [`network_suite!`]
//! expands them into one `#[tokio::test]` each for a backend, given the base config (one
//! server, `None` skips) and the backend's connect:
//!
//! ```ignore
//! fn config() -> Option<lockkit_core::LockConfig> {
//!     lockkit_testing::server_url("etcd").map(lockkit_core::LockConfig::new)
//! }
//! lockkit_testing::network_suite!(config, lockkit_etcd::connect);
//! ```
//!
//! In each case the holder reaches the server through its own proxy and a second handle reaches
//! it directly. Every lock is held with a watchdog lease of [`LEASE`] (a waiter whose place is what
//! a case checks, five of them) and every handle has a 1 s
//! command and connect timeout. What is checked is what the backends promise: the holder is told
//! `lost()` before anyone else can hold the lock, within the lease of the fault; requests held in
//! a partition and delivered late change nothing; a fault shorter than the lease, or a reset
//! the client reconnects from, keeps the lock.
//!
//! [`network_suite!`]: crate::network_suite

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::cases::assert_kind;
use crate::proxy::Proxy;
use crate::support::unique_name;
use lockkit_core::{
    AcquireOptions, ErrorKind, LockConfig, LockGuard, LockState, Locks, Primitive, Result,
};

/// The watchdog lease of every hold in these cases.
pub const LEASE: Duration = Duration::from_secs(2);

/// A holder's `lost()` may come this much after its lease has run out since the fault began
/// (the local timer's granularity and a loaded machine), never later.
const SLACK: Duration = Duration::from_millis(500);

/// The holder behind its proxy, another handle direct, and a fresh lock name.
struct Cut {
    proxy: Proxy,
    holder: Locks,
    other: Locks,
    name: String,
}

impl Cut {
    async fn new<C, F>(cfg: &LockConfig, connect: C) -> Cut
    where
        C: Fn(LockConfig) -> F,
        F: Future<Output = Result<Locks>>,
    {
        let (scheme, rest) = cfg.url.split_once("://").expect("a server URL");
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        assert!(
            !authority.contains(',') && !authority.contains('@'),
            "the network cases take one plain host: {}",
            cfg.url
        );
        let proxy = Proxy::start(authority).await.expect("the proxy starts");
        let quick = |url: String| {
            let mut c = cfg.clone();
            c.url = url;
            c.command_timeout = Some(Duration::from_secs(1));
            c.connect_timeout = Some(Duration::from_secs(1));
            c
        };
        let via = quick(format!("{scheme}://{}{tail}", proxy.addr()));
        let holder = connect(via).await.expect("the holder connects");
        let other = connect(quick(cfg.url.clone()))
            .await
            .expect("the other handle connects");
        Cut {
            proxy,
            holder,
            other,
            name: unique_name("network"),
        }
    }

    async fn hold(&self, locks: &Locks, wait: Duration) -> LockGuard {
        let opts = AcquireOptions::new().watchdog_lease(LEASE).wait(wait);
        locks
            .mutex(&self.name)
            .unwrap()
            .acquire(&opts)
            .await
            .unwrap()
            .expect("the lock is free in time")
    }

    /// After a partition that cost the holder its lock: heal it, let the requests it held
    /// arrive, and check that they changed nothing and the holder's handle works again.
    async fn heal_and_recover(&self, old: LockGuard, new: LockGuard) {
        self.proxy.heal();
        tokio::time::sleep(LEASE).await;
        assert_eq!(
            new.state(),
            LockState::Held,
            "the new holder keeps the lock after the late requests arrive"
        );
        assert_kind(old.release().await, ErrorKind::LockLost, "the old release");
        new.release().await.unwrap();
        let started = Instant::now();
        loop {
            match self.holder.mutex(&self.name).unwrap().try_lock().await {
                Ok(Some(g)) => return g.release().await.unwrap(),
                Ok(None) => panic!("nobody holds the lock now"),
                Err(e) if e.is_retryable() && started.elapsed() < Duration::from_secs(20) => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("the holder's handle did not recover: {e}"),
            }
        }
    }
}

/// The holder is cut off from now on (`fault`), and the other handle waits for the lock: the
/// holder's guard must be Lost when the other's acquire returns, and its `lost()` resolve within
/// the lease (plus `allowance`) of the fault. Returns the other's guard.
async fn lost_before_taken(
    t: &Cut,
    g: &LockGuard,
    fault: impl FnOnce(),
    allowance: Duration,
) -> LockGuard {
    let cut = Instant::now();
    fault();
    let lost = async {
        tokio::time::timeout(LEASE * 5, g.lost())
            .await
            .expect("the holder is told lost()");
        Instant::now()
    };
    let taken = async {
        let g2 = t.hold(&t.other, LEASE * 8).await;
        // Read as the grant arrives: the state is Lost once the deadline has passed, whenever
        // the task that resolves `lost()` gets to run.
        (g2, Instant::now(), g.state())
    };
    let (lost_at, (g2, taken_at, state_at_grant)) = tokio::join!(lost, taken);
    assert_eq!(
        state_at_grant,
        LockState::Lost,
        "the holder's guard was {state_at_grant:?} when another holder got the lock"
    );
    assert!(
        lost_at - cut <= LEASE + allowance + SLACK,
        "lost() came {:?} after the fault, past the lease",
        lost_at - cut
    );
    assert_eq!(g.state(), LockState::Lost);
    assert!(g2.token() > g.token(), "the token rises");
    println!(
        "network: lost() {:?} after the fault, the next grant {:?} after the fault",
        lost_at - cut,
        taken_at - cut
    );
    g2
}

/// A half-open connection: the proxy keeps the holder's socket and forwards nothing (no FIN, no
/// RST), as when the server's host vanishes. The holder is told `lost()` within its lease and
/// before the other handle gets the lock; once the partition heals, the renewals and releases it
/// held change nothing, and the holder's handle works again.
pub async fn half_open_holder_is_lost_before_anyone_else_holds<C, F>(cfg: &LockConfig, connect: C)
where
    C: Fn(LockConfig) -> F,
    F: Future<Output = Result<Locks>>,
{
    let t = Cut::new(cfg, connect).await;
    let g = t.hold(&t.holder, Duration::ZERO).await;
    let g2 = lost_before_taken(&t, &g, || t.proxy.partition(), Duration::ZERO).await;
    t.heal_and_recover(g, g2).await;
}

/// A link slower than the lease (1.2-1.5 s each way, so a renewal's round trip is longer than
/// the 2 s lease): the holder may not keep the lock, and must be told `lost()` before anyone
/// else holds it. One round trip of the slow link is allowed on top of the lease: a renewal sent
/// just before the link slowed is still answered.
pub async fn slow_link_past_the_lease_is_lost_before_anyone_else_holds<C, F>(
    cfg: &LockConfig,
    connect: C,
) where
    C: Fn(LockConfig) -> F,
    F: Future<Output = Result<Locks>>,
{
    let t = Cut::new(cfg, connect).await;
    let g = t.hold(&t.holder, Duration::ZERO).await;
    let slow = || {
        t.proxy
            .latency(Duration::from_millis(1200), Duration::from_millis(300))
    };
    let g2 = lost_before_taken(&t, &g, slow, Duration::from_secs(3)).await;
    t.proxy.latency(Duration::ZERO, Duration::ZERO);
    t.heal_and_recover(g, g2).await;
}

/// A partition shorter than the lease that heals in place (700 ms; what was sent meanwhile is
/// delivered late, in order): the holder keeps the lock, its guard is Held again, and the other
/// handle cannot take it.
pub async fn short_partition_keeps_the_lock<C, F>(cfg: &LockConfig, connect: C)
where
    C: Fn(LockConfig) -> F,
    F: Future<Output = Result<Locks>>,
{
    let t = Cut::new(cfg, connect).await;
    let g = t.hold(&t.holder, Duration::ZERO).await;
    t.proxy.partition();
    tokio::time::sleep(Duration::from_millis(700)).await;
    t.proxy.heal();
    kept(&t, g).await;
}

/// Every connection of the holder reset at once (RST to both ends): the client reconnects
/// within the lease and keeps the lock.
pub async fn reset_connections_keep_the_lock<C, F>(cfg: &LockConfig, connect: C)
where
    C: Fn(LockConfig) -> F,
    F: Future<Output = Result<Locks>>,
{
    let t = Cut::new(cfg, connect).await;
    let g = t.hold(&t.holder, Duration::ZERO).await;
    t.proxy.reset();
    kept(&t, g).await;
}

/// A waiter whose every connection is reset while it waits (RST to both ends) keeps its place:
/// the client reconnects, the waiter bears the failed requests meanwhile, a contender that
/// queued after the reset does not get the lock first, and the waiter takes it when the holder
/// releases.
pub async fn a_reset_waiter_keeps_its_place<C, F>(cfg: &LockConfig, connect: C)
where
    C: Fn(LockConfig) -> F,
    F: Future<Output = Result<Locks>>,
{
    let t = Cut::new(cfg, connect).await;
    let held = t.hold(&t.other, Duration::ZERO).await;
    // A long lease: the case is about the place in the queue, not about lease timing.
    let wait = AcquireOptions::new()
        .watchdog_lease(LEASE * 5)
        .wait(Duration::from_secs(20));
    let acquire = |locks: &Locks| {
        let (mutex, opts) = (locks.mutex(&t.name).unwrap(), wait);
        tokio::spawn(async move { mutex.acquire(&opts).await })
    };
    let mut waiter = acquire(&t.holder);
    waiters_reach(&t.other, &t.name, 1).await;
    t.proxy.reset();
    let mut later = acquire(&t.other);
    waiters_reach(&t.other, &t.name, 2).await;
    let first = held.token();
    held.release().await.unwrap();
    // Whichever acquire ends first: the waiter's, unless the later contender jumped the queue.
    let g = tokio::select! {
        biased;
        w = &mut waiter => w
            .unwrap()
            .expect("the reset waiter's acquire succeeds")
            .expect("the reset waiter gets the lock in time"),
        l = &mut later => {
            let r = l.unwrap().map(|g| g.map(|g| g.token()));
            panic!("the later contender's acquire ended before the waiter's: {r:?}");
        }
    };
    assert!(g.token() > first, "the token rises");
    g.release().await.unwrap();
    later
        .await
        .unwrap()
        .unwrap()
        .expect("the later contender follows")
        .release()
        .await
        .unwrap();
}

/// Waits (at most 10 s) until `n` acquirers are queued on mutex `name`, as `locks` reads it
/// from the server.
pub async fn waiters_reach(locks: &Locks, name: &str, n: usize) {
    let started = Instant::now();
    loop {
        let info = locks.inspect(name, Primitive::Mutex).await.unwrap();
        if info.waiters.len() >= n {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} waiters queued, {n} expected: {info:?}",
            info.waiters.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Cuts a queued waiter's look off in flight, and returns the guard it then gets: once the
/// waiter (queued on mutex `name` behind `held`, reaching its server through `proxy`) has set
/// its watch, its requests are held on the way to the server while the server's messages
/// still reach it; `held` is released, so the release's event arrives and the look it sends
/// stays in the proxy until a reset drops it. Asserts that the acquire driver bore a failed
/// request of `name` (else the fault missed the look).
pub async fn cut_off_a_look(
    proxy: &Proxy,
    name: &str,
    held: LockGuard,
    waiter: tokio::task::JoinHandle<Result<Option<LockGuard>>>,
) -> LockGuard {
    let borne =
        || crate::spans::events_of_lock_mentioning(name, "waiting through a failed request");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = borne();
    proxy.update(|t| t.hold_up = true);
    held.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.reset();
    proxy.heal();
    let g = waiter
        .await
        .unwrap()
        .expect("the cut-off look is borne")
        .expect("the waiter gets the lock");
    assert!(
        borne() > before,
        "no failed request was borne: the fault missed the look"
    );
    g
}

/// A multi-acquire whose answers the server sends but the link holds (one way, longer than the
/// command timeout) fails or times out, and leaves nothing behind once the link heals: whatever
/// the server granted is given back in the background, long before the 30 s lease would have
/// freed it. (Where the backend takes a set in one step, that step's answer is the one held.)
pub async fn multi_acquire_whose_answer_is_held_leaves_nothing<C, F>(cfg: &LockConfig, connect: C)
where
    C: Fn(LockConfig) -> F,
    F: Future<Output = Result<Locks>>,
{
    let t = Cut::new(cfg, connect).await;
    let names: Vec<String> = (0..3).map(|i| format!("{}-{i}", t.name)).collect();
    let set = t.holder.multi(&names).unwrap();
    t.proxy.update(|x| x.hold_down = true);
    let opts = AcquireOptions::new()
        .watchdog_lease(Duration::from_secs(30))
        .wait(Duration::from_millis(1500));
    match set.acquire(&opts).await {
        Ok(None) => {}
        Err(e) if e.is_retryable() => {}
        Ok(Some(_)) => panic!("a set was taken whose answers never arrived"),
        Err(e) => panic!("the held answers gave {e}"),
    }
    t.proxy.heal();
    let theirs = t.other.multi(&names).unwrap();
    let g = theirs
        .acquire(&AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the set is given back within 10 s of the link healing");
    g.release().await.unwrap();
}

/// The holder, after a fault, holds on: for two leases its guard is Held again, nobody else
/// can take the lock, and its release succeeds.
async fn kept(t: &Cut, g: LockGuard) {
    let other = t.other.mutex(&t.name).unwrap();
    let taken = other
        .acquire(&AcquireOptions::new().watchdog_lease(LEASE).wait(LEASE * 2))
        .await
        .unwrap();
    assert!(taken.is_none(), "nobody else gets a lock its holder kept");
    assert_eq!(g.state(), LockState::Held, "the holder is held again");
    g.release().await.expect("the holder releases");
    other
        .try_lock()
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
}

/// Expands the network cases into one `#[tokio::test]` each (see the [module docs](crate::network)).
#[macro_export]
macro_rules! network_suite {
    ($config:path, $connect:path) => {
        $crate::__network_cases!($config, $connect;
            half_open_holder_is_lost_before_anyone_else_holds,
            slow_link_past_the_lease_is_lost_before_anyone_else_holds,
            short_partition_keeps_the_lock,
            reset_connections_keep_the_lock,
            a_reset_waiter_keeps_its_place,
            multi_acquire_whose_answer_is_held_leaves_nothing
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __network_cases {
    ($config:path, $connect:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(cfg) = $config() {
                    $crate::network::$case(&cfg, |c: $crate::__core::LockConfig| async move {
                        $connect(&c).await
                    })
                    .await;
                }
            }
        )*
    };
}
