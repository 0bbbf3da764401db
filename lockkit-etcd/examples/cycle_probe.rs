//! Where does the uncontended cycle go? Variants of one lock + unlock cycle against etcd.
//!
//! `cargo run --release -p lockkit-etcd --example cycle_probe` (URL from `LOCKKIT_TEST_ETCD_URL`).

use std::time::{Duration, Instant};

use lockkit_etcd::etcd_client::{
    Client, Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp, WatchOptions,
};

fn p50(mut v: Vec<Duration>) -> u128 {
    v.sort();
    v[v.len() / 2].as_micros()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let url = std::env::var("LOCKKIT_TEST_ETCD_URL").unwrap_or("etcd://127.0.0.1:12379".into());
    let ep = url.trim_start_matches("etcd://").to_string();
    let mut c = Client::connect([ep.as_str()], None).await.unwrap();
    let n = 300;
    let key = "probe/k";
    let owner = || {
        TxnOp::get(
            "probe/",
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend)
                    .with_limit(1),
            ),
        )
    };
    for round in 0..2 {
        let mut a = Vec::new();
        let mut b = Vec::new();
        let mut s = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, "", None)]);
            c.txn(txn).await.unwrap();
            c.delete(key, None).await.unwrap();
            a.push(t.elapsed());
            let t = Instant::now();
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, "", None), owner()]);
            let r = c.txn(txn).await.unwrap();
            let rev = r.header().unwrap().revision();
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, rev)])
                .and_then([TxnOp::delete(key, None)]);
            c.txn(txn).await.unwrap();
            b.push(t.elapsed());
            let t = Instant::now();
            let mut c2 = c.clone();
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, "", None), owner()]);
            let r = tokio::spawn(async move { c2.txn(txn).await })
                .await
                .unwrap()
                .unwrap();
            let rev = r.header().unwrap().revision();
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, rev)])
                .and_then([TxnOp::delete(key, None)]);
            c.txn(txn).await.unwrap();
            s.push(t.elapsed());
        }
        println!(
            "round {round}: raw {} us, lock-shaped {} us, lock-shaped+spawn {} us",
            p50(a),
            p50(b),
            p50(s)
        );
        if round == 0 {
            let mut w = c
                .watch("probe/", Some(WatchOptions::new().with_prefix()))
                .await
                .unwrap();
            tokio::spawn(async move { while let Ok(Some(_)) = w.message().await {} });
            println!("(now with a prefix watch running)");
        }
    }
    let locks = lockkit_etcd::connect(&lockkit_core::LockConfig::new(url))
        .await
        .unwrap();
    let m = locks.mutex("probe-lockkit").unwrap();
    m.lock().await.unwrap().release().await.unwrap();
    let mut l = Vec::new();
    let (mut acq, mut rel) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let g = m.lock().await.unwrap();
        let t1 = Instant::now();
        g.release().await.unwrap();
        rel.push(t1.elapsed());
        acq.push(t1 - t);
        l.push(t.elapsed());
    }
    println!(
        "lockkit {} us (acquire {} us, release {} us)",
        p50(l),
        p50(acq),
        p50(rel)
    );
    let (mut t1s, mut t2s) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, "", None), owner()]);
        let r = c.txn(txn).await.unwrap();
        let t1 = Instant::now();
        let rev = r.header().unwrap().revision();
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, rev)])
            .and_then([TxnOp::delete(key, None)]);
        c.txn(txn).await.unwrap();
        t2s.push(t1.elapsed());
        t1s.push(t1 - t);
    }
    println!("lock-shaped: txn1 {} us, txn2 {} us", p50(t1s), p50(t2s));
}
