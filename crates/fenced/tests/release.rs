//! Release never deletes another holder's lock, reports a lease it no longer holds, and
//! wakes the next waiter.

use std::time::Duration;

use fenced::{Error, WaitPolicy};

use crate::support::{all_keys, client, lock_key, raw, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_after_expiry_does_not_touch_the_new_holders_lock() {
    let server = server();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = raw(&server).await;
    let old = a
        .lock("r")
        .with_ttl(Duration::from_millis(200))
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    let new = b
        .lock("r")
        .with_ttl(Duration::from_secs(30))
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await
        .unwrap();
    let before: String = redis::cmd("GET")
        .arg(lock_key("r"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let pttl_before: i64 = redis::cmd("PTTL")
        .arg(lock_key("r"))
        .query_async(&mut conn)
        .await
        .unwrap();
    // The classic DEL-without-owner-check bug would delete B's lock here. The lease is known
    // lost, so the answer comes at once, and the release is still sent, in the background:
    // wait for it.
    assert!(matches!(old.release().await, Err(Error::LeaseLost { .. })));
    a.flush().await;
    let after: String = redis::cmd("GET")
        .arg(lock_key("r"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let pttl_after: i64 = redis::cmd("PTTL")
        .arg(lock_key("r"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(before, after, "the new holder's owner token was changed");
    assert!(
        pttl_after <= pttl_before && pttl_after > 25_000,
        "the new holder's ttl was changed"
    );
    new.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_of_a_deleted_lease_is_not_held_and_a_second_guard_release_cannot_happen() {
    let server = server();
    let a = client(&server).await;
    let mut conn = raw(&server).await;
    let g = a.lock("gone").acquire().await.unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg(lock_key("gone"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(matches!(g.release().await, Err(Error::NotHeld { .. })));
    // `release` takes the guard by value, so a double release does not compile; dropping after
    // a release sends nothing. Check that nothing was recreated either way:
    let g = a.lock("twice").acquire().await.unwrap();
    g.release().await.unwrap();
    let exists: i64 = redis::cmd("EXISTS")
        .arg(lock_key("twice"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_locks_leave_only_keys_that_expire() {
    let server = server();
    let a = client(&server).await;
    let mut conn = raw(&server).await;
    for i in 0..10 {
        a.lock(format!("k{i}"))
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    // Per name: the fence (it expires after the retention period). No lock key, no release
    // record, nothing without a ttl.
    let keys = all_keys(&mut conn).await;
    assert_eq!(keys.len(), 10, "{keys:?}");
    assert!(keys.iter().all(|k| k.ends_with(":fence")), "{keys:?}");
    for key in keys {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(pttl > 0, "{key}: pttl {pttl}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_opaque_data_never_script_text() {
    let server = server();
    let a = client(&server).await;
    let mut conn = raw(&server).await;
    let _: () = redis::cmd("SET")
        .arg("canary")
        .arg("alive")
        .query_async(&mut conn)
        .await
        .unwrap();
    for name in ["\"]] redis.call('FLUSHALL') --", "a'b\"c\nd\0e", "ключ 🔒"] {
        let g = a.lock(name).acquire().await.unwrap();
        let owner: Option<String> = redis::cmd("GET")
            .arg(lock_key(name))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            owner.map(|o| o.len()),
            Some(32),
            "lock key for {name:?} holds a 128-bit hex owner token"
        );
        g.release().await.unwrap();
    }
    let canary: Option<String> = redis::cmd("GET")
        .arg("canary")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(canary.as_deref(), Some("alive"));
}
