//! The fair lock: FIFO grants across clients, a waiter that gives up leaves the queue at
//! once, a dead waiter's place lapses by server time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fenced::{Client, WaitPolicy};

use crate::support::{client, eventually, server};

#[tokio::test]
async fn waiters_of_different_clients_get_the_lock_in_the_order_they_asked() {
    let server = server();
    let holder = client(&server).await;
    let first = holder.fair_lock("fifo").acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..6 {
        // Every waiter has a client of its own, as if in its own process; they poll only every
        // 20 s, so each grant comes from the release that wakes the queue's head.
        let c = Client::builder(&server.url())
            .poll_interval(Duration::from_secs(20), Duration::from_secs(20))
            .connect()
            .await
            .unwrap();
        let lock = c.fair_lock("fifo");
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let g = lock.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            g.release().await.unwrap();
            drop(c);
        }));
        // Let this waiter take its place before the next one asks.
        let lock = holder.fair_lock("fifo");
        assert!(
            eventually(Duration::from_secs(5), || async {
                lock.queued().await.unwrap() == i + 1
            })
            .await,
            "waiter {i} never queued"
        );
    }
    first.release().await.unwrap();
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("a waiter was not woken in its turn")
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_queue_at_once() {
    let server = server();
    let c = client(&server).await;
    let lock = c.fair_lock("leave");
    // Held by another client: this task would be refused at once, without queueing.
    let holder = client(&server).await;
    let held = holder.fair_lock("leave").acquire().await.unwrap();
    let impatient = lock
        .clone()
        .with_wait(WaitPolicy::up_to(Duration::from_millis(200)));
    assert!(impatient.acquire().await.is_err());
    assert!(
        eventually(Duration::from_secs(2), || async {
            lock.queued().await.unwrap() == 0
        })
        .await,
        "the waiter that gave up still holds a place"
    );
    // A cancelled waiter leaves too.
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await }
    });
    assert!(
        eventually(Duration::from_secs(2), || async {
            lock.queued().await.unwrap() == 1
        })
        .await
    );
    waiting.abort();
    assert!(
        eventually(Duration::from_secs(2), || async {
            lock.queued().await.unwrap() == 0
        })
        .await
    );
    held.release().await.unwrap();
    assert!(
        lock.try_acquire().await.unwrap().is_some(),
        "nobody queued: a try gets it"
    );
}

#[tokio::test]
async fn a_dead_waiters_place_lapses_by_server_time() {
    let server = server();
    let c = client(&server).await;
    let lock = c
        .fair_lock("ghost")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)));
    // A waiter that queued and then died (its process is gone): at the head, registered for
    // 300 ms of server time.
    let mut conn = crate::support::raw(&server).await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let ends = secs * 1000 + micros / 1000 + 300;
    let _: () = redis::cmd("RPUSH")
        .arg("fenced:{ghost}:queue")
        .arg("ghost")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("fenced:{ghost}:queue:ends")
        .arg("ghost")
        .arg(ends)
        .query_async(&mut conn)
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let g = lock.acquire().await.unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_client_pass_the_fair_lock_in_one_script_per_handoff() {
    let server = server();
    let c = client(&server).await;
    let monitor = crate::support::Monitor::start(&server).await;
    let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    const TASKS: usize = 4;
    const ROUNDS: usize = 25;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (lock, busy, tokens) = (c.fair_lock("baton"), busy.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let g = lock.acquire().await.unwrap();
                assert!(
                    !busy.swap(true, std::sync::atomic::Ordering::SeqCst),
                    "two holders"
                );
                tokens.lock().unwrap().push(g.fencing_token());
                // Hold long enough for the others to queue and offer.
                tokio::time::sleep(Duration::from_millis(2)).await;
                busy.store(false, std::sync::atomic::Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("a task starved")
            .unwrap();
    }
    let calls = monitor.stop().await;
    let tokens = tokens.lock().unwrap().clone();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens rise in grant order"
    );
    // The hand-over script names the fair channels' prefix last (ARGV[6]); the release
    // script (2 keys) is what a release without a local head sends.
    let handovers = calls
        .iter()
        .filter(|c| c.len() == 14 && c[13] == "fenced:{baton}:fair:")
        .count();
    let releases = calls
        .iter()
        .filter(|c| c.len() == 7 && c[4] == "fenced:{baton}:queue")
        .count();
    eprintln!(
        "{handovers} hand-over calls, {releases} plain releases, {} grants",
        TASKS * ROUNDS
    );
    assert!(
        handovers >= TASKS * ROUNDS / 2,
        "{handovers} hand-overs in {} grants",
        TASKS * ROUNDS
    );
    assert_eq!(
        c.fair_lock("baton").queued().await.unwrap(),
        0,
        "nobody left queued"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_waiter_behind_another_clients_head_waits_its_turn() {
    let server = server();
    let here = client(&server).await;
    let there = client(&server).await;
    let held = here.fair_lock("turns").acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (who, c) in [("there", there.clone()), ("here", here.clone())] {
        let (lock, order) = (c.fair_lock("turns"), order.clone());
        waiters.push(tokio::spawn(async move {
            let g = lock.acquire().await.unwrap();
            order.lock().unwrap().push(who);
            tokio::time::sleep(Duration::from_millis(5)).await;
            g.release().await.unwrap();
        }));
        let queued = waiters.len() as u64;
        let lock = here.fair_lock("turns");
        assert!(
            eventually(Duration::from_secs(5), || async {
                lock.queued().await.unwrap() == queued
            })
            .await,
            "{who} never queued"
        );
    }
    // The holder's client has a waiter of its own, but the head is the other client's: the
    // release wakes that head rather than hand the lock to the local waiter.
    held.release().await.unwrap();
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("a waiter was not served")
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec!["there", "here"]);
}
