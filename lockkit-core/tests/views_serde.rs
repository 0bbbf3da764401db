//! The operator views' JSON (the `serde` feature): the shape `lockkit inspect --json` and
//! `lockkit top --json` print, and a round trip.
#![cfg(feature = "serde")]

use std::time::Duration;

use lockkit_core::{
    FencingToken, HoldMode, HolderInfo, LockEntry, LockInfo, Primitive, WaiterInfo,
};
use serde_json::json;

#[test]
fn views_serialize_to_the_documented_json_and_back() {
    let info = LockInfo::new(
        vec![
            HolderInfo::new("a", HoldMode::Exclusive)
                .with_token(FencingToken(7))
                .with_remaining_lease(Duration::from_millis(1500)),
            HolderInfo::new("b", HoldMode::Permits(3)),
        ],
        vec![WaiterInfo::new("c", HoldMode::Shared)],
    );
    let v = serde_json::to_value(&info).unwrap();
    assert_eq!(
        v,
        json!({
            "holders": [
                {"owner": "a", "mode": "exclusive", "token": 7, "remaining_lease_ms": 1500},
                {"owner": "b", "mode": "permits", "permits": 3, "token": null, "remaining_lease_ms": null},
            ],
            "waiters": [{"owner": "c", "mode": "shared"}],
        })
    );
    let back: LockInfo = serde_json::from_value(v).unwrap();
    assert_eq!(back, info);

    let e = LockEntry::new("jobs/a", Primitive::RwLock);
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(v, json!({"name": "jobs/a", "primitive": "rwlock"}));
    assert_eq!(serde_json::from_value::<LockEntry>(v).unwrap(), e);
}
