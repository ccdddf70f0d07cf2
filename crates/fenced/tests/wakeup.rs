//! Waiters are woken by the release itself, not by polling; all waiters of one client share
//! one subscription and only one of them talks to Redis at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fenced::{Client, WaitPolicy};
use tokio::time::Instant;

use crate::support::{eventually, raw, server};

/// A client whose fallback poll is so slow (10s) that only a notification can explain a
/// prompt wake-up.
async fn slow_polling_client(url: &str) -> Client {
    Client::builder(url)
        .timeout(Duration::from_millis(500))
        .poll_interval(Duration::from_secs(10), Duration::from_secs(10))
        .connect()
        .await
        .unwrap()
}

async fn numsub(conn: &mut redis::aio::MultiplexedConnection, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .unwrap();
    reply.1
}

/// Waits (up to 5s) until `channel` has `n` subscribers.
async fn subscribers_become(
    conn: &redis::aio::MultiplexedConnection,
    channel: &str,
    n: i64,
) -> bool {
    eventually(Duration::from_secs(5), || {
        let mut conn = conn.clone();
        async move { numsub(&mut conn, channel).await == n }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_another_client_is_woken_by_the_release() {
    let server = server();
    let holder = slow_polling_client(&server.url()).await;
    let waiter = slow_polling_client(&server.url()).await;
    let conn = raw(&server).await;
    let guard = holder
        .lock("w")
        .with_ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let lock = waiter
        .lock("w")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(8)));
    let task = tokio::spawn(async move { lock.acquire().await });
    // Wait until the waiter has subscribed (the event that makes a notification possible).
    assert!(subscribers_become(&conn, "fenced:{w}:released", 1).await);
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let got = task.await.unwrap().unwrap();
    let handoff = released_at.elapsed();
    // Generous bound for a loaded machine, yet far below the 10s poll and 60s ttl.
    assert!(handoff < Duration::from_secs(2), "handoff took {handoff:?}");
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_in_one_client_share_one_subscription_and_all_get_the_lock() {
    let server = server();
    let c = slow_polling_client(&server.url()).await;
    let conn = raw(&server).await;
    let guard = c
        .lock("crowd")
        .with_ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let busy = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let lock = c
            .lock("crowd")
            .with_wait(WaitPolicy::up_to(Duration::from_secs(20)));
        let busy = busy.clone();
        tasks.push(tokio::spawn(async move {
            let g = lock.acquire().await.unwrap();
            assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
            tokio::task::yield_now().await;
            busy.store(false, Ordering::SeqCst);
            g.release().await.unwrap();
        }));
    }
    assert!(subscribers_become(&conn, "fenced:{crowd}:released", 1).await);
    // Every waiter is queued or subscribed; one subscription serves them all. (The first
    // grant tried a transaction on a connection of its own, closed since: wait for the
    // server to see it go.)
    let connections = || {
        let mut conn = conn.clone();
        async move {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut conn)
                .await
                .unwrap();
            clients.lines().count()
        }
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            connections().await <= 3
        })
        .await,
        "one command + one pub/sub connection per client (+ ours), got {}",
        connections().await
    );
    let started = Instant::now();
    guard.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    // 50 handoffs by local wake-up; with 10s polling this would take minutes.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    // The last waiter gone, the subscription goes too.
    assert!(subscribers_become(&conn, "fenced:{crowd}:released", 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_with_a_deadline_gives_up_with_how_long_it_waited() {
    let server = server();
    let c = crate::support::client(&server).await;
    // Held by another client: a wait for this task's own guard would be refused at once.
    let holder = crate::support::client(&server).await;
    let _held = holder.lock("busy").acquire().await.unwrap();
    let started = Instant::now();
    let err = c
        .lock("busy")
        .with_wait(WaitPolicy::up_to(Duration::from_millis(300)))
        .acquire()
        .await
        .unwrap_err();
    let took = started.elapsed();
    match err {
        fenced::Error::NotAcquired {
            waited, attempts, ..
        } => {
            assert!(
                waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
                "{waited:?}"
            );
            assert!(attempts >= 2);
        }
        other => panic!("{other:?}"),
    }
    assert!(took < Duration::from_secs(2));
    let err = c
        .lock("busy")
        .with_wait(WaitPolicy::FOREVER.with_max_attempts(3))
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(err, fenced::Error::NotAcquired { attempts: 3, .. }),
        "{err:?}"
    );
}
