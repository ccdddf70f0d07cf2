//! A holder that never releases blocks others only until its ttl; a dropped guard frees the
//! lock at once; foreign holders using the same key layout (redis-py, redsync) are respected.

use std::time::Duration;

use fenced::WaitPolicy;
use tokio::time::Instant;

use crate::support::{client, lock_key, raw, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_holder_blocks_only_until_its_ttl() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    // What a crashed holder (or another library's holder) leaves behind: a key with a ttl.
    let ttl = Duration::from_millis(400);
    let set: Option<String> = redis::cmd("SET")
        .arg(lock_key("report"))
        .arg("someone-elses-token")
        .arg("NX")
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(set.as_deref(), Some("OK"));
    let started = Instant::now();
    assert!(
        c.lock("report").try_acquire().await.unwrap().is_none(),
        "a foreign holder excludes us"
    );
    let guard = c
        .lock("report")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= ttl - Duration::from_millis(50),
        "acquired before the foreign lease ran out: {waited:?}"
    );
    assert!(
        waited < ttl + Duration::from_millis(1500),
        "waited far past the ttl: {waited:?}"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_is_released_in_the_background() {
    let server = server();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a
        .lock("x")
        .with_ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    drop(guard);
    // Far sooner than the 30s ttl: the drop released it.
    let got = b
        .lock("x")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await
        .unwrap();
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_without_renewal_signals_lost_and_frees_the_lock() {
    let server = server();
    let a = client(&server).await;
    let b = client(&server).await;
    let ttl = Duration::from_millis(300);
    let guard = a
        .lock("y")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost signal fires at the deadline");
    assert!(
        started.elapsed() <= ttl,
        "the local deadline comes before the server's expiry"
    );
    assert!(guard.is_lost());
    let next = b
        .lock("y")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(3)))
        .acquire()
        .await
        .unwrap();
    assert!(next.fencing_token() > guard.fencing_token());
    assert!(matches!(
        guard.release().await,
        Err(fenced::Error::LeaseLost { .. })
    ));
    next.release().await.unwrap();
}
