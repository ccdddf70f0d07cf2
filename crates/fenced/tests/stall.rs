//! The shortest lease survives a busy machine: 200 leases of `MIN_TTL`,
//! held for 5 s while a CPU hog spins on every core, lose nothing.
//!
//! A test binary of its own, so the hog does not slow the other tests down (Cargo runs test
//! binaries one after another).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fenced::Client;
use fenced::limits::MIN_TTL;
use fenced_testkit::RedisServer;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minimum_ttl_leases_survive_a_cpu_hog_on_every_core() {
    let server = RedisServer::start().expect("this test needs a real redis-server");
    let client = Client::connect(&server.url()).await.unwrap();
    let mut guards = Vec::new();
    for i in 0..200 {
        let guard = client
            .lock(format!("stall-{i}"))
            .with_ttl(MIN_TTL)
            .acquire()
            .await
            .unwrap();
        guards.push(guard);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs: Vec<_> = (0..cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();

    let until = Instant::now() + Duration::from_secs(5);
    let mut lost = None;
    while Instant::now() < until && lost.is_none() {
        lost = guards.iter().position(|g| g.is_lost());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    let stats = client.stats();
    assert_eq!(lost, None, "a lease was lost under load: {stats:?}");
    assert_eq!(stats.lost, 0, "{stats:?}");
    assert!(stats.renewed >= 200 * 20, "{stats:?}");
    for g in guards {
        g.release().await.unwrap();
    }
}
