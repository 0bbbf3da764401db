//! The lockkit side of the Curator interop test (`scripts/test.d/30-curator-interop.sh`).
//!
//! ```text
//! interop_peer path  URL NAME             print the ZooKeeper paths of mutex, rwlock and
//!                                         election NAME
//! interop_peer mutex URL NAME ITERATIONS DIR
//! interop_peer rw    URL NAME ITERATIONS DIR
//! interop_peer latch URL NAME ITERATIONS DIR  lead election NAME (Curator's LeaderLatch)
//! interop_peer selector URL NAME ITERATIONS DIR  the same, with `election_layout=selector` in
//!                                         URL (Curator's LeaderSelector)
//! ```
//!
//! The overlap detector is shared with the Java side (interop/curator): an exclusive holder
//! creates `DIR/writer` with `create_new` (failing if anyone else is inside) and checks that
//! `DIR/readers` is empty; a reader adds `DIR/readers/ID` and checks that `DIR/writer` is absent.

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
        return Ok(());
    }
    let iterations: usize = args[3].parse().expect("ITERATIONS");
    let dir = PathBuf::from(&args[4]);
    std::fs::create_dir_all(dir.join("readers")).unwrap();
    let wait = AcquireOptions::new().wait(Duration::from_secs(30));
    let mutex = backend.mutex(name)?;
    let rw = backend.rwlock(name)?;
    let election = backend.election(name)?;
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
    for i in 0..iterations {
        if mode == "latch" || mode == "selector" {
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
            tokio::time::sleep(Duration::from_millis(2)).await;
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
        } else {
            let g = mutex.acquire(&wait).await?.expect("lock within 30 s");
            enter_exclusive(&dir);
            tokio::time::sleep(Duration::from_millis(2)).await;
            exit_exclusive(&dir);
            g.release().await?;
        }
    }
    println!("lockkit done {iterations}");
    Ok(())
}
