//! `Cache::get_or_compute`: one compute per miss across processes, fenced stores, negative
//! entries, jitter, early refresh, stale reads, failures and bad settings.
//!
//! The stampede workers are this test binary run again (the `worker` test, which does nothing
//! unless `FENCED_CACHE` is set).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fenced::{Client, Error, WaitPolicy};
use redis::aio::MultiplexedConnection;
use tokio::sync::oneshot;

use crate::support::{Worker, calls, client, eventually, raw, server};

const TTL: Duration = Duration::from_secs(60);

async fn incr(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("INCR").arg(key).query_async(conn).await.unwrap()
}

async fn get_i64(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    let v: Option<i64> = redis::cmd("GET").arg(key).query_async(conn).await.unwrap();
    v.unwrap_or(0)
}

/// 500 concurrent callers of one cold entry; each checks the value it gets. The compute
/// counts itself in Redis and holds until the test opens the `go` latch. The other process's
/// callers may come while it runs, or after its value is stored: either way they share a
/// flight or two.
#[tokio::test]
async fn worker() {
    let Ok(url) = std::env::var("FENCED_CACHE") else {
        return; // an ordinary test run: nothing to do
    };
    let c = Client::connect(&url).await.unwrap();
    let conn = raw_url(&url).await;
    let products = c.cache("product");
    let mut tasks = Vec::new();
    for _ in 0..500 {
        let (products, c, mut conn) = (products.clone(), c.clone(), conn.clone());
        tasks.push(tokio::spawn(async move {
            products
                .get_or_compute("1", TTL, |_lease| async move {
                    incr(&mut conn, "computes").await;
                    c.latch("go").wait().await?;
                    Ok::<_, Error>(Some(b"product 1".to_vec()))
                })
                .await
        }));
    }
    println!("started");
    let mut ok = 0;
    for t in tasks {
        assert_eq!(
            t.await.unwrap().unwrap().as_deref(),
            Some(&b"product 1"[..])
        );
        ok += 1;
    }
    println!("served {ok}");
}

async fn raw_url(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_thousand_callers_in_two_processes_compute_once() {
    let server = server();
    let url = server.url();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    assert!(c.latch("go").arm(1).await.unwrap());
    let mut workers = [
        Worker::spawn("cache::worker", &[("FENCED_CACHE", &url)]),
        Worker::spawn("cache::worker", &[("FENCED_CACHE", &url)]),
    ];
    for w in &mut workers {
        assert!(w.said("started").await, "a worker did not start");
    }
    // The compute has started in one process; the callers of both are waiting for it.
    assert!(
        eventually(Duration::from_secs(10), || {
            let mut conn = conn.clone();
            async move { get_i64(&mut conn, "computes").await == 1 }
        })
        .await
    );
    c.latch("go").count_down().await.unwrap();
    for w in &mut workers {
        assert!(
            w.said("served 500").await,
            "a worker's callers were not all served"
        );
        assert_eq!(w.finished_within(Duration::from_secs(10)).await, Some(true));
    }
    assert_eq!(
        get_i64(&mut conn, "computes").await,
        1,
        "computed more than once"
    );
    // Each process read Redis a handful of times, not once per caller.
    let reads = calls(&mut conn, "hmget").await;
    assert!(reads <= 8, "{reads} reads for 1000 callers");
}

/// A burst on a fresh entry: the first caller's read is sent before the others join, so they
/// cannot take its value (a call only takes a value vouched for after it started), but they
/// share the next read instead of queueing one read each.
#[tokio::test]
async fn a_burst_of_callers_on_a_fresh_entry_reads_redis_at_most_twice() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let cache = c.cache("hot");
    let computes = Arc::new(AtomicU32::new(0));
    cache
        .get_or_compute("k", TTL, |_| async { Ok::<_, Error>(Some(b"v".to_vec())) })
        .await
        .unwrap();
    let before = calls(&mut conn, "hmget").await;
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (cache, computes) = (cache.clone(), computes.clone());
        tasks.push(tokio::spawn(async move {
            cache
                .get_or_compute("k", TTL, |_| async move {
                    computes.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Error>(Some(b"x".to_vec()))
                })
                .await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().as_deref(), Some(&b"v"[..]));
    }
    assert_eq!(computes.load(Ordering::SeqCst), 0);
    let reads = calls(&mut conn, "hmget").await - before;
    assert!(reads <= 2, "{reads} reads for 200 callers of a fresh entry");
}

/// A caller whose compute starts (the lease's fencing token is returned once it has), then
/// holds until `finish` is sent, and computes `value`: a computer paused mid-compute.
async fn paused_compute(
    cache: &fenced::Cache,
    key: &'static str,
    value: &'static [u8],
) -> (
    tokio::task::JoinHandle<Result<Option<Vec<u8>>, Error>>,
    oneshot::Sender<()>,
    fenced::FencingToken,
) {
    let (started_tx, started) = oneshot::channel();
    let (finish, finish_rx) = oneshot::channel::<()>();
    let task = tokio::spawn({
        let cache = cache.clone();
        async move {
            cache
                .get_or_compute(key, TTL, |lease| async move {
                    started_tx.send(lease.fencing_token()).unwrap();
                    finish_rx.await.unwrap();
                    Ok::<_, Error>(Some(value.to_vec()))
                })
                .await
        }
    });
    let token = started.await.unwrap();
    (task, finish, token)
}

/// The cache `feed` (30 s stale grace, no jitter) with the entry `f` = "v1" stored with a ttl
/// of 200 ms and, once this returns, past that ttl on the server: stale, within its grace.
async fn stale_feed(c: &Client, server: &fenced_testkit::RedisServer) -> fenced::Cache {
    let cache = c
        .cache("feed")
        .with_stale_for(Duration::from_secs(30))
        .with_jitter(0.0);
    cache
        .get_or_compute("f", Duration::from_millis(200), |_| async {
            Ok::<_, Error>(Some(b"v1".to_vec()))
        })
        .await
        .unwrap();
    let conn = raw(server).await;
    assert!(
        eventually(Duration::from_secs(3), || {
            let mut conn = conn.clone();
            async move {
                let left: i64 = redis::cmd("PTTL")
                    .arg("fenced:{feed:f}:cached")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                left <= 30_000
            }
        })
        .await
    );
    cache
}

#[tokio::test]
async fn a_hit_does_not_compute_and_a_miss_computes_once_per_entry() {
    let server = server();
    let c = client(&server).await;
    let cache = c.cache("user");
    let runs = Arc::new(AtomicU32::new(0));
    let load = |id: &'static str| {
        let runs = runs.clone();
        move |_lease| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(Some(format!("user {id}").into_bytes()))
        }
    };
    for _ in 0..3 {
        assert_eq!(
            cache.get_or_compute("7", TTL, load("7")).await.unwrap(),
            Some(b"user 7".to_vec())
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    cache.get_or_compute("8", TTL, load("8")).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        cache.get("7").await.unwrap(),
        Some(Some(b"user 7".to_vec()))
    );
    assert_eq!(cache.get("9").await.unwrap(), None);
}

#[tokio::test]
async fn concurrent_callers_of_one_process_read_redis_once() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let cache = c.cache("hot");
    let (open, opened) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (cache, mut opened) = (cache.clone(), opened.clone());
        tasks.push(tokio::spawn(async move {
            cache
                .get_or_compute("k", TTL, |_lease| async move {
                    opened.wait_for(|o| *o).await.unwrap();
                    Ok::<_, Error>(Some(b"v".to_vec()))
                })
                .await
        }));
    }
    open.send_replace(true);
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), Some(b"v".to_vec()));
    }
    // The first caller read twice (before and after taking the lock); the others none.
    let reads = calls(&mut conn, "hmget").await;
    assert!(reads <= 3, "{reads} reads for 200 callers in one process");
}

#[tokio::test]
async fn a_stale_computer_cannot_overwrite_a_newer_value() {
    let server = server();
    let c = client(&server).await;
    let cache = c.cache("price");
    // A computes the old price and stalls (a pause) before returning it.
    let (a, finish, a_token) = paused_compute(&cache, "p", b"old").await;
    // Meanwhile its lock is broken, and B computes and stores the new price.
    c.lock("price:p").force_release().await.unwrap();
    let other = client(&server).await.cache("price");
    let b = other
        .get_or_compute("p", TTL, |lease| async move {
            assert!(lease.fencing_token() > a_token);
            Ok::<_, Error>(Some(b"new".to_vec()))
        })
        .await
        .unwrap();
    assert_eq!(b.as_deref(), Some(&b"new"[..]));
    // A wakes before its renewal noticed anything and tries to store "old": refused.
    finish.send(()).unwrap();
    assert_eq!(a.await.unwrap().unwrap().as_deref(), Some(&b"old"[..]));
    assert_eq!(cache.get("p").await.unwrap(), Some(Some(b"new".to_vec())));
}

#[tokio::test]
async fn an_invalidation_fences_off_a_compute_that_read_before_it() {
    let server = server();
    let c = client(&server).await;
    let cache = c.cache("stock");
    let (a, finish, _) = paused_compute(&cache, "s", b"20").await;
    // The source changed after the compute read it.
    assert!(!cache.invalidate("s").await.unwrap(), "nothing cached yet");
    finish.send(()).unwrap();
    assert_eq!(a.await.unwrap().unwrap().as_deref(), Some(&b"20"[..]));
    assert_eq!(
        cache.get("s").await.unwrap(),
        None,
        "the outdated value was stored"
    );
    let fresh = cache
        .get_or_compute("s", TTL, |_| async { Ok::<_, Error>(Some(b"19".to_vec())) })
        .await
        .unwrap();
    assert_eq!(fresh.as_deref(), Some(&b"19"[..]));
    assert!(cache.invalidate("s").await.unwrap());
    assert_eq!(cache.get("s").await.unwrap(), None);
}

#[tokio::test]
async fn a_missing_value_is_cached_for_the_negative_ttl() {
    let server = server();
    let c = client(&server).await;
    let cache = c
        .cache("user")
        .with_negative_ttl(Duration::from_millis(300))
        .with_jitter(0.0);
    let runs = Arc::new(AtomicU32::new(0));
    let lookup = || {
        let runs = runs.clone();
        move |_lease| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<Option<Vec<u8>>, Error>(None)
        }
    };
    for _ in 0..5 {
        assert_eq!(
            cache.get_or_compute("ghost", TTL, lookup()).await.unwrap(),
            None
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "penetration: the source was asked again"
    );
    assert_eq!(cache.get("ghost").await.unwrap(), Some(None));
    // Once the negative entry expires (on the server), the source is asked again.
    assert!(
        eventually(Duration::from_secs(3), || async {
            cache.get("ghost").await.unwrap().is_none()
        })
        .await
    );
    cache.get_or_compute("ghost", TTL, lookup()).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn entry_lifetimes_are_jittered_within_the_bound() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let cache = c.cache("j").with_jitter(0.5);
    let mut ttls = Vec::new();
    for i in 0..20 {
        let key = i.to_string();
        cache
            .get_or_compute(&key, Duration::from_secs(100), |_| async {
                Ok::<_, Error>(Some(b"x".to_vec()))
            })
            .await
            .unwrap();
        let pttl: i64 = redis::cmd("PTTL")
            .arg(format!("fenced:{{j:{key}}}:cached"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!((99_000..=150_000).contains(&pttl), "pttl {pttl}");
        ttls.push(pttl / 1000);
    }
    ttls.sort();
    ttls.dedup();
    assert!(
        ttls.len() >= 5,
        "20 entries expire in only {} distinct seconds",
        ttls.len()
    );
}

#[tokio::test]
async fn early_refresh_recomputes_before_expiry_one_caller_at_a_time() {
    let server = server();
    let c = client(&server).await;
    let runs = Arc::new(AtomicU32::new(0));
    let slow = || {
        let runs = runs.clone();
        move |_lease| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            // Work that takes a few ms: the compute time XFetch weighs.
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok::<_, Error>(Some(b"v".to_vec()))
        }
    };
    let plain = c.cache("x");
    plain.get_or_compute("k", TTL, slow()).await.unwrap();
    plain.get_or_compute("k", TTL, slow()).await.unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "no early refresh by default"
    );
    // With a huge beta every read is "close to expiry": each recomputes.
    let eager = c.cache("x").with_early_refresh(1e12);
    eager.get_or_compute("k", TTL, slow()).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // ... but only one at a time: while the lock is held elsewhere, the cached value is served.
    let held = c.lock("x:k").acquire().await.unwrap();
    assert_eq!(
        eager.get_or_compute("k", TTL, slow()).await.unwrap(),
        Some(b"v".to_vec())
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_stale_value_is_served_while_another_caller_recomputes() {
    let server = server();
    let c = client(&server).await;
    let cache = stale_feed(&c, &server).await;
    // Somebody is recomputing: we get the stale value at once.
    let recomputing = c.lock("feed:f").acquire().await.unwrap();
    let served = cache
        .get_or_compute("f", TTL, |_| async { Ok::<_, Error>(Some(b"v2".to_vec())) })
        .await
        .unwrap();
    assert_eq!(served.as_deref(), Some(&b"v1"[..]));
    recomputing.release().await.unwrap();
    // Nobody is: this caller recomputes.
    let served = cache
        .get_or_compute("f", TTL, |_| async { Ok::<_, Error>(Some(b"v2".to_vec())) })
        .await
        .unwrap();
    assert_eq!(served.as_deref(), Some(&b"v2"[..]));
    // A caller of a missing entry whose computer holds on waits, here past its deadline.
    let strict = c
        .cache("feed")
        .with_wait(WaitPolicy::up_to(Duration::from_millis(200)));
    let _held = c.lock("feed:g").acquire().await.unwrap();
    let waited = strict
        .get_or_compute("g", TTL, |_| async { Ok::<_, Error>(Some(b"x".to_vec())) })
        .await;
    assert!(
        matches!(waited, Err(Error::NotAcquired { .. })),
        "{waited:?}"
    );
}

#[derive(Debug)]
enum AppError {
    Source,
    Fenced(#[allow(dead_code)] Error),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Fenced(e)
    }
}

#[tokio::test]
async fn a_failed_compute_returns_its_error_and_the_next_caller_computes() {
    let server = server();
    let c = client(&server).await;
    let cache = c.cache("flaky");
    let failed = cache
        .get_or_compute("k", TTL, |_| async {
            Err::<Option<Vec<u8>>, _>(AppError::Source)
        })
        .await;
    assert!(matches!(failed, Err(AppError::Source)));
    // The lock was given back at once: the next caller does not wait for its ttl.
    let ok = tokio::time::timeout(
        Duration::from_secs(1),
        cache.get_or_compute("k", TTL, |_| async {
            Ok::<_, AppError>(Some(b"v".to_vec()))
        }),
    )
    .await
    .expect("the failed computer's lock was not released")
    .unwrap();
    assert_eq!(ok.as_deref(), Some(&b"v"[..]));
}

#[tokio::test]
async fn a_compute_whose_lease_is_lost_is_cancelled() {
    let server = server();
    let c = client(&server).await;
    let cache = c.cache("lost").with_lease_ttl(Duration::from_millis(300));
    let (started_tx, started) = oneshot::channel();
    let run = tokio::spawn({
        let cache = cache.clone();
        async move {
            cache
                .get_or_compute("k", TTL, |_| async move {
                    started_tx.send(()).unwrap();
                    std::future::pending::<()>().await;
                    Ok::<_, Error>(None)
                })
                .await
        }
    });
    started.await.unwrap();
    c.lock("lost:k").force_release().await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(3), run)
        .await
        .expect("the compute ran on after its lease was lost")
        .unwrap();
    assert!(matches!(out, Err(Error::LeaseLost { .. })), "{out:?}");
    assert_eq!(cache.get("k").await.unwrap(), None);
}

#[tokio::test]
async fn bad_keys_and_settings_are_refused_before_any_call() {
    let server = server();
    let c = client(&server).await;
    let compute = |_| async { Ok::<_, Error>(Some(b"v".to_vec())) };
    let invalid = |r: Result<Option<Vec<u8>>, Error>| matches!(r, Err(Error::InvalidArgument(_)));
    let cache = c.cache("c");
    assert!(invalid(cache.get_or_compute("", TTL, compute).await));
    assert!(invalid(cache.get_or_compute("{x}", TTL, compute).await));
    assert!(invalid(
        cache.get_or_compute(&"k".repeat(2000), TTL, compute).await
    ));
    assert!(invalid(
        cache.get_or_compute("k", Duration::ZERO, compute).await
    ));
    assert!(invalid(
        cache.get_or_compute("k", Duration::MAX, compute).await
    ));
    let bad = [
        c.cache("c").with_jitter(2.0),
        c.cache("c").with_jitter(f64::NAN),
        c.cache("c").with_early_refresh(-1.0),
        c.cache("c").with_early_refresh(f64::INFINITY),
        c.cache("c").with_negative_ttl(Duration::ZERO),
        c.cache("c").with_stale_for(Duration::MAX),
        c.cache("c").with_wait(WaitPolicy::up_to(Duration::MAX)),
        c.cache("").with_jitter(0.0),
    ];
    for cache in bad {
        assert!(
            invalid(cache.get_or_compute("k", TTL, compute).await),
            "{cache:?}"
        );
    }
    assert!(matches!(
        c.cache("c").invalidate("").await,
        Err(Error::InvalidArgument(_))
    ));
    // A cached entry that another program wrote in another type: a typed error, no panic.
    let mut conn = raw(&server).await;
    let _: () = redis::cmd("SET")
        .arg("fenced:{c:odd}:cached")
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let out = cache.get_or_compute("odd", TTL, compute).await;
    assert!(
        matches!(&out, Err(Error::WrongType { key, .. }) if key == "fenced:{c:odd}:cached"),
        "{out:?}"
    );
}

#[tokio::test]
async fn followers_get_the_cached_value_while_their_flight_refreshes_it() {
    let server = server();
    let c = client(&server).await;
    let cache = stale_feed(&c, &server).await;
    let (finish, finish_rx) = oneshot::channel::<()>();
    let finish_rx = Arc::new(tokio::sync::Mutex::new(Some(finish_rx)));
    let served = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (cache, finish_rx, served) = (cache.clone(), finish_rx.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let v = cache
                .get_or_compute("f", TTL, |_| async move {
                    // The one recompute holds until the test lets it go.
                    let rx = finish_rx.lock().await.take().unwrap();
                    rx.await.unwrap();
                    Ok::<_, Error>(Some(b"v2".to_vec()))
                })
                .await
                .unwrap();
            served.fetch_add(1, Ordering::SeqCst);
            v
        }));
    }
    // 19 callers are served the stale value while the 20th recomputes.
    assert!(
        eventually(Duration::from_secs(5), || async {
            served.load(Ordering::SeqCst) == 19
        })
        .await,
        "followers waited for the refresh"
    );
    finish.send(()).unwrap();
    let mut got: Vec<Vec<u8>> = Vec::new();
    for t in tasks {
        got.push(t.await.unwrap().unwrap());
    }
    assert_eq!(got.iter().filter(|v| v.as_slice() == b"v1").count(), 19);
    assert_eq!(got.iter().filter(|v| v.as_slice() == b"v2").count(), 1);
}

#[tokio::test]
async fn a_refused_value_is_not_shared_with_callers_who_came_after_the_invalidation() {
    let server = server();
    let c = client(&server).await;
    let cache = c.cache("stock");
    let (a, finish, _) = paused_compute(&cache, "s", b"20").await;
    cache.invalidate("s").await.unwrap();
    // B joins A's flight after the invalidation.
    let b = tokio::spawn({
        let cache = cache.clone();
        async move {
            cache
                .get_or_compute("s", TTL, |_| async { Ok::<_, Error>(Some(b"19".to_vec())) })
                .await
        }
    });
    tokio::task::yield_now().await;
    finish.send(()).unwrap();
    assert_eq!(a.await.unwrap().unwrap().as_deref(), Some(&b"20"[..]));
    assert_eq!(b.await.unwrap().unwrap().as_deref(), Some(&b"19"[..]));
}

#[tokio::test]
async fn a_failed_early_refresh_serves_the_cached_value() {
    let server = server();
    let c = client(&server).await;
    c.cache("x")
        .get_or_compute("k", TTL, |_| async {
            tokio::time::sleep(Duration::from_millis(2)).await;
            Ok::<_, Error>(Some(b"v".to_vec()))
        })
        .await
        .unwrap();
    let eager = c.cache("x").with_early_refresh(1e12);
    let served = eager
        .get_or_compute("k", TTL, |_| async {
            Err::<Option<Vec<u8>>, _>(AppError::Source)
        })
        .await
        .unwrap();
    assert_eq!(served.as_deref(), Some(&b"v"[..]));
}

#[tokio::test]
async fn the_store_wakes_callers_of_other_handles_in_the_same_process() {
    let server = server();
    // Polling so slow that only a wake-up can end the wait in time.
    let c = Client::builder(&server.url())
        .poll_interval(Duration::from_secs(10), Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    let (a, finish, _) = paused_compute(&c.cache("page"), "p", b"html").await;
    // Three other handles, each its own local flight. The release after the store wakes one
    // waiter; the store itself must wake them all.
    let mut others = Vec::new();
    for _ in 0..3 {
        let cache = c.cache("page");
        others.push(tokio::spawn(async move {
            cache
                .get_or_compute("p", TTL, |_| async {
                    Ok::<_, Error>(Some(b"again".to_vec()))
                })
                .await
        }));
    }
    // Each read, found the lock held, and waits on the channel.
    let conn = raw(&server).await;
    assert!(
        eventually(Duration::from_secs(5), || {
            let (mut conn, c) = (conn.clone(), c.clone());
            async move {
                calls(&mut conn, "hmget").await >= 4
                    && calls(&mut conn, "evalsha").await >= 4
                    && c.lock("page:p").status().await.unwrap().waiting_clients == 1
            }
        })
        .await
    );
    finish.send(()).unwrap();
    assert_eq!(a.await.unwrap().unwrap().as_deref(), Some(&b"html"[..]));
    for other in others {
        let got = tokio::time::timeout(Duration::from_secs(2), other)
            .await
            .expect("another handle's caller was not woken by the store")
            .unwrap()
            .unwrap();
        assert_eq!(got.as_deref(), Some(&b"html"[..]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_starts_after_an_invalidation_returned_never_gets_the_value_before_it() {
    let server = server();
    let proxy = fenced_testkit::Proxy::start(server.addr()).unwrap();
    let here = client(&server).await;
    let slow = Client::builder(&proxy.url())
        .timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap();
    let cache = slow.cache("menu");
    here.cache("menu")
        .get_or_compute("k", TTL, |_| async {
            Ok::<_, Error>(Some(b"old".to_vec()))
        })
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    let reads_before = calls(&mut conn, "hmget").await;
    // A flight starts: its read runs on the server now, its reply comes 600 ms later.
    proxy.set(fenced_testkit::Fault::DelayReplies(Duration::from_millis(
        600,
    )));
    let first = tokio::spawn({
        let cache = cache.clone();
        async move {
            cache
                .get_or_compute("k", TTL, |_| async { Ok::<_, Error>(Some(b"x".to_vec())) })
                .await
        }
    });
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move { calls(&mut conn, "hmget").await > reads_before }
        })
        .await,
        "the first read never ran"
    );
    // Another process invalidates, and it returns: Redis has no entry.
    assert!(here.cache("menu").invalidate("k").await.unwrap());
    // A call that starts now must not join the flight whose read predates the invalidation.
    let second = cache
        .get_or_compute("k", TTL, |_| async {
            Ok::<_, Error>(Some(b"new".to_vec()))
        })
        .await
        .unwrap();
    assert_eq!(second.as_deref(), Some(&b"new"[..]));
    // The first call started before the invalidation: the old value is fine for it.
    assert_eq!(first.await.unwrap().unwrap().as_deref(), Some(&b"old"[..]));
    proxy.set(fenced_testkit::Fault::Pass);
}
