//! Faults across the family: a writer is not starved by a flood of readers, and with Redis
//! SIGSTOPped every primitive answers with a typed error within its bound instead of hanging.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fenced::{Error, WaitPolicy};
use tokio::time::Instant;

use crate::support::{client, server};

#[tokio::test]
async fn a_writer_is_not_starved_by_a_flood_of_32_readers() {
    let server = server();
    let stop = Arc::new(AtomicBool::new(false));
    let clients = [client(&server).await, client(&server).await];
    let mut readers = Vec::new();
    for i in 0..32 {
        let c = clients[i % 2].clone();
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let rw = c.rw_lock("flood");
            while !stop.load(Ordering::Relaxed) {
                let r = rw.read().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                r.release().await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await; // the flood is on
    let writer = client(&server).await.rw_lock("flood");
    let mut longest = Duration::ZERO;
    for _ in 0..10 {
        let asked = Instant::now();
        let w = writer.write().await.unwrap();
        longest = longest.max(asked.elapsed());
        w.release().await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
    // Readers hold 2 ms each; a writer waits for the reads in progress, not for the flood.
    assert!(
        longest < Duration::from_secs(1),
        "the writer waited {longest:?}"
    );
}

#[tokio::test]
async fn with_redis_paused_every_primitive_fails_typed_within_its_bound() {
    let mut server = server();
    let c = client(&server).await; // 500 ms per call
    let bounded = WaitPolicy::up_to(Duration::from_millis(800));
    let lock = c.lock("p").with_wait(bounded);
    let reentrant = c.reentrant_lock("p").with_wait(bounded);
    let fair = c.fair_lock("p").with_wait(bounded);
    let semaphore = c.semaphore("p", 2).with_wait(bounded);
    let rw = c.rw_lock("p").with_wait(bounded);
    let multi = c.multi_lock(["p", "q"]).unwrap().with_wait(bounded);
    let latch = c.latch("p").with_wait(bounded);
    server.pause().unwrap();
    let started = Instant::now();
    // All at once: each is bounded by its wait (800 ms) plus one call's timeout (500 ms).
    let (lock, reentrant, fair, semaphore, read, write, multi, arm, wait) = tokio::join!(
        lock.acquire(),
        reentrant.acquire(),
        fair.acquire(),
        semaphore.acquire(),
        rw.read(),
        rw.write(),
        multi.acquire(),
        latch.arm(1),
        latch.wait(),
    );
    let took = started.elapsed();
    server.resume().unwrap();
    let typed = |what: &str, r: Result<(), Error>| match r {
        Err(Error::Timeout { .. } | Error::Unavailable { .. } | Error::NotAcquired { .. }) => {}
        other => panic!("{what}: {other:?}"),
    };
    typed("lock", lock.map(drop));
    typed("reentrant", reentrant.map(drop));
    typed("fair", fair.map(drop));
    typed("semaphore", semaphore.map(drop));
    typed("read", read.map(drop));
    typed("write", write.map(drop));
    typed("multi", multi.map(drop));
    typed("latch arm", arm.map(drop));
    typed("latch wait", wait);
    assert!(took < Duration::from_secs(3), "{took:?}");
}
