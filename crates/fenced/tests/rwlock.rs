//! The read-write lock: readers share, writers exclude, writers are preferred, a writer's
//! release wakes every reader, tokens order readers and writers, no upgrade deadlock.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use fenced::{Client, Error, WaitPolicy};
use tokio::time::Instant;

use crate::support::{client, server};

#[tokio::test]
async fn readers_share_writers_exclude_and_a_waiting_writer_goes_before_new_readers() {
    let server = server();
    let a = client(&server).await;
    let b = client(&server).await;
    let rw_a = a.rw_lock("doc");
    let rw_b = b.rw_lock("doc");
    let r1 = rw_a.read().await.unwrap();
    let r2 = rw_b.read().await.unwrap();
    assert!(r2.fencing_token() > r1.fencing_token());
    assert!(
        matches!(rw_b.try_write().await, Err(Error::WouldDeadlock(_))),
        "b reads: its write would wait for itself"
    );
    r2.release().await.unwrap();
    // A writer waits for r1; meanwhile new readers wait behind it.
    let writer = tokio::spawn({
        let rw = rw_b.clone();
        async move { rw.write().await.map(|w| (w.fencing_token(), w)) }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        rw_b.try_read().await.unwrap().is_none(),
        "a writer waits: readers queue behind it"
    );
    let reader_token = r1.fencing_token();
    r1.release().await.unwrap();
    let (writer_token, w) = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer got in once the reader left")
        .unwrap()
        .unwrap();
    assert!(
        writer_token > reader_token,
        "a writer's token is above every reader's before it"
    );
    assert!(
        a.lock("doc").try_acquire().await.unwrap().is_none(),
        "the writer holds the plain lock key"
    );
    w.release().await.unwrap();
    let after = rw_a.read().await.unwrap();
    assert!(
        after.fencing_token() > writer_token,
        "a reader's token proves it read after the writer"
    );
}

#[tokio::test]
async fn a_writers_release_wakes_every_waiting_reader_of_another_client() {
    let server = server();
    let a = client(&server).await;
    let b = Client::builder(&server.url())
        .poll_interval(Duration::from_secs(20), Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    let w = a.rw_lock("feed").write().await.unwrap();
    let mut readers = Vec::new();
    for _ in 0..5 {
        let rw = b
            .rw_lock("feed")
            .with_wait(WaitPolicy::up_to(Duration::from_secs(15)));
        readers.push(tokio::spawn(async move { rw.read().await }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    w.release().await.unwrap();
    let mut guards = Vec::new();
    for r in readers {
        guards.push(r.await.unwrap().unwrap());
    }
    let woken = released.elapsed();
    assert!(
        woken < Duration::from_secs(3),
        "{woken:?}: the readers were not woken by the release"
    );
}

#[tokio::test]
async fn a_dead_reader_blocks_writers_for_at_most_its_ttl() {
    let server = server();
    let c = client(&server).await;
    let dead = c
        .rw_lock("ttl")
        .with_ttl(Duration::from_millis(400))
        .with_auto_renew(false)
        .read()
        .await
        .unwrap();
    std::mem::forget(dead); // no release, no renewal: as if its process died
    let started = Instant::now();
    let other = client(&server).await;
    let w = other
        .rw_lock("ttl")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .write()
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(1_400),
        "{:?}",
        started.elapsed()
    );
    w.release().await.unwrap();
}

#[tokio::test]
async fn readers_and_writers_from_many_tasks_never_break_the_rules() {
    let server = server();
    // >0: that many readers inside; -1: a writer inside.
    let inside = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for t in 0..8 {
        let c = client(&server).await;
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let rw = c.rw_lock("rules");
            for _ in 0..25 {
                if t % 4 == 0 {
                    let w = rw.write().await.unwrap();
                    assert_eq!(
                        inside.compare_exchange(0, -1, Ordering::SeqCst, Ordering::SeqCst),
                        Ok(0),
                        "a writer with company"
                    );
                    tokio::task::yield_now().await;
                    inside.store(0, Ordering::SeqCst);
                    w.release().await.unwrap();
                } else {
                    let r = rw.read().await.unwrap();
                    assert!(
                        inside.fetch_add(1, Ordering::SeqCst) >= 0,
                        "a reader with a writer"
                    );
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    r.release().await.unwrap();
                }
            }
        }));
    }
    let all = async {
        for t in tasks {
            t.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("stalled");
    assert!(matches!(
        c_rw_bad(&server).await,
        Err(Error::InvalidArgument(_))
    ));
}

async fn c_rw_bad(server: &fenced_testkit::RedisServer) -> fenced::Result<fenced::ReadGuard> {
    client(server).await.rw_lock("").read().await
}

#[tokio::test]
async fn a_refused_try_write_does_not_hold_readers_back() {
    let server = server();
    let c = client(&server).await;
    let rw = c.rw_lock("try");
    let other = client(&server).await.rw_lock("try");
    let r = rw.read().await.unwrap();
    assert!(other.try_write().await.unwrap().is_none());
    assert!(
        other.try_read().await.unwrap().is_some(),
        "no writer waits: readers still enter"
    );
    r.release().await.unwrap();
}

/// Waits until `rw`'s status shows `writers` waiting writers, within 5 s.
async fn waiting_writers(rw: &fenced::RwLock, writers: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while rw.status().await.unwrap().waiting_writers != writers {
        assert!(Instant::now() < deadline, "never {writers} waiting writers");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How long until a new reader of another client gets in.
async fn until_a_reader_enters(rw: &fenced::RwLock) -> Duration {
    let t0 = Instant::now();
    loop {
        if let Some(r) = rw.try_read().await.unwrap() {
            r.release().await.unwrap();
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "readers still held back"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_stops_holding_readers_back_at_once() {
    let server = server();
    let holder = client(&server).await.rw_lock("shelf");
    let writers = client(&server).await;
    let readers = client(&server).await.rw_lock("shelf");
    let r = holder.read().await.unwrap();

    // Its wait runs out: it is gone by the time the error is seen.
    let give_up = writers
        .rw_lock("shelf")
        .with_wait(WaitPolicy::up_to(Duration::from_millis(200)));
    let waiting_reader = tokio::spawn({
        let readers = readers.clone();
        async move {
            // Queued behind the writer once it registers; woken when it leaves.
            waiting_writers(&readers, 1).await;
            let t0 = Instant::now();
            let g = readers.read().await.unwrap();
            g.release().await.unwrap();
            t0.elapsed()
        }
    });
    let r2 = give_up.write().await;
    assert!(matches!(r2, Err(Error::NotAcquired { .. })), "{r2:?}");
    let waited = until_a_reader_enters(&readers).await;
    assert!(
        waited < Duration::from_secs(1),
        "a new reader got in {waited:?} after the writer gave up"
    );
    let reader_waited = tokio::time::timeout(Duration::from_secs(5), waiting_reader)
        .await
        .unwrap()
        .unwrap();
    assert!(
        reader_waited < Duration::from_secs(2),
        "a waiting reader got in {reader_waited:?} after it queued"
    );
    assert_eq!(readers.status().await.unwrap().waiting_writers, 0);

    // Its future is dropped while it waits.
    let dropped = tokio::spawn({
        let rw = writers.rw_lock("shelf");
        async move { rw.write().await.map(|_| ()) }
    });
    waiting_writers(&readers, 1).await;
    dropped.abort();
    let _ = dropped.await;
    let waited = until_a_reader_enters(&readers).await;
    assert!(
        waited < Duration::from_secs(1),
        "a new reader got in {waited:?} after the writer's future was dropped"
    );
    r.release().await.unwrap();
}
