//! The lockkit side of the Curator interop test (`scripts/test.d/30-curator-interop.sh`).
//!
//! ```text
//! interop_peer path  URL NAME             print the ZooKeeper paths of mutex, rwlock,
//!                                         election and semaphore NAME
//! interop_peer mutex URL NAME ITERATIONS DIR
//! interop_peer rw    URL NAME ITERATIONS DIR
//! interop_peer semaphore URL NAME ITERATIONS DIR  one permit at a time of semaphore NAME,
//!                                         whose size (1) it stores before it starts; Curator
//!                                         reads it through a SharedCount
//! interop_peer latch URL NAME ITERATIONS DIR  lead election NAME (Curator's LeaderLatch)
//! interop_peer selector URL NAME ITERATIONS DIR  the same, with `election_layout=selector` in
//!                                         URL (Curator's LeaderSelector)
//! ```
//!
//! The overlap detector is shared with the Java side (interop/curator): an exclusive holder
//! creates `DIR/writer` with `create_new` (failing if anyone else is inside) and checks that
//! `DIR/readers` is empty; a reader adds `DIR/readers/ID` and checks that `DIR/writer` is absent.
//! An election's leader also names itself in `DIR/leading` (written by rename, removed before it
//! resigns), and each side's reader checks that its own `leader()` names whoever leads, the other
//! side's candidates included: two reads of `DIR/leading` that agree bracket the read.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lockkit_core::{AcquireOptions, LockConfig};

fn enter_exclusive(dir: &Path) {
    if let Err(e) = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.join("writer"))
    {
        panic!("OVERLAP: lockkit entered while another holder was inside ({e})");
    }
    let readers = std::fs::read_dir(dir.join("readers")).unwrap().count();
    assert_eq!(
        readers, 0,
        "OVERLAP: lockkit writer entered with readers inside"
    );
    use std::io::Write;
    let mut order = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("order"))
        .unwrap();
    order.write_all(b"lockkit\n").unwrap();
}

fn exit_exclusive(dir: &Path) {
    std::fs::remove_file(dir.join("writer")).unwrap();
}

/// How long a leader stays inside: long enough for the other side's reader to look.
const LEAD: Duration = Duration::from_millis(20);

/// Names `id` as the leader in `DIR/leading`, atomically.
fn announce(dir: &Path, id: &str) {
    let tmp = dir.join("leading.lockkit");
    std::fs::write(&tmp, id).unwrap();
    std::fs::rename(tmp, dir.join("leading")).unwrap();
}

fn leading_now(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("leading")).unwrap_or_default()
}

/// Reads the leader through `election` until `stop`: whenever `DIR/leading` names the same
/// candidate before and after a read, the read must name it too. Returns how many reads named
/// one of Curator's candidates.
async fn cross_reader(
    election: lockkit_core::Election,
    dir: PathBuf,
    stop: tokio::sync::watch::Receiver<bool>,
) -> lockkit_core::Result<u64> {
    let mut named_curator = 0;
    while !*stop.borrow() {
        let before = leading_now(&dir);
        let named = election
            .leader()
            .await?
            .map(|l| l.value_str().to_string())
            .unwrap_or_default();
        let after = leading_now(&dir);
        if !before.is_empty() && before == after {
            assert_eq!(
                named, before,
                "MISNAMED: lockkit's reader named {named:?} while {before:?} led"
            );
            if named.starts_with("curator-") {
                named_curator += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(named_curator)
}

fn enter_shared(dir: &Path) -> PathBuf {
    let me = dir
        .join("readers")
        .join(format!("lockkit-{}", std::process::id()));
    std::fs::File::create(&me).unwrap();
    assert!(
        !dir.join("writer").exists(),
        "OVERLAP: lockkit reader entered with a writer inside"
    );
    me
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> lockkit_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, url, name) = (args[0].as_str(), &args[1], &args[2]);
    let backend = lockkit_zk::connect_zk(&LockConfig::new(url.clone())).await?;
    if mode == "path" {
        println!("{}", backend.mutex_path(name));
        println!("{}", backend.rwlock_path(name));
        println!("{}", backend.election_path(name));
        println!("{}", backend.semaphore_path(name));
        return Ok(());
    }
    let iterations: usize = args[3].parse().expect("ITERATIONS");
    let dir = PathBuf::from(&args[4]);
    std::fs::create_dir_all(dir.join("readers")).unwrap();
    let wait = AcquireOptions::new().wait(Duration::from_secs(30));
    let mutex = backend.mutex(name)?;
    let rw = backend.rwlock(name)?;
    let election = backend.election(name)?;
    let semaphore = backend.semaphore(name, 1)?;
    if mode == "semaphore" {
        // The size Curator's SharedCount must read (its seed would say 5).
        backend.open_semaphore(name)?.set_permits(1).await?;
    }
    // Start together, so the two sides really contend.
    std::fs::write(dir.join("ready-lockkit"), b"").unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while !dir.join("ready-curator").exists() {
        assert!(
            std::time::Instant::now() < until,
            "Curator side never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let elects = mode == "latch" || mode == "selector";
    let reader = elects.then(|| {
        let reading = backend.election(name).expect("election");
        tokio::spawn(cross_reader(reading, dir.clone(), stopped))
    });
    for i in 0..iterations {
        if elects {
            let me = format!("lockkit-{i}");
            let lead = election
                .campaign_with(me.clone(), &wait)
                .await?
                .expect("leadership within 30 s");
            enter_exclusive(&dir);
            let named = election.leader().await?.expect("a leader");
            assert_eq!(
                named.value_str(),
                me,
                "OVERLAP: lockkit leads but the election names another"
            );
            announce(&dir, &me);
            tokio::time::sleep(LEAD).await;
            std::fs::remove_file(dir.join("leading")).unwrap();
            exit_exclusive(&dir);
            assert!(
                lead.resign().await?,
                "lockkit lost leadership while leading"
            );
        } else if mode == "rw" {
            let w = rw.write(&wait).await?.expect("write lock within 30 s");
            enter_exclusive(&dir);
            tokio::time::sleep(Duration::from_millis(2)).await;
            exit_exclusive(&dir);
            w.release().await?;
            let r = rw.read(&wait).await?.expect("read lock within 30 s");
            let me = enter_shared(&dir);
            tokio::time::sleep(Duration::from_millis(2)).await;
            std::fs::remove_file(me).unwrap();
            r.release().await?;
        } else if mode == "semaphore" {
            let p = semaphore
                .acquire(1, &wait)
                .await?
                .expect("a permit within 30 s");
            enter_exclusive(&dir);
            tokio::time::sleep(Duration::from_millis(2)).await;
            exit_exclusive(&dir);
            p.release().await?;
        } else {
            let g = mutex.acquire(&wait).await?.expect("lock within 30 s");
            enter_exclusive(&dir);
            tokio::time::sleep(Duration::from_millis(2)).await;
            exit_exclusive(&dir);
            g.release().await?;
        }
    }
    if let Some(reader) = reader {
        let _ = stop.send(true);
        let named = reader.await.expect("the reader")?;
        assert!(named > 0, "lockkit's reader never named a Curator leader");
        println!("lockkit named Curator's leader {named} times");
    }
    println!("lockkit done {iterations}");
    Ok(())
}
