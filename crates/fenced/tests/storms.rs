//! Storms across processes for the family: two worker processes of many tasks each, thousands
//! of operations, checked from the resource's side (counters in Redis that only a holder
//! touches) and, for the fair lock, against the server's own order of events (`MONITOR`).
//! And a SIGKILLed holder of every kind of lease: the name comes back within its ttl.
//!
//! The workers are this test binary run again (the `worker` test, which does nothing unless
//! `FENCED_STORM` is set).

use std::sync::Arc;
use std::time::Duration;

use fenced::{Client, WaitPolicy};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::support::{Monitor, Worker, client, eventually, raw, server};

const TASKS: usize = 16;
const ROUNDS: usize = 20;

async fn incr(conn: &mut MultiplexedConnection, key: &str, by: i64) -> i64 {
    redis::cmd("INCRBY")
        .arg(key)
        .arg(by)
        .query_async(conn)
        .await
        .unwrap()
}

async fn get(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    let v: Option<i64> = redis::cmd("GET").arg(key).query_async(conn).await.unwrap();
    v.unwrap_or(0)
}

#[tokio::test]
async fn worker() {
    let Ok(mode) = std::env::var("FENCED_STORM") else {
        return; // an ordinary test run: nothing to do
    };
    let url = std::env::var("FENCED_URL").unwrap();
    // The queued waiter that gets killed has a short timeout, so its place lapses soon.
    let timeout = if mode == "queue" { 300 } else { 2_000 };
    let c = Client::builder(&url)
        .timeout(Duration::from_millis(timeout))
        .poll_interval(Duration::from_millis(50), Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    if let Some(kind) = mode.strip_prefix("hold:") {
        hold(&c, kind).await;
    }
    if mode == "queue" {
        // A fair waiter that queues behind the holder; the test SIGKILLs this process.
        let lock = c.fair_lock("line");
        tokio::spawn(async move { lock.acquire().await });
        let lock = c.fair_lock("line");
        while lock.queued().await.unwrap() == 0 {
            tokio::task::yield_now().await;
        }
        println!("queued");
        std::future::pending::<()>().await;
    }
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let (c, mut conn, mode) = (c.clone(), conn.clone(), mode.clone());
        tasks.push(tokio::spawn(async move {
            match mode.as_str() {
                "fair" => fair_task(&c, &mut conn).await,
                "rw" => rw_task(&c, &mut conn, i.is_multiple_of(4)).await,
                "multi" => multi_task(&c, &mut conn, i).await,
                "latch" => latch_task(&c, &mut conn, i).await,
                other => panic!("unknown storm {other}"),
            }
        }));
    }
    if mode == "latch" {
        println!("waiting");
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// One holder inside at a time: `inside` goes 0 -> 1 -> 0 around each hold.
async fn fair_task(c: &Client, conn: &mut MultiplexedConnection) {
    let lock = c.fair_lock("storm");
    for _ in 0..ROUNDS {
        let g = lock.acquire().await.unwrap();
        if incr(conn, "inside", 1).await != 1 {
            incr(conn, "violations", 1).await;
        }
        incr(conn, "inside", -1).await;
        g.release().await.unwrap();
        incr(conn, "done", 1).await;
    }
}

/// Readers add 1 to `state`, writers 1000: a reader that sees ≥ 1000, or a writer that sees
/// anything but 1000, is inside together with a writer.
async fn rw_task(c: &Client, conn: &mut MultiplexedConnection, writer: bool) {
    let rw = c.rw_lock("storm");
    for _ in 0..ROUNDS * 2 {
        if writer {
            let w = rw.write().await.unwrap();
            if incr(conn, "state", 1000).await != 1000 {
                incr(conn, "violations", 1).await;
            }
            incr(conn, "state", -1000).await;
            w.release().await.unwrap();
        } else {
            let r = rw.read().await.unwrap();
            if incr(conn, "state", 1).await >= 1000 {
                incr(conn, "violations", 1).await;
            }
            let readers = incr(conn, "state", -1).await + 1;
            let most = get(conn, "most_readers").await;
            if readers > most {
                let _: () = redis::cmd("SET")
                    .arg("most_readers")
                    .arg(readers)
                    .query_async(conn)
                    .await
                    .unwrap();
            }
            r.release().await.unwrap();
        }
        incr(conn, "done", 1).await;
    }
}

/// {a,b}, {b,a} and {a,b,c}: every name has at most one holder.
async fn multi_task(c: &Client, conn: &mut MultiplexedConnection, i: usize) {
    let names: &[&str] = match i % 3 {
        0 => &["a", "b"],
        1 => &["b", "a"],
        _ => &["a", "b", "c"],
    };
    let lock = c.multi_lock(names.iter().copied()).unwrap();
    for _ in 0..ROUNDS {
        let g = lock.acquire().await.unwrap();
        for name in names {
            if incr(conn, &format!("inside:{name}"), 1).await != 1 {
                incr(conn, "violations", 1).await;
            }
        }
        for name in names {
            incr(conn, &format!("inside:{name}"), -1).await;
        }
        g.release().await.unwrap();
        incr(conn, "done", 1).await;
    }
}

/// Half the tasks wait on the latch, half count it down once the test says `go`. A waiter
/// must find the count at 0 when it wakes; each count-down records what it left.
async fn latch_task(c: &Client, conn: &mut MultiplexedConnection, i: usize) {
    let latch = c
        .latch("gate")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(60)));
    if i.is_multiple_of(2) {
        latch.wait().await.unwrap();
        if latch.count().await.unwrap() != Some(0) {
            incr(conn, "violations", 1).await;
        }
        incr(conn, "woken", 1).await;
    } else {
        while get(conn, "go").await == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let left = latch.count_down().await.unwrap();
        let _: () = redis::cmd("RPUSH")
            .arg("left")
            .arg(left.map_or(-1, |n| n as i64))
            .query_async(conn)
            .await
            .unwrap();
    }
}

/// Takes one lease of `kind` with a 1 s ttl, says so, and waits to be killed.
async fn hold(c: &Client, kind: &str) -> ! {
    let ttl = Duration::from_secs(1);
    let name = format!("killed-{kind}");
    let guard: Box<dyn std::any::Any> = match kind {
        "lock" => Box::new(c.lock(&name).with_ttl(ttl).acquire().await.unwrap()),
        "reentrant" => Box::new(
            c.reentrant_lock(&name)
                .with_ttl(ttl)
                .acquire()
                .await
                .unwrap(),
        ),
        "fair" => Box::new(c.fair_lock(&name).with_ttl(ttl).acquire().await.unwrap()),
        "read" => Box::new(c.rw_lock(&name).with_ttl(ttl).read().await.unwrap()),
        "write" => Box::new(c.rw_lock(&name).with_ttl(ttl).write().await.unwrap()),
        "multi" => Box::new(
            c.multi_lock([name.clone(), format!("{name}-2")])
                .unwrap()
                .with_ttl(ttl)
                .acquire()
                .await
                .unwrap(),
        ),
        other => panic!("unknown lease kind {other}"),
    };
    println!("held");
    let _guard = guard;
    std::future::pending::<()>().await;
    unreachable!()
}

/// Runs two storm workers of `mode` and returns the shared counters' connection once both
/// have succeeded.
async fn storm(url: &str, mode: &str, ready: Option<&'static str>) -> Vec<Worker> {
    let env = [("FENCED_STORM", mode), ("FENCED_URL", url)];
    let mut workers = vec![
        Worker::spawn("storms::worker", &env),
        Worker::spawn("storms::worker", &env),
    ];
    if let Some(word) = ready {
        for w in &mut workers {
            assert!(w.said(word).await, "a worker did not start");
        }
    }
    workers
}

async fn finish(workers: &mut [Worker], limit: Duration) {
    let started = Instant::now();
    while workers.iter_mut().any(|w| w.finished().is_none()) {
        assert!(
            started.elapsed() < limit,
            "the workers did not finish in {limit:?}: a deadlock or a lost wake-up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for w in workers.iter_mut() {
        assert_eq!(w.finished(), Some(true), "a worker failed");
    }
}

#[tokio::test]
async fn fair_lock_grants_follow_the_servers_enqueue_order_across_two_processes() {
    let server = server();
    let mut conn = raw(&server).await;
    // Load the scripts first: an EVALSHA refused with NOSCRIPT shows in MONITOR like any
    // other call, and would look like an enqueue.
    let warm = client(&server).await.fair_lock("warm-up");
    warm.acquire().await.unwrap().release().await.unwrap();
    let monitor = Monitor::start(&server).await;
    let started = Instant::now();
    let mut workers = storm(&server.url(), "fair", None).await;
    finish(&mut workers, Duration::from_secs(90)).await;
    let took = started.elapsed();
    let calls = monitor.stop().await;
    let total = (2 * TASKS * ROUNDS) as i64;
    assert_eq!(get(&mut conn, "done").await, total);
    assert_eq!(get(&mut conn, "violations").await, 0, "two holders at once");
    // The fair acquire script: 5 keys, the second the queue; ARGV[4] is the waiter's id,
    // the same for every attempt of one acquire. A waiter's first call is its enqueue (or
    // its grant). Its grant is its last acquire, or a later handover naming it (the hand-over
    // script has the same keys; its ARGV[5] is the waiter's id and its ARGV[6] the fair
    // channels' prefix), since nothing gives up in this storm.
    let mut first = std::collections::HashMap::new();
    let mut last = std::collections::HashMap::new();
    for (at, call) in calls.iter().enumerate() {
        if call.len() != 14 || call[2] != "5" || call[4] != "fenced:{storm}:queue" {
            continue;
        }
        if call[13].ends_with(":fair:") {
            last.insert(call[12].clone(), at);
        } else {
            first.entry(call[11].clone()).or_insert(at);
            last.insert(call[11].clone(), at);
        }
    }
    assert_eq!(first.len() as i64, total, "one waiter id per acquisition");
    let mut by_enqueue: Vec<(usize, usize)> = first.iter().map(|(id, f)| (*f, last[id])).collect();
    by_enqueue.sort_unstable();
    let grants: Vec<usize> = by_enqueue.iter().map(|(_, l)| *l).collect();
    let inversions: usize = (0..grants.len())
        .map(|i| grants[i + 1..].iter().filter(|&&g| g < grants[i]).count())
        .sum();
    let attempts = calls
        .iter()
        .filter(|c| c.len() == 14 && c[4] == "fenced:{storm}:queue" && !c[13].ends_with(":fair:"))
        .count();
    eprintln!(
        "fair storm: {total} grants to {} tasks of 2 processes in {took:?}, {inversions} inversions, {:.2} attempts per grant",
        2 * TASKS,
        attempts as f64 / total as f64
    );
    assert_eq!(inversions, 0, "a grant overtook an earlier waiter");
}

#[tokio::test]
async fn rw_storm_never_mixes_a_writer_with_anyone() {
    let server = server();
    let mut conn = raw(&server).await;
    let mut workers = storm(&server.url(), "rw", None).await;
    finish(&mut workers, Duration::from_secs(90)).await;
    assert_eq!(
        get(&mut conn, "done").await,
        (2 * TASKS * ROUNDS * 2) as i64
    );
    assert_eq!(
        get(&mut conn, "violations").await,
        0,
        "a writer with others"
    );
    let most = get(&mut conn, "most_readers").await;
    eprintln!("rw storm: up to {most} readers at once");
    assert!(most > 1, "readers never shared the lock");
}

#[tokio::test]
async fn multi_lock_storm_of_opposite_orders_never_deadlocks_or_shares_a_name() {
    let server = server();
    let mut conn = raw(&server).await;
    let mut workers = storm(&server.url(), "multi", None).await;
    finish(&mut workers, Duration::from_secs(90)).await;
    assert_eq!(get(&mut conn, "done").await, (2 * TASKS * ROUNDS) as i64);
    assert_eq!(
        get(&mut conn, "violations").await,
        0,
        "a name with two holders"
    );
}

#[tokio::test]
async fn latch_opens_exactly_at_zero_for_every_waiter_of_two_processes() {
    let server = server();
    let mut conn = raw(&server).await;
    let counters = TASKS as u64; // half the tasks of each of the 2 workers
    let latch = client(&server).await.latch("gate");
    assert!(latch.arm(counters).await.unwrap());
    let mut workers = storm(&server.url(), "latch", Some("waiting")).await;
    incr(&mut conn, "go", 1).await;
    finish(&mut workers, Duration::from_secs(90)).await;
    assert_eq!(get(&mut conn, "violations").await, 0, "woken before 0");
    assert_eq!(
        get(&mut conn, "woken").await,
        TASKS as i64,
        "a waiter slept on"
    );
    let mut left: Vec<i64> = redis::cmd("LRANGE")
        .arg("left")
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    left.sort_unstable();
    let expected: Vec<i64> = (0..counters as i64).collect();
    assert_eq!(left, expected, "each count-down took exactly one count");
}

#[tokio::test]
async fn a_sigkilled_holder_of_every_lease_kind_gives_its_name_back_within_the_ttl() {
    let server = server();
    let url = server.url();
    let kinds = ["lock", "reentrant", "fair", "read", "write", "multi"];
    let mut holders = Vec::new();
    for kind in kinds {
        let mode = format!("hold:{kind}");
        let mut w = Worker::spawn(
            "storms::worker",
            &[("FENCED_STORM", &mode), ("FENCED_URL", &url)],
        );
        assert!(
            w.said("held").await,
            "the {kind} holder did not take its lease"
        );
        holders.push(w);
    }
    let c = Arc::new(client(&server).await);
    // Each name is taken, by the lease that conflicts with the dead holder's.
    let take = |kind: &'static str| {
        let c = c.clone();
        async move {
            let name = format!("killed-{kind}");
            let wait = WaitPolicy::up_to(Duration::from_secs(5));
            let got = match kind {
                "lock" => c.lock(&name).with_wait(wait).acquire().await.map(drop),
                "reentrant" => c.lock(&name).with_wait(wait).acquire().await.map(drop),
                "fair" => c.fair_lock(&name).with_wait(wait).acquire().await.map(drop),
                "read" => c.rw_lock(&name).with_wait(wait).write().await.map(drop),
                "write" => c.rw_lock(&name).with_wait(wait).read().await.map(drop),
                _ => c
                    .lock(format!("{name}-2"))
                    .with_wait(wait)
                    .acquire()
                    .await
                    .map(drop),
            };
            got.map_err(|e| format!("{kind}: {e}"))
        }
    };
    for kind in kinds {
        let name = format!("killed-{kind}");
        let blocked = match kind {
            "read" => c.rw_lock(&name).try_write().await.unwrap().is_none(),
            "write" => c.rw_lock(&name).try_read().await.unwrap().is_none(),
            "multi" => c
                .lock(format!("{name}-2"))
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            _ => c.lock(&name).try_acquire().await.unwrap().is_none(),
        };
        assert!(blocked, "{kind}: the holder's lease is not there");
    }
    for h in &mut holders {
        h.kill();
    }
    let killed = Instant::now();
    let results = futures_join(kinds.map(take)).await;
    let back = killed.elapsed();
    for r in results {
        r.unwrap();
    }
    eprintln!("every lease kind back {back:?} after SIGKILL (ttl 1s)");
    assert!(
        back < Duration::from_secs(2),
        "{back:?}: more than ttl + 1 s"
    );
}

/// Awaits all futures of an array concurrently, in order.
async fn futures_join<F>(futures: [F; 6]) -> Vec<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test]
async fn a_sigkilled_fair_waiter_leaves_the_queue_by_server_time_and_the_queue_goes_on() {
    let server = server();
    let url = server.url();
    let c = client(&server).await;
    let holder = c.fair_lock("line").acquire().await.unwrap();
    let mut dead = Worker::spawn(
        "storms::worker",
        &[("FENCED_STORM", "queue"), ("FENCED_URL", &url)],
    );
    assert!(dead.said("queued").await, "the waiter did not queue");
    // A live waiter behind the one about to die. The release wakes only the (dead) head, so
    // this one moves up at its next poll after the head's place lapsed.
    let behind = Client::builder(&url)
        .poll_interval(Duration::from_millis(50), Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let next = tokio::spawn(async move {
        behind
            .fair_lock("line")
            .with_wait(WaitPolicy::up_to(Duration::from_secs(10)))
            .acquire()
            .await
            .map(|g| g.fencing_token())
    });
    let line = c.fair_lock("line");
    assert!(
        eventually(Duration::from_secs(5), || async {
            line.queued().await.unwrap() == 2
        })
        .await,
        "the second waiter did not queue"
    );
    dead.kill();
    let killed = Instant::now();
    holder.release().await.unwrap();
    next.await.unwrap().unwrap();
    let waited = killed.elapsed();
    // The dead waiter's registration: 3 polls (200 ms) + 2 timeouts (300 ms) of the worker.
    eprintln!("the queue went on {waited:?} after its head was SIGKILLed");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}
