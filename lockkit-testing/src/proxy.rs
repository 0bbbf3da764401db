//! A fault-injecting TCP proxy for network faults in real-server tests.
//!
//! A [`Proxy`] listens on a loopback port and forwards every connection to one upstream server.
//! Its [`Toxics`] can be changed at any time and apply to live connections at once: added latency
//! with jitter (order kept), a bandwidth limit, and a hold on either direction. A held direction
//! is neither read nor written, so the sender's socket fills as it would behind a partition, and
//! lifting the hold delivers everything in order on the same connection: a partition that heals
//! in place. Both directions held is a blackhole (the peer is gone and no FIN comes: a half-open
//! connection); connections accepted while both are held are not connected upstream until
//! healed. [`Proxy::reset`] resets every live connection (RST to both ends). Dropping the proxy
//! resets its connections too.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use lockkit_testing::proxy::Proxy;
//! let proxy = Proxy::start("127.0.0.1:6379").await?;
//! let url = format!("redis://{}", proxy.addr());
//! // ... connect a client to `url`, take a lock ...
//! proxy.partition(); // the holder is cut off, its socket stays open
//! proxy.heal(); // everything held is delivered, in order
//! proxy.reset(); // every connection gets an RST
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the proxy does to the traffic it forwards. The default forwards untouched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Toxics {
    /// Added to every chunk, each way.
    pub latency: Duration,
    /// Up to this much more per chunk, at random (chunks still arrive in order).
    pub jitter: Duration,
    /// Bytes per second, each way (`None`: unlimited).
    pub bandwidth: Option<u64>,
    /// Client-to-server bytes are held while set.
    pub hold_up: bool,
    /// Server-to-client bytes are held while set.
    pub hold_down: bool,
    /// New connections are reset at once (the server's port looks closed).
    pub refuse: bool,
    /// The first this many connections the proxy accepted pass untouched (a client's first
    /// connection often carries its requests, a later one its watches).
    pub spare: usize,
}

impl Toxics {
    /// Whether the toxics apply to the connection accepted `nth` (from 0).
    fn apply(&self, nth: usize) -> bool {
        nth >= self.spare
    }

    fn holds(&self, dir: Dir, nth: usize) -> bool {
        if !self.apply(nth) {
            return false;
        }
        match dir {
            Dir::Up => self.hold_up,
            Dir::Down => self.hold_down,
        }
    }

    /// Whether nothing passes either way (new connections wait before connecting upstream).
    fn blackhole(&self, nth: usize) -> bool {
        self.holds(Dir::Up, nth) && self.holds(Dir::Down, nth)
    }

    /// The bandwidth limit on the connection accepted `nth`.
    fn bandwidth(&self, nth: usize) -> Option<u64> {
        self.bandwidth.filter(|_| self.apply(nth))
    }

    /// How long a chunk read now waits before it is written.
    fn delay(&self, nth: usize) -> Duration {
        if !self.apply(nth) {
            return Duration::ZERO;
        }
        let jitter = if self.jitter.is_zero() {
            Duration::ZERO
        } else {
            rand::thread_rng().gen_range(Duration::ZERO..=self.jitter)
        };
        self.latency + jitter
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Up,
    Down,
}

#[derive(Debug)]
struct Shared {
    upstream: String,
    toxics: watch::Sender<Toxics>,
    resets: watch::Sender<u64>,
    live: AtomicUsize,
}

/// A running proxy (see the [module docs](self)). Dropping it stops it and resets its connections.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`), connecting
    /// anew for every accepted connection.
    pub async fn start(upstream: impl Into<String>) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream: upstream.into(),
            toxics: watch::Sender::new(Toxics::default()),
            resets: watch::Sender::new(0),
            live: AtomicUsize::new(0),
        });
        let s = shared.clone();
        let accept = tokio::spawn(async move {
            let mut nth = 0;
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, nth, s.clone()));
                nth += 1;
            }
        });
        Ok(Proxy {
            addr,
            shared,
            accept,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The toxics in effect.
    pub fn toxics(&self) -> Toxics {
        self.shared.toxics.borrow().clone()
    }

    /// Replaces the toxics; live connections follow at once.
    pub fn set(&self, toxics: Toxics) {
        self.shared.toxics.send_replace(toxics);
    }

    /// Changes some toxics and keeps the others.
    pub fn update(&self, f: impl FnOnce(&mut Toxics)) {
        self.shared.toxics.send_modify(f);
    }

    /// Holds both directions: a partition (or, never healed, a half-open connection).
    pub fn partition(&self) {
        self.update(|t| (t.hold_up, t.hold_down) = (true, true));
    }

    /// Lifts every hold and refusal: what was held is delivered, in order, on the same
    /// connections.
    pub fn heal(&self) {
        self.update(|t| (t.hold_up, t.hold_down, t.refuse) = (false, false, false));
    }

    /// Resets every live connection and refuses new ones until [healed](Proxy::heal): the
    /// server looks down to these clients only.
    pub fn cut(&self) {
        self.update(|t| t.refuse = true);
        self.reset();
    }

    /// Sets the added latency and jitter.
    pub fn latency(&self, latency: Duration, jitter: Duration) {
        self.update(|t| (t.latency, t.jitter) = (latency, jitter));
    }

    /// Resets every live connection: both ends get an RST and whatever was held is dropped.
    /// The toxics stay as they are.
    pub fn reset(&self) {
        self.shared.resets.send_modify(|n| *n += 1);
    }

    /// How many client connections are open through the proxy.
    pub fn connections(&self) -> usize {
        self.shared.live.load(Ordering::Acquire)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.reset();
    }
}

/// Counts a connection while it lives.
struct Live<'a>(&'a AtomicUsize);

impl<'a> Live<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::AcqRel);
        Live(n)
    }
}

impl Drop for Live<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One client connection: connect upstream (once not blackholed) and forward both ways until
/// both sides have closed, or reset both on a reset (or when the proxy is dropped).
async fn serve(mut client: TcpStream, nth: usize, shared: Arc<Shared>) {
    let _live = Live::new(&shared.live);
    let mut resets = shared.resets.subscribe();
    resets.mark_unchanged();
    let toxics = shared.toxics.subscribe();
    if toxics.borrow().refuse && toxics.borrow().apply(nth) {
        return reset(&client);
    }
    let connect = async {
        let mut t = toxics.clone();
        let _ = t.wait_for(|t| !t.blackhole(nth)).await;
        TcpStream::connect(&shared.upstream).await
    };
    let mut server = tokio::select! {
        s = connect => match s {
            Ok(s) => s,
            Err(_) => return reset(&client),
        },
        _ = resets.changed() => return reset(&client),
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    {
        let (cr, cw) = client.split();
        let (sr, sw) = server.split();
        let both = async {
            tokio::join!(
                pipe(cr, sw, Dir::Up, nth, toxics.clone()),
                pipe(sr, cw, Dir::Down, nth, toxics.clone())
            )
        };
        tokio::select! {
            _ = both => return,
            _ = resets.changed() => {}
        }
    }
    reset(&server);
    reset(&client);
}

/// Makes the socket's close an RST.
fn reset(s: &TcpStream) {
    let _ = s.set_zero_linger();
}

/// Forwards one direction: a reading stage stamps each chunk with when it may be written, a
/// writing stage writes it then (and not while the direction is held), paced to the bandwidth.
/// The reader's end of file shuts the writer's side down once everything before it is written.
async fn pipe<R, W>(mut from: R, mut to: W, dir: Dir, nth: usize, toxics: watch::Receiver<Toxics>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(64);
    let mut held = toxics.clone();
    let read = async move {
        let mut last = Instant::now();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            if held.wait_for(|t| !t.holds(dir, nth)).await.is_err() {
                return;
            }
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let due = (Instant::now() + held.borrow().delay(nth)).max(last);
            last = due;
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                return;
            }
        }
    };
    let mut held = toxics;
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            // A chunk takes its length's share of the bandwidth before it is out.
            let bandwidth = held.borrow().bandwidth(nth);
            if let Some(bps) = bandwidth.filter(|b| *b > 0) {
                let secs = chunk.len() as f64 / bps as f64;
                tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            }
            if held.wait_for(|t| !t.holds(dir, nth)).await.is_err() {
                return;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server; returns its address and a count of the connections it accepted.
    async fn echo() -> (SocketAddr, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let a = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                a.fetch_add(1, Ordering::AcqRel);
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        (addr, accepted)
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
        s.write_all(msg).await.unwrap();
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).await.unwrap();
        got
    }

    async fn nothing_within(s: &mut TcpStream, d: Duration) {
        let mut b = [0u8; 1];
        assert!(
            tokio::time::timeout(d, s.read(&mut b)).await.is_err(),
            "nothing arrives while held"
        );
    }

    #[tokio::test]
    async fn forwards_both_ways_and_passes_a_close_on() {
        let (up, _) = echo().await;
        let p = Proxy::start(up.to_string()).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"hello").await, b"hello");
        s.shutdown().await.unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        assert!(
            rest.is_empty(),
            "the server's close came back as end of file"
        );
    }

    #[tokio::test]
    async fn a_partition_heals_in_place_without_losing_bytes() {
        let (up, _) = echo().await;
        let p = Proxy::start(up.to_string()).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"a").await, b"a");
        p.partition();
        s.write_all(b"bc").await.unwrap();
        nothing_within(&mut s, Duration::from_millis(200)).await;
        p.heal();
        let mut got = [0u8; 2];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"bc");
        assert_eq!(p.connections(), 1, "the same connection carried on");
    }

    #[tokio::test]
    async fn a_blackhole_connects_nothing_upstream_until_healed() {
        let (up, accepted) = echo().await;
        let p = Proxy::start(up.to_string()).await.unwrap();
        p.partition();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        s.write_all(b"x").await.unwrap();
        nothing_within(&mut s, Duration::from_millis(200)).await;
        assert_eq!(accepted.load(Ordering::Acquire), 0);
        p.heal();
        let mut got = [0u8; 1];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"x");
        assert_eq!(accepted.load(Ordering::Acquire), 1);
    }

    #[tokio::test]
    async fn one_way_hold_stops_only_that_way() {
        let (up, _) = echo().await;
        let p = Proxy::start(up.to_string()).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"a").await, b"a");
        // Replies held: the request reaches the server, its echo waits in the proxy.
        p.update(|t| t.hold_down = true);
        s.write_all(b"b").await.unwrap();
        nothing_within(&mut s, Duration::from_millis(200)).await;
        // Requests held too, then replies let through: the echo of "b" comes, "c" does not.
        p.update(|t| (t.hold_up, t.hold_down) = (true, false));
        s.write_all(b"c").await.unwrap();
        let mut got = [0u8; 1];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"b");
        nothing_within(&mut s, Duration::from_millis(200)).await;
        p.heal();
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"c");
    }

    #[tokio::test]
    async fn reset_sends_an_rst_and_new_connections_work() {
        let (up, _) = echo().await;
        let p = Proxy::start(up.to_string()).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"a").await, b"a");
        p.reset();
        let mut b = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
            .await
            .expect("the reset arrives");
        assert_eq!(
            r.map_err(|e| e.kind()).unwrap_err(),
            std::io::ErrorKind::ConnectionReset
        );
        let mut s2 = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s2, b"b").await, b"b");
    }

    #[tokio::test]
    async fn a_cut_resets_and_refuses_until_healed() {
        let (up, accepted) = echo().await;
        let p = Proxy::start(up.to_string()).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"a").await, b"a");
        p.cut();
        let mut b = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
            .await
            .expect("the reset arrives");
        assert!(r.is_err(), "the live connection is reset: {r:?}");
        let mut refused = TcpStream::connect(p.addr()).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), refused.read(&mut b))
            .await
            .expect("a new connection is reset at once");
        assert!(r.is_err(), "reset: {r:?}");
        assert_eq!(accepted.load(Ordering::Acquire), 1, "nothing new upstream");
        p.heal();
        let mut s2 = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s2, b"b").await, b"b");
    }

    #[tokio::test]
    async fn spared_connections_pass_untouched() {
        let (up, _) = echo().await;
        let p = Proxy::start(up.to_string()).await.unwrap();
        p.set(Toxics {
            spare: 1,
            hold_up: true,
            hold_down: true,
            ..Toxics::default()
        });
        let mut first = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut first, b"a").await, b"a");
        let mut second = TcpStream::connect(p.addr()).await.unwrap();
        second.write_all(b"b").await.unwrap();
        nothing_within(&mut second, Duration::from_millis(200)).await;
    }

    #[tokio::test]
    async fn dropping_the_proxy_resets_its_connections() {
        let (up, _) = echo().await;
        let p = Proxy::start(up.to_string()).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"a").await, b"a");
        drop(p);
        let mut b = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
            .await
            .expect("the reset arrives");
        assert!(r.is_err(), "reset, not a clean close: {r:?}");
    }

    /// Lower bounds only: the delay is at least what was asked for, and order is kept.
    #[tokio::test]
    async fn latency_jitter_and_bandwidth_slow_traffic_and_keep_order() {
        let (up, _) = echo().await;
        let p = Proxy::start(up.to_string()).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        p.latency(Duration::from_millis(100), Duration::from_millis(50));
        let t = Instant::now();
        assert_eq!(roundtrip(&mut s, b"a").await, b"a");
        assert!(
            t.elapsed() >= Duration::from_millis(200),
            "both ways delayed"
        );
        let msg: Vec<u8> = (0..200u8).collect();
        for chunk in msg.chunks(10) {
            s.write_all(chunk).await.unwrap();
        }
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(got, msg, "jittered chunks arrive in order");
        p.set(Toxics {
            bandwidth: Some(64 * 1024),
            ..Toxics::default()
        });
        let big = vec![7u8; 32 * 1024];
        let t = Instant::now();
        assert_eq!(roundtrip(&mut s, &big).await, big);
        assert!(
            t.elapsed() >= Duration::from_millis(400),
            "32 KiB at 64 KiB/s takes half a second each way"
        );
    }
}
