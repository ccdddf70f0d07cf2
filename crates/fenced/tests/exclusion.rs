//! Mutual exclusion under contention, checked with an interval log: no two critical sections
//! overlap, and fencing tokens increase strictly in grant order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::support::{client, server};

#[derive(Clone, Copy, Debug)]
struct Section {
    start: Instant,
    end: Instant,
    token: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_sixteen_tasks_never_overlap_and_tokens_increase() {
    let server = server();
    let clients = [client(&server).await, client(&server).await];
    let log = Arc::new(Mutex::new(Vec::<Section>::new()));
    let per_task = 70;
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..16 {
            let lock = client.lock("hot").with_ttl(Duration::from_secs(5));
            let log = log.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..per_task {
                    let guard = lock
                        .acquire()
                        .await
                        .unwrap_or_else(|e| panic!("client {c} task {t} round {i}: {e}"));
                    let start = Instant::now();
                    // Give a concurrent holder, if there were one, time to show up in the log.
                    tokio::task::yield_now().await;
                    let end = Instant::now();
                    log.lock().unwrap().push(Section {
                        start,
                        end,
                        token: guard.fencing_token().get(),
                    });
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut sections = log.lock().unwrap().clone();
    assert_eq!(sections.len(), 2 * 16 * per_task);
    sections.sort_by_key(|s| s.start);
    let mut overlaps = 0;
    let mut inversions = 0;
    for pair in sections.windows(2) {
        if pair[1].start < pair[0].end {
            overlaps += 1;
        }
        if pair[1].token <= pair[0].token {
            inversions += 1;
        }
    }
    assert_eq!(overlaps, 0, "critical sections overlapped");
    assert_eq!(
        inversions, 0,
        "fencing tokens did not increase in grant order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_never_waits_and_excludes() {
    let server = server();
    let a = client(&server).await;
    let b = client(&server).await;
    let held = a.lock("job").acquire().await.unwrap();
    let started = Instant::now();
    assert!(b.lock("job").try_acquire().await.unwrap().is_none());
    assert!(started.elapsed() < Duration::from_millis(500));
    // Granularity: another name is independent.
    let other = b
        .lock("job:2")
        .try_acquire()
        .await
        .unwrap()
        .expect("a different name is free");
    held.release().await.unwrap();
    other.release().await.unwrap();
    assert!(b.lock("job").try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn striped_locks_map_a_key_to_one_stripe_in_every_client_and_spread_keys_evenly() {
    let server = crate::support::server();
    let a = crate::support::client(&server).await;
    let b = crate::support::client(&server).await;
    let (sa, sb) = (
        a.striped_lock("items", 16).unwrap(),
        b.striped_lock("items", 16).unwrap(),
    );
    let held = sa.lock_for("item:42").acquire().await.unwrap();
    assert!(
        sb.lock_for("item:42")
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "the same key takes the same stripe in every client"
    );
    let other = (0..100)
        .map(|i| format!("item:{i}"))
        .find(|k| sb.stripe_of(k) != sa.stripe_of("item:42"))
        .unwrap();
    assert!(sb.lock_for(&other).try_acquire().await.unwrap().is_some());
    held.release().await.unwrap();
    let mut per_stripe = [0u32; 16];
    for i in 0..16_000 {
        per_stripe[sa.stripe_of(&format!("product:{i}")) as usize] += 1;
    }
    assert!(
        per_stripe.iter().all(|n| (800..1200).contains(n)),
        "{per_stripe:?}"
    );
    assert!(a.striped_lock("items", 0).is_err());
    // Every stripe gets the handle's settings, as a lock's own setters give them.
    let set = a
        .striped_lock("items", 16)
        .unwrap()
        .with_ttl(Duration::from_secs(7))
        .with_wait(fenced::WaitPolicy::up_to(Duration::from_secs(1)));
    assert_eq!(set.lock_for("product:1").ttl(), Duration::from_secs(7));
}
