//! Issue 29, part 3: a multi-lock of mutexes is taken by one `multi` of creates when our node
//! is first in every member's directory (every member's token is that one transaction's zxid);
//! a set with a busy member leaves no node of ours behind; after a busy set the handle looks
//! before it writes, and a free set (a node that is no lock's aside) is still one `multi`.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_set_is_one_multi_and_a_busy_one_leaves_no_node() {
    let Some(url) = url() else { return };
    let locks = backend(&url).await;
    let other = backend(&url).await;
    let names: Vec<String> = (0..4)
        .map(|i| lockkit_testing::unique_name(&format!("multi-{i}")))
        .collect();
    let set = locks.multi(&names).unwrap();
    let g = set.try_lock().await.unwrap().expect("a free set");
    let tokens: Vec<u64> = g.tokens().iter().map(|(_, t)| t.0).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] == w[1]),
        "one zxid: {tokens:?}"
    );
    for n in &names {
        assert!(
            other.mutex(n).unwrap().try_lock().await.unwrap().is_none(),
            "{n} free"
        );
    }
    g.release().await.unwrap();

    // A busy member: nothing of ours is left in any member's directory.
    let busy = other.mutex(&names[2]).unwrap().lock().await.unwrap();
    assert!(set.try_lock().await.unwrap().is_none());
    for n in &names {
        let dir = locks.mutex_path(n);
        let left = children(&locks, &dir).await;
        let want = usize::from(n == &names[2]);
        assert_eq!(left.len(), want, "{dir}: {left:?}");
    }
    busy.release().await.unwrap();

    // After a busy take the handle looks before it writes; a free set is still one multi, and
    // a node that is no lock's (here in the first member's directory) does not make it busy.
    let client = locks.zk_client().unwrap();
    let junk = format!("{}/not-a-lock", locks.mutex_path(&names[0]));
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client.create(&junk, b"", &persistent).await.unwrap();
    let g = set.try_lock().await.unwrap().expect("a free set");
    let again: Vec<u64> = g.tokens().iter().map(|(_, t)| t.0).collect();
    assert!(
        again.windows(2).all(|w| w[0] == w[1]),
        "one zxid: {again:?}"
    );
    g.release().await.unwrap();
    client.delete(&junk, None).await.unwrap();
}
