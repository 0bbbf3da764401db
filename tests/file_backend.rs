//! `file://`-specific behaviour beyond the conformance suite: inspect, RW force-unlock, names
//! that map to long file names.

use std::time::Duration;

use lockkit::{AcquireOptions, HoldMode, LockState, Primitive};

fn dir(tag: &str) -> lockkit_testing::ScratchDir {
    lockkit_testing::ScratchDir::new(&format!("file-{tag}"))
}

async fn locks(d: &lockkit_testing::ScratchDir) -> lockkit::Locks {
    lockkit::connect(&d.url()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_holders_readers_permits_and_a_waiting_writer() {
    let d = dir("inspect");
    let locks = locks(&d).await;

    let info = locks.inspect("m", Primitive::Mutex).await.unwrap();
    assert!(info.holders.is_empty());
    let g = locks
        .mutex("m")
        .unwrap()
        .acquire(&AcquireOptions::new().fixed_lease(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    let info = locks.inspect("m", Primitive::Mutex).await.unwrap();
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].token, Some(g.token()));
    assert_eq!(info.holders[0].mode, HoldMode::Exclusive);
    let left = info.holders[0]
        .remaining_lease
        .expect("fixed lease is reported");
    assert!(left > Duration::from_secs(50) && left <= Duration::from_secs(60));
    g.release().await.unwrap();
    assert!(locks
        .inspect("m", Primitive::Mutex)
        .await
        .unwrap()
        .holders
        .is_empty());

    let rw = locks.rwlock("rw").unwrap();
    let r1 = rw.read_lock().await.unwrap();
    let r2 = locks.rwlock("rw").unwrap().read_lock().await.unwrap();
    let writer = locks.rwlock("rw").unwrap();
    let waiting = tokio::spawn(async move { writer.write_lock().await.map(|w| w.token()) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let info = locks.inspect("rw", Primitive::RwLock).await.unwrap();
    assert_eq!(info.holders.len(), 2, "{info:?}");
    assert!(info.holders.iter().all(|h| h.mode == HoldMode::Shared));
    assert_eq!(info.waiters.len(), 1, "the waiting writer: {info:?}");
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let wt = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(wt > lockkit::FencingToken(0));

    let sem = locks.semaphore("s", 3).unwrap();
    let p = sem
        .acquire(2, &AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    let info = locks.inspect("s", Primitive::Semaphore).await.unwrap();
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(info.holders[0].mode, HoldMode::Permits(2));
    assert_eq!(sem.available().await.unwrap(), 1);
    p.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_force_unlock_frees_readers_and_writers() {
    let d = dir("rwforce");
    let locks = locks(&d).await;
    let rw = locks.rwlock("x").unwrap();
    let r = rw.read_lock().await.unwrap();
    assert!(rw.force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(5), r.lost())
        .await
        .expect("reader lost after force_unlock");
    let w = tokio::time::timeout(Duration::from_secs(5), rw.write_lock())
        .await
        .unwrap()
        .unwrap();
    assert!(rw.force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(5), w.lost())
        .await
        .expect("writer lost after force_unlock");
    assert_eq!(w.state(), LockState::Lost);
    assert!(!rw.is_locked().await.unwrap());
    assert!(!rw.force_unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_readers_in_one_process_keep_distinct_records() {
    let d = dir("readers");
    let locks = locks(&d).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let rw = locks.rwlock("r").unwrap();
        tasks.push(tokio::spawn(async move { rw.read_lock().await.unwrap() }));
    }
    let mut guards = Vec::new();
    for t in tasks {
        guards.push(t.await.unwrap());
    }
    let info = locks.inspect("r", Primitive::RwLock).await.unwrap();
    assert_eq!(info.holders.len(), 8, "{info:?}");
    for g in guards {
        g.release().await.unwrap();
    }
    assert!(locks
        .inspect("r", Primitive::RwLock)
        .await
        .unwrap()
        .holders
        .is_empty());
    let m = locks.mutex("r").unwrap();
    drop(m.lock().await.unwrap());
}

/// A holder that lets go and at once asks again must queue behind those already waiting: OS
/// file locks keep no queue, and before waiters registered themselves one of four clients took
/// every acquisition (it asked again before the others' next poll). Four clients, each its own
/// handle, share 400 acquisitions of one lock with an empty critical section; none may take
/// more than half of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_asks_again_queues_behind_the_waiters() {
    let d = dir("fair-share");
    let total = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (locks, total) = (locks(&d).await, total.clone());
        clients.push(tokio::spawn(async move {
            let m = locks.mutex("shared").unwrap();
            let mut mine = 0u32;
            while total.load(std::sync::atomic::Ordering::Relaxed) < 400 {
                let g = m.lock().await.unwrap();
                total.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                mine += 1;
                g.release().await.unwrap();
            }
            mine
        }));
    }
    let mut shares = Vec::new();
    for c in clients {
        shares.push(c.await.unwrap());
    }
    let busiest = *shares.iter().max().unwrap();
    let all: u32 = shares.iter().sum();
    assert!(
        busiest * 2 <= all,
        "one client took {busiest} of {all} acquisitions: {shares:?}"
    );
}

/// A semaphore's size is the file `sem.<name>.size` (a decimal count); one holding anything
/// else is a typed `WrongType` error for every call that reads it, and nothing is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_size_is_a_file_and_a_foreign_one_is_refused() {
    let d = dir("sem-size");
    let locks = locks(&d).await;
    let s = locks.semaphore("pool", 3).unwrap();
    s.try_acquire(1)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("sem.pool.size")).unwrap(),
        "3\n"
    );

    std::fs::write(d.path().join("sem.other.size"), "three").unwrap();
    lockkit_testing::cases::foreign_size_is_refused(&locks, "other").await;
    assert_eq!(
        std::fs::read_to_string(d.path().join("sem.other.size")).unwrap(),
        "three"
    );
    assert!(locks
        .inspect("other", Primitive::Semaphore)
        .await
        .unwrap()
        .holders
        .is_empty());
}

/// Two handles of one process never share owner ids, also one built from the other: each
/// reader's record is its own, so one reader's release leaves the other's (it used to delete it,
/// and `inspect` then showed no reader while one held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_of_one_process_keep_their_readers_records_apart() {
    let d = dir("owner-ids");
    let path = d.path().to_path_buf();
    let first = lockkit::file::FileBackend::open(&path).unwrap();
    let second = first.clone().with_sync(false);
    let (a, b) = (
        lockkit::Locks::new(first.with_lease(Duration::from_secs(30))),
        lockkit::Locks::new(second),
    );
    let ra = a.rwlock("doc").unwrap().read_lock().await.unwrap();
    let rb = b.rwlock("doc").unwrap().read_lock().await.unwrap();
    let info = a.inspect("doc", Primitive::RwLock).await.unwrap();
    assert_eq!(info.holders.len(), 2, "{:?}", info.holders);
    ra.release().await.unwrap();
    let info = b.inspect("doc", Primitive::RwLock).await.unwrap();
    assert_eq!(info.holders.len(), 1, "the other reader's record is kept");
    rb.release().await.unwrap();
}

/// The files of the lock named `<name>.reader` start like `<name>`'s readers' records: inspect
/// never takes that lock's writer for a reader of `<name>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_tells_readers_from_a_lock_named_after_them() {
    let d = dir("inspect-reader-name");
    let locks = locks(&d).await;
    let r = locks.rwlock("x").unwrap().read_lock().await.unwrap();
    let w = locks
        .rwlock("x.reader")
        .unwrap()
        .write_lock()
        .await
        .unwrap();
    let info = locks.inspect("x", Primitive::RwLock).await.unwrap();
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(info.holders[0].mode, HoldMode::Shared);
    assert_eq!(info.holders[0].token, Some(r.token()));
    w.release().await.unwrap();
    r.release().await.unwrap();
}

/// A semaphore's size is written aside and renamed over the old one; a file planted where it
/// is written aside (a symlink to someone else's file, in a directory other users may write)
/// is replaced, never written through. The temporary file used to be opened with `create`,
/// which follows a symlink and truncates its target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_size_is_never_written_through_a_planted_link() {
    let d = dir("sem-size-link");
    let locks = locks(&d).await;
    let s = locks.semaphore("pool", 2).unwrap();
    assert_eq!(s.available().await.unwrap(), 2);
    let victim = d.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, d.path().join("sem.pool.size.tmp~")).unwrap();
    s.set_permits(3).await.unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(s.size().await.unwrap(), Some(3));
    assert_eq!(
        std::fs::read_to_string(d.path().join("sem.pool.size")).unwrap(),
        "3\n"
    );
}

/// A process stopped mid-draw keeps a token counter locked. Another reader, which holds its
/// shared lock already, waits for the counter at most `command_timeout`, then fails with
/// `Timeout` and lets go of its read lock. The draw used to block on the counter with no bound,
/// so even a `try_read` hung for as long as the stopped process did. `set_permits` waits for
/// the size's gate the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_counter_locked_by_a_stopped_process_bounds_the_acquire() {
    let d = dir("counter-held");
    let locks = lockkit::connect(&format!("{}?command_timeout=300ms", d.url()))
        .await
        .unwrap();
    let rw = locks.rwlock("rw").unwrap();
    rw.read_lock().await.unwrap().release().await.unwrap();
    // The stopped process: it holds the counter's lock and never finishes.
    let counter = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(d.path().join("rw.rw.token"))
        .unwrap();
    counter.lock().unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), rw.try_read())
        .await
        .expect("the draw waits at most command_timeout")
        .unwrap_err();
    assert_eq!(e.kind(), lockkit::ErrorKind::Timeout, "{e}");
    assert!(e.to_string().contains("command_timeout"), "{e}");
    // The failed reader let go: a writer gets in once the counter is free again.
    counter.unlock().unwrap();
    let w = rw.try_write().await.unwrap().expect("nothing left held");
    w.release().await.unwrap();

    // The same for an admin's `set_permits` behind a process stopped while admitting itself.
    let sem = locks.semaphore("pool", 2).unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    let gate = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(d.path().join("sem.pool.size-gate"))
        .unwrap();
    gate.lock_shared().unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), sem.set_permits(3))
        .await
        .expect("set_permits waits at most command_timeout")
        .unwrap_err();
    assert_eq!(e.kind(), lockkit::ErrorKind::Timeout, "{e}");
    gate.unlock().unwrap();
    assert_eq!(
        sem.set_permits(3).await.unwrap(),
        None,
        "no size was stored before"
    );
    locks.close().await.unwrap();
}
