//! Replica acknowledgements (`ClientBuilder::replica_acks`) on every write that must survive a
//! failover: with the only replica frozen and cut off, a handover does not happen and every
//! grant, fence raise and data write says `NotReplicated` instead of being relied on.
//!
//! A binary of its own: it installs a metrics recorder (global to the process) to see the
//! cache store that fell short, which its caller does not get as an error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fenced::optimistic::CasOutcome;
use fenced::resource::{FencedRead, FencedUpdate};
use fenced::{Client, Error, WaitPolicy};
use fenced_testkit::RedisSentinels;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tokio::time::Instant;

/// A master with one replica in sync (no sentinels: nothing fails over by itself).
fn master_and_replica() -> RedisSentinels {
    RedisSentinels::start(1, 0)
        .unwrap_or_else(|e| panic!("this test needs real redis-server processes: {e}"))
}

async fn acked(set: &mut RedisSentinels) -> Client {
    Client::builder(&set.node(0).url())
        .timeout(Duration::from_millis(800))
        .replica_acks(1, Duration::from_millis(100))
        .connect()
        .await
        .unwrap()
}

/// Freezes the replica and closes its link: from now on no write is acknowledged.
fn freeze_replica(set: &mut RedisSentinels) {
    set.node(1).pause().unwrap();
    set.cut_replicas(0).unwrap();
}

fn short(operation: &str, result: Result<impl std::fmt::Debug, Error>) {
    match result {
        Err(Error::NotReplicated {
            operation: op,
            acked: 0,
            needed: 1,
        }) if op == operation => {}
        other => panic!("{operation}: expected NotReplicated, got {other:?}"),
    }
}

/// Until `channel` has `n` subscribers on the master.
async fn subscribers(url: &str, channel: &str, n: u64) {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async(&mut conn)
            .await
            .unwrap();
        if counts.first().is_some_and(|(_, c)| *c >= n) {
            return;
        }
        assert!(Instant::now() < deadline, "nobody waits on {channel}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_never_hands_the_lock_to_a_waiter_without_the_replicas() {
    let mut set = master_and_replica();
    let url = set.node(0).url();
    let a = acked(&mut set).await;
    let held = a.lock("x").acquire().await.unwrap(); // acknowledged: the replica is up
    // The control's name has a fence already: its grant is one transaction, one `WAIT` (a
    // name's first grant also starts its fence, a second write that waits for the replica).
    a.lock("y")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let lock = a
            .lock("x")
            .with_wait(WaitPolicy::up_to(Duration::from_millis(1500)));
        async move { lock.acquire().await }
    });
    subscribers(&url, "fenced:{x}:released", 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await; // its busy attempt has returned
    freeze_replica(&mut set);
    // The control: a fresh grant falls short.
    let fresh = a
        .lock("y")
        .with_wait(WaitPolicy::up_to(Duration::from_millis(300)));
    short("acquire", fresh.acquire().await);
    held.release().await.unwrap();
    // A handover would give W the lock at once, in one script, with no WAIT: a failover now
    // would lose it while W believes it holds it. W's own grants fall short instead.
    short("acquire", waiter.await.unwrap());
    set.node(1).resume().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_that_must_survive_a_failover_reports_a_replica_shortfall() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this process");
    let mut set = master_and_replica();
    let c = acked(&mut set).await;
    // Everything set up while the replica acknowledges.
    let guard = c.lock("ledger").acquire().await.unwrap();
    let token = guard.fencing_token();
    let ledger = c.resource("ledger");
    assert!(ledger.set(token, "count", "20").await.is_ok());
    let cache = c.cache("menu");
    cache
        .get_or_compute("k", Duration::from_secs(60), |_| async {
            Ok::<_, Error>(Some(b"v".to_vec()))
        })
        .await
        .unwrap();
    assert!(c.latch("gate").arm(2).await.unwrap());
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let computing = tokio::spawn({
        let cache = c.cache("menu");
        async move {
            cache
                .get_or_compute("fresh", Duration::from_secs(60), |_| async move {
                    let _ = wait.await;
                    Ok::<_, Error>(Some(b"w".to_vec()))
                })
                .await
        }
    });
    let computes = |outcome: &str| -> u64 {
        snapshotter
            .snapshot()
            .into_vec()
            .iter()
            .filter(|(key, ..)| key.key().name() == "fenced.cache.computes")
            .filter(|(key, ..)| key.key().labels().any(|l| l.value() == outcome))
            .map(|(.., v)| match v {
                DebugValue::Counter(n) => *n,
                _ => 0,
            })
            .sum()
    };
    // The compute holds its lease (an acknowledged grant) before the replica goes.
    let deadline = Instant::now() + Duration::from_secs(5);
    while c
        .lock("menu:fresh")
        .status()
        .await
        .unwrap()
        .holder
        .is_none()
    {
        assert!(Instant::now() < deadline, "the compute never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let failed_before = computes("failed");

    freeze_replica(&mut set);
    // A fenced read raises the fence that refuses older holders: unacknowledged, a failover
    // could forget it and let an older holder's late write in.
    short("fenced read", ledger.read(token, "count").await);
    short("fenced read", ledger.update(token, "count", |_| None).await);
    short("fenced write", ledger.set(token, "count", "19").await);
    short("fenced write", ledger.claim(token).await);
    short("cache invalidate", cache.invalidate("k").await);
    short("latch count down", c.latch("gate").count_down().await);
    short("latch arm", c.latch("other").arm(1).await);
    short(
        "compare and set",
        c.compare_and_set("config", None, b"v1").await,
    );
    short("set max/min", c.set_max("high", 7).await);
    short(
        "decrement if at least",
        c.decrement_if_at_least("stock", 1).await,
    );
    // The cache store after the compute: its caller still gets the value, and the store
    // counts as failed (not as stored).
    go.send(()).unwrap();
    assert_eq!(
        computing.await.unwrap().unwrap().as_deref(),
        Some(&b"w"[..])
    );
    assert_eq!(computes("failed"), failed_before + 1);

    set.node(1).resume().unwrap();
    // With the replica back, the same calls go through.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ledger.read(token, "count").await {
            Ok(FencedRead::Current(_)) => break,
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("the replica is back: {other:?}"),
        }
    }
    assert!(matches!(
        ledger
            .update(token, "count", |_| Some(b"18".to_vec()))
            .await,
        Ok(FencedUpdate::Applied)
    ));
    assert_eq!(
        c.compare_and_set("config2", None, b"v1").await.unwrap(),
        CasOutcome::Swapped
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minimum_hold_ends_on_time_when_its_release_falls_short_of_the_replicas() {
    let mut set = master_and_replica();
    let c = acked(&mut set).await;
    let mut conn = redis::Client::open(set.node(0).url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let min = Duration::from_millis(1_500);
    let g = c.lock("job").with_min_hold(min).acquire().await.unwrap();
    let granted = Instant::now();
    freeze_replica(&mut set);
    // The master applies the expiry at the minimum hold's end; the caller hears the shortfall
    // of the operation it asked for.
    short("release", g.release().await);
    let gone = loop {
        let pttl: i64 = redis::cmd("PTTL")
            .arg("fenced:{job}")
            .query_async(&mut conn)
            .await
            .unwrap();
        if pttl == -2 {
            break granted.elapsed();
        }
        assert!(
            granted.elapsed() < min + Duration::from_secs(5),
            "the name is never freed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(gone >= min, "freed before the minimum hold: {gone:?}");
    assert!(
        gone <= min + Duration::from_millis(500),
        "freed {gone:?} after the grant, for a minimum hold of {min:?}"
    );
    set.node(1).resume().unwrap();
}

/// A minimum hold longer than the ttl, given back early with the only replica frozen: the
/// renewals and the hold's expiry change all fall short, and each name is still freed at its
/// minimum, within a round trip, whether its guard is released, dropped, or released after
/// its renewals began to fall short (each of which had pushed the key a ttl on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minimum_hold_under_a_replica_shortfall_frees_the_name_at_the_minimum() {
    let mut set = master_and_replica();
    let c = Client::builder(&set.node(0).url())
        .timeout(Duration::from_millis(800))
        .replica_acks(1, Duration::from_millis(50))
        .connect()
        .await
        .unwrap();
    let mut conn = redis::Client::open(set.node(0).url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (ttl, min) = (Duration::from_secs(2), Duration::from_secs(4));
    let hold = |name: &str| c.lock(name).with_ttl(ttl).with_min_hold(min);
    // Each minimum counts from its own grant.
    let released = hold("released").acquire().await.unwrap();
    let released_at = Instant::now();
    let dropped = hold("dropped").acquire().await.unwrap();
    let dropped_at = Instant::now();
    let late = hold("late").acquire().await.unwrap();
    let late_at = Instant::now();
    freeze_replica(&mut set);

    short("release", released.release().await);
    drop(dropped);
    // One renewal round trip at a time: a second one means the first has answered.
    let before = c.stats();
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.stats().batches < before.batches + 2 {
        assert!(Instant::now() < deadline, "no renewal was sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        c.stats().renewed,
        before.renewed,
        "a frozen replica acknowledged"
    );
    match late.release().await {
        // Past its deadline on a slow machine the lease is known lost: the expiry change is
        // then sent in the background. The minimum holds either way.
        Err(Error::NotReplicated { .. } | Error::LeaseLost { .. }) => {}
        other => panic!("late: expected a shortfall, got {other:?}"),
    }
    c.flush().await;

    let names = [
        ("released", released_at),
        ("dropped", dropped_at),
        ("late", late_at),
    ];
    let mut freed = [None; 3];
    let deadline = Instant::now() + min + Duration::from_secs(5);
    while freed.iter().any(Option::is_none) {
        for (i, (name, granted)) in names.iter().enumerate() {
            if freed[i].is_some() {
                continue;
            }
            let pttl: i64 = redis::cmd("PTTL")
                .arg(format!("fenced:{{{name}}}"))
                .query_async(&mut conn)
                .await
                .unwrap();
            if pttl == -2 {
                freed[i] = Some(granted.elapsed());
            }
        }
        assert!(Instant::now() < deadline, "never freed: {freed:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for ((name, _), gone) in names.iter().zip(freed) {
        let gone = gone.unwrap();
        assert!(
            gone >= min,
            "{name}: freed before the minimum hold: {gone:?}"
        );
        assert!(
            gone <= min + Duration::from_millis(300),
            "{name}: freed {gone:?} after the grant, for a minimum hold of {min:?}"
        );
    }
    set.node(1).resume().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_short_of_the_replicas_is_repeated_as_itself_once_they_are_back() {
    let mut set = master_and_replica();
    let (web, worker, dup) = (
        acked(&mut set).await,
        acked(&mut set).await,
        acked(&mut set).await,
    );
    let ticket = web
        .lock("order")
        .with_ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap()
        .into_ticket();
    freeze_replica(&mut set);
    short("take over", worker.resume(&ticket).await.map(|_| ()));
    set.node(1).resume().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let guard = loop {
        match worker.resume(&ticket).await {
            Ok(g) => break g,
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("the replica is back: {other:?}"),
        }
    };
    assert!(matches!(
        dup.resume(&ticket).await,
        Err(Error::NotHeld { .. })
    ));
    // An extend short of the replicas names itself too.
    freeze_replica(&mut set);
    short("extend", guard.extend(Duration::from_secs(20)).await);
    set.node(1).resume().unwrap();
    drop(guard);
    worker.flush().await;
}

/// Without scripts, each of the lock's writes is followed by `WAIT` on its own connection,
/// as a script is: with the replica frozen, a grant and an extend say `NotReplicated`, and
/// with it back they go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripts_grants_and_extends_wait_for_the_replicas() {
    let mut set = master_and_replica();
    let c = Client::builder(&set.node(0).url())
        .timeout(Duration::from_millis(800))
        .replica_acks(1, Duration::from_millis(100))
        .without_scripts()
        .connect()
        .await
        .unwrap();
    let guard = c
        .lock("ledger")
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    guard.extend(Duration::from_secs(20)).await.unwrap();
    freeze_replica(&mut set);
    short("acquire", c.lock("fresh").try_acquire().await);
    short("extend", guard.extend(Duration::from_secs(25)).await);
    set.node(1).resume().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.lock("after").try_acquire().await {
            Ok(Some(g)) => {
                g.release().await.unwrap();
                break;
            }
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("the replica is back: {other:?}"),
        }
    }
}
