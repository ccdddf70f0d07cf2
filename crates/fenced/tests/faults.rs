//! Network faults through the test kit's proxy: a reply lost after the command ran, a
//! partition, a slow link. Things a paused or killed server cannot show.

use std::time::Duration;

use fenced::{Client, Error, WaitPolicy};
use fenced_testkit::{Fault, Proxy};
use tokio::time::Instant;

use crate::support::{calls, client, lock_key, raw, server};

async fn client_via(proxy: &Proxy) -> Client {
    Client::builder(&proxy.url())
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_is_lost_is_retried_and_reports_success() {
    let server = server();
    let proxy = Proxy::start(server.addr()).unwrap();
    let c = client_via(&proxy).await;
    let mut direct = raw(&server).await;
    let guard = c.lock("lost-reply").acquire().await.unwrap();
    // Redis runs the release, but its answer dies with the connection.
    proxy.set(Fault::CutNextReply);
    let result = guard.release().await;
    assert!(
        result.is_ok(),
        "the retry must recognise its own earlier release: {result:?}"
    );
    assert_eq!(proxy.fault(), Fault::Pass, "the fault struck");
    let exists: i64 = redis::cmd("EXISTS")
        .arg(lock_key("lost-reply"))
        .query_async(&mut direct)
        .await
        .unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_lease_ran_out_never_says_released() {
    let server = server();
    let proxy = Proxy::start(server.addr()).unwrap();
    let c = client_via(&proxy).await;
    let guard = c
        .lock("ran-out")
        .with_ttl(Duration::from_millis(200))
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    // The lease runs out; the release then answers "lost" at once, whatever happens to the
    // release it still sends in the background (here its reply is cut). Past the validity
    // deadline the client cannot prove it held the lock to the end: never a false
    // "released". (A retry that finds the key gone after the deadline is "not held":
    // `core/cleanup.rs`, `a_retry_that_finds_the_lease_gone_is_a_release_only_within_the_validity`.)
    guard.lost().await;
    proxy.set(Fault::CutNextReply);
    let result = guard.release().await;
    assert!(
        matches!(result, Err(fenced::Error::LeaseLost { .. })),
        "{result:?}"
    );
    c.flush().await;
    let exists: i64 = redis::cmd("EXISTS")
        .arg(crate::support::lock_key("ran-out"))
        .query_async(&mut crate::support::raw(&server).await)
        .await
        .unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_whose_reply_is_lost_leaves_no_orphaned_lock() {
    let server = server();
    let proxy = Proxy::start(server.addr()).unwrap();
    // No polls: the only call through the proxy at the release is the handover.
    let c = Client::builder(&proxy.url())
        .timeout(Duration::from_millis(500))
        .poll_interval(Duration::from_secs(20), Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    let mut direct = raw(&server).await;
    // Waits until a waiter of `c` is the head, subscribed, with its offer standing.
    let queued = |direct: &mut redis::aio::MultiplexedConnection| {
        let mut direct = direct.clone();
        async move {
            for _ in 0..500 {
                let v: Vec<(String, u64)> = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg("fenced:{baton}:released")
                    .query_async(&mut direct)
                    .await
                    .unwrap();
                if v[0].1 == 1 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the waiter never subscribed");
        }
    };
    // A first handover, without faults, loads the script (a NOSCRIPT reply is not the point).
    let holder = c.lock("baton").acquire().await.unwrap();
    let waiter = c.lock("baton");
    let next = tokio::spawn(async move { waiter.acquire().await });
    queued(&mut direct).await;
    holder.release().await.unwrap();
    let holder = next.await.unwrap().unwrap();
    // Again, and this time the handover runs in Redis but its answer dies with the
    // connection: the successor's lease is abandoned in the background, and the holder's
    // release, read as a retry, reports success.
    let waiter = c.lock("baton");
    let next = tokio::spawn(async move { waiter.acquire().await.map(|g| g.fencing_token()) });
    queued(&mut direct).await;
    let before = calls(&mut direct, "pubsub|numsub").await;
    proxy.set(Fault::CutNextReply);
    let first = holder.fencing_token();
    holder.release().await.unwrap();
    assert_eq!(proxy.fault(), Fault::Pass, "the fault struck");
    let after = calls(&mut direct, "pubsub|numsub").await;
    assert_eq!(
        after - before,
        1,
        "the handover script ran once (the reply it lost)"
    );
    // The waiter gets the lock on its own (its handover never reached it), with a newer token.
    let token = tokio::time::timeout(Duration::from_secs(10), next)
        .await
        .expect("the waiter was stranded")
        .unwrap()
        .unwrap();
    assert!(token > first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_is_lost_leaves_no_orphaned_lock() {
    let server = server();
    let proxy = Proxy::start(server.addr()).unwrap();
    let c = client_via(&proxy).await;
    let other = crate::support::client(&server).await;
    // The client has loaded the acquire's script, so the cut reply is the acquire's own.
    let warm = c.lock("warm").acquire().await.unwrap();
    warm.release().await.unwrap();
    proxy.set(Fault::CutNextReply);
    // The lease is taken in Redis, but the client never hears of it.
    assert!(
        c.lock("ghost")
            .with_ttl(Duration::from_secs(30))
            .try_acquire()
            .await
            .is_err()
    );
    assert_eq!(proxy.fault(), Fault::Pass, "the fault struck");
    // The abandoned attempt is released in the background, long before its 30s ttl.
    let got = other
        .lock("ghost")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await;
    assert!(got.is_ok(), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_times_out_calls_and_the_holder_hears_its_lease_is_lost() {
    let server = server();
    let proxy = Proxy::start(server.addr()).unwrap();
    let c = client_via(&proxy).await;
    let ttl = Duration::from_millis(900);
    let guard = c.lock("cut-off").with_ttl(ttl).acquire().await.unwrap();
    proxy.set(Fault::Blackhole);
    let partitioned_at = Instant::now();
    let started = Instant::now();
    let result = c.lock("other").try_acquire().await;
    assert!(matches!(result, Err(Error::Timeout { .. })), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    tokio::time::timeout(ttl * 2, guard.lost())
        .await
        .expect("lost at the validity deadline");
    assert!(partitioned_at.elapsed() <= ttl + ttl / 3 + Duration::from_millis(200));
    proxy.set(Fault::Pass);
    // Healed: the client works again (its connection may need a moment to come back).
    let ok = crate::support::eventually(Duration::from_secs(10), || async {
        matches!(c.lock("after").try_acquire().await, Ok(Some(_)))
    })
    .await;
    assert!(ok, "the client did not recover after the partition healed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_slow_link_the_validity_deadline_counts_from_before_the_request() {
    let server = server();
    let proxy = Proxy::start(server.addr()).unwrap();
    let c = client_via(&proxy).await;
    let delay = Duration::from_millis(150);
    proxy.set(Fault::DelayReplies(delay));
    let ttl = Duration::from_secs(2);
    let guard = c
        .lock("slow")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    // The reply spent `delay` on the way back; the lease started before it was sent.
    assert!(
        guard.lease().remaining() <= ttl - delay,
        "remaining {:?}",
        guard.lease().remaining()
    );
    proxy.set(Fault::Pass);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_whose_reply_is_lost_is_repeated_as_itself_and_never_twice() {
    let server = server();
    let proxy = Proxy::start(server.addr()).unwrap();
    let (web, dup) = (client(&server).await, client(&server).await);
    let worker = client_via(&proxy).await;
    let mut direct = raw(&server).await;
    let pttl = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            redis::cmd("PTTL")
                .arg(lock_key("order:8"))
                .query_async::<i64>(&mut conn)
                .await
                .unwrap()
        }
    };
    let taken = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            redis::cmd("KEYS")
                .arg(format!("{}:taken:*", lock_key("order:8")))
                .query_async::<Vec<String>>(&mut conn)
                .await
                .unwrap()
                .len()
        }
    };
    // The worker's client has loaded the take-over's script, so the cut reply is the
    // take-over's own.
    let warm = worker.lock("warm").acquire().await.unwrap();
    warm.extend(Duration::from_secs(5)).await.unwrap();
    warm.release().await.unwrap();
    let ticket = web
        .lock("order:8")
        .with_ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap()
        .into_ticket();
    // Redis runs the take-over; its answer dies with the connection.
    proxy.set(Fault::CutNextReply);
    let first = worker.resume(&ticket).await;
    assert!(matches!(&first, Err(e) if e.is_transient()), "{first:?}");
    assert_eq!(proxy.fault(), Fault::Pass, "the fault struck");
    assert_eq!(taken(&mut direct).await, 1, "the take-over ran");
    // A duplicate of the ticket elsewhere is refused; the worker's retry is the same take-over.
    assert!(matches!(
        dup.resume(&ticket).await,
        Err(Error::NotHeld { .. })
    ));
    let guard = worker
        .resume(&ticket)
        .await
        .expect("the retry repeats its own take-over");
    assert!(
        matches!(worker.resume(&ticket).await, Err(Error::NotHeld { .. })),
        "a granted take-over is never repeated"
    );
    guard.release().await.unwrap();
    assert_eq!(pttl(&mut direct).await, -2);

    // A worker that gives up hands on a retry ticket, which repeats the take-over anywhere,
    // once; the original ticket is refused from then on, even by the worker.
    let ticket = web
        .lock("order:8")
        .with_ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap()
        .into_ticket();
    proxy.set(Fault::CutNextReply);
    assert!(worker.resume(&ticket).await.is_err());
    // (The first lease's nonce key lives on, as its epoch key does, until its ttl.)
    assert_eq!(taken(&mut direct).await, 2, "the take-over ran");
    let retry = worker.retry_ticket(&ticket).expect("an unknown take-over");
    assert_eq!(worker.retry_ticket(&ticket), None, "handed out once");
    assert!(matches!(
        worker.resume(&ticket).await,
        Err(Error::NotHeld { .. })
    ));
    let guard = dup
        .resume(&retry)
        .await
        .expect("the retry ticket repeats it");
    assert!(matches!(
        web.resume(&retry).await,
        Err(Error::NotHeld { .. })
    ));
    guard.release().await.unwrap();
    assert_eq!(pttl(&mut direct).await, -2);
}
