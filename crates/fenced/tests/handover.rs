//! One-round-trip handover: a release gives a plain lock straight to the next waiter of the
//! same client, in one script, with a new fencing token and the waiter's own lease settings;
//! never while another client waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fenced::Client;
use tokio::time::Instant;

use crate::support::{calls, client, eventually, lock_key, raw, server};

async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    calls(conn, "evalsha").await + calls(conn, "eval").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_client_pass_the_lock_in_one_script_per_handoff() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let busy = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    const TASKS: usize = 4;
    const ROUNDS: usize = 50;
    let before = script_calls(&mut conn).await;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (lock, busy, tokens) = (c.lock("baton"), busy.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let g = lock.acquire().await.unwrap();
                assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                tokens.lock().unwrap().push(g.fencing_token());
                // Hold long enough for the others to queue and offer.
                tokio::time::sleep(Duration::from_millis(1)).await;
                busy.store(false, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let cycles = (TASKS * ROUNDS) as f64;
    let per_cycle = (script_calls(&mut conn).await - before) as f64 / cycles;
    let tokens = tokens.lock().unwrap().clone();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens increase in grant order"
    );
    eprintln!("{per_cycle:.2} scripts per lock cycle with {TASKS} local tasks");
    // Without handover a cycle is an acquire, a release, and the next head's busy attempt
    // (3 scripts); with it, most handoffs are one script, and the next head, knowing the lock
    // is held here, offers without trying.
    assert!(
        per_cycle < 1.6,
        "{per_cycle:.2} scripts per cycle: no handover"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handed_lease_has_the_waiters_ttl_and_is_renewed() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let holder = c
        .lock("settings")
        .with_ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiter = c.lock("settings").with_ttl(Duration::from_millis(600));
    let next = tokio::spawn(async move { waiter.acquire().await });
    // The waiter is the head and subscribed: one subscriber on the lock's channel.
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move {
                let (_, n): (String, u64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg("fenced:{settings}:released")
                    .query_async(&mut conn)
                    .await
                    .map(|v: Vec<(String, u64)>| v[0].clone())
                    .unwrap();
                n == 1
            }
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(50)).await; // its busy attempt has returned
    let first = holder.fencing_token();
    holder.release().await.unwrap();
    let g = next.await.unwrap().unwrap();
    assert!(g.fencing_token() > first);
    let pttl: i64 = redis::cmd("PTTL")
        .arg(lock_key("settings"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        pttl > 0 && pttl <= 600,
        "the waiter's ttl, not the holder's: {pttl}"
    );
    // Renewed like any lease: still ours after twice its ttl.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    g.lease().check().unwrap();
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handovers_stop_while_another_client_waits() {
    let server = server();
    let local = client(&server).await;
    let conn = raw(&server).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    // Two tasks: the queue empties and is made again at every turn, and the run of
    // handovers must be counted across queues all the same.
    for _ in 0..2 {
        let (lock, stop) = (local.lock("shared"), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let g = lock.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                g.release().await.unwrap();
            }
        }));
    }
    let mut stats = raw(&server).await;
    // Local contention alone: the lock goes from task to task by handover, with hardly a
    // release published (one ordinary release after every 16 handovers).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (p0, t0) = (calls(&mut stats, "publish").await, Instant::now());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let alone = (calls(&mut stats, "publish").await - p0) as f64 / t0.elapsed().as_secs_f64();
    // Another client contends too, acquiring and releasing in a loop, so one of its waiters
    // is subscribed nearly all the time: every release is then an ordinary one, published
    // for it to hear.
    let remote = Client::builder(&server.url()).connect().await.unwrap();
    let remote_done = Arc::new(AtomicBool::new(false));
    let remote_turns = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let wanted = {
        let (done, turns) = (remote_done.clone(), remote_turns.clone());
        tokio::spawn(async move {
            let lock = remote.lock("shared");
            while !done.load(Ordering::Relaxed) {
                let g = lock.acquire().await.unwrap();
                turns.fetch_add(1, Ordering::Relaxed);
                g.release().await.unwrap();
            }
        })
    };
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move {
                let v: Vec<(String, u64)> = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg("fenced:{shared}:released")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                v[0].1 == 2
            }
        })
        .await
    );
    let (p1, t1) = (calls(&mut stats, "publish").await, Instant::now());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let shared = (calls(&mut stats, "publish").await - p1) as f64 / t1.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    remote_done.store(true, Ordering::Relaxed);
    wanted.await.unwrap();
    // (A plain lock is not FIFO across processes, so how often the other client wins is not
    // the point here; the fair lock is FIFO.)
    let turns = remote_turns.load(Ordering::Relaxed);
    eprintln!(
        "releases published per second: {alone:.0} alone, {shared:.0} with another client contending ({turns} turns)"
    );
    assert!(
        shared > alone * 4.0 && shared > 50.0,
        "handovers went on while another client waited: {alone:.0}/s vs {shared:.0}/s"
    );
}
