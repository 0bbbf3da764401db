//! Secret hygiene: during a full lock cycle with credentials and TLS client certificates on every
//! backend of the secure profile (`scripts/services.sh up --secure`), no password and no private
//! key material appears in `tracing` output (TRACE, every crate, `log` records included), nor in
//! `Debug`/`Display` of the config, the URL, the handle, guards and errors.
#![cfg(all(feature = "redis-tls", feature = "zk-tls", feature = "etcd"))]

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use lockkit::{LockConfig, ServerUrl};

/// Everything every test of this binary logged.
fn captured() -> &'static Arc<Mutex<Vec<u8>>> {
    static BUF: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    BUF.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .try_init()
            .expect("install the capturing subscriber");
        buf
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The secrets of `url`: its password and pieces of the private key it names.
fn secrets_of(url: &ServerUrl) -> Vec<String> {
    let mut out = vec![url.password.as_ref().unwrap().expose().to_string()];
    let key = std::fs::read_to_string(url.param("tls_key").unwrap()).unwrap();
    // Every base64 line of the key body is a secret on its own.
    out.extend(
        key.lines()
            .filter(|l| !l.starts_with("-----") && l.len() >= 32)
            .map(str::to_string),
    );
    out
}

async fn full_cycle(backend: &str) {
    let buf = captured().clone();
    let Some(url) = lockkit_testing::server_url(&format!("{backend}_secure")) else {
        return;
    };
    let parsed = ServerUrl::parse(&url).unwrap();
    let secrets = secrets_of(&parsed);
    let mut shown = Vec::new();

    let mut cfg = LockConfig::new(url.clone());
    cfg.options.insert("api_token".into(), "tok-9f8e7d".into());
    shown.push(format!(
        "{cfg:?} {parsed} {parsed:?} {}",
        lockkit::redact(&url)
    ));
    cfg.options.clear();
    let locks = lockkit::from_config(&cfg).await.unwrap();
    shown.push(format!("{locks:?}"));
    let mutex = locks.mutex("redaction").unwrap();
    let guard = mutex.lock().await.unwrap();
    shown.push(format!("{guard:?} {:?}", guard.token()));
    assert!(mutex.try_lock().await.unwrap().is_none());
    guard.release().await.unwrap();
    match mutex.force_unlock().await {
        Ok(freed) => assert!(!freed, "nothing was held"),
        Err(e) => shown.push(format!("{e} {e:?}")),
    }
    locks.close().await.unwrap();

    // A wrong password and its error. (ZooKeeper over TLS may still let it in: the client
    // certificate is an identity of its own there, and our nodes' ACL names it.)
    let pw = parsed.password.as_ref().unwrap().expose();
    let wrong = url.replacen(&format!(":{pw}@"), ":Wr0ngPassw0rd@", 1);
    let attempt = async {
        let l = lockkit::from_config(&LockConfig::new(wrong)).await?;
        l.mutex("redaction")?.try_lock().await.map(drop)
    }
    .await;
    if let Err(e) = attempt {
        shown.push(format!("{e} {e:?} {:?}", std::error::Error::source(&e)));
    }

    let logged = String::from_utf8_lossy(&buf.lock().unwrap()).into_owned();
    assert!(
        logged.lines().count() > 5,
        "the subscriber captured almost nothing: {logged}"
    );
    let shown = shown.join("\n");
    for s in secrets
        .iter()
        .map(String::as_str)
        .chain(["Wr0ngPassw0rd", "tok-9f8e7d"])
    {
        assert!(
            !logged.contains(s),
            "{backend}: tracing output shows a secret"
        );
        assert!(
            !shown.contains(s),
            "{backend}: Debug/Display shows a secret: {shown}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cycle_leaks_nothing() {
    full_cycle("redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_cycle_leaks_nothing() {
    full_cycle("zk").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_cycle_leaks_nothing() {
    full_cycle("etcd").await;
}
