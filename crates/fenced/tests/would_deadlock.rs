//! A task that would wait for itself is told so at once (`Error::WouldDeadlock`): a lock it
//! holds asked for again, or more permits than its own leave. Other tasks of the client, and
//! leases that end by themselves, are waited for as before.

use std::time::Duration;

use fenced::{Error, FencingToken, WaitPolicy};
use tokio::time::Instant;

use crate::support::{client, server};

fn would_deadlock<T>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::WouldDeadlock(_)))
}

/// `waiter`, another task's acquire, waits while the holder of token `first` holds, and is
/// granted, with a later token, once `release` gives the lease back.
async fn granted_at_the_release(
    waiter: tokio::task::JoinHandle<Result<FencingToken, Error>>,
    first: FencingToken,
    release: impl Future<Output = Result<(), Error>>,
) {
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "another task waits for the holder");
    release.await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    assert!(next > first);
}

#[tokio::test]
async fn acquiring_a_lock_the_task_already_holds_fails_at_once_with_would_deadlock() {
    let server = server();
    let c = client(&server).await;
    let lock = c.lock("mine");
    let guard = lock.acquire().await.unwrap();
    let started = Instant::now();
    let again = lock.acquire().await;
    assert!(would_deadlock(&again), "{again:?}");
    // With a deadline too: it could only run out.
    let patient = lock
        .clone()
        .with_wait(WaitPolicy::up_to(Duration::from_secs(30)))
        .acquire()
        .await;
    assert!(would_deadlock(&patient), "{patient:?}");
    // Any lock of the name counts: a fair lock waits for the same key.
    let fair = c.fair_lock("mine").acquire().await;
    assert!(would_deadlock(&fair), "{fair:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once"
    );
    // A try never waits: it answers as before.
    assert!(lock.try_acquire().await.unwrap().is_none());

    // A spawned task is a caller of its own, and is refused the same way.
    let in_a_task = tokio::spawn({
        let c = c.clone();
        async move {
            let held = c.lock("theirs").acquire().await.unwrap();
            let again = c.lock("theirs").acquire().await.map(drop);
            held.release().await.unwrap();
            again
        }
    });
    let again = in_a_task.await.unwrap();
    assert!(would_deadlock(&again), "{again:?}");

    // Another task of the same client waits for the holder, and gets the lock at its release.
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await.map(|g| g.fencing_token()) }
    });
    let first = guard.fencing_token();
    granted_at_the_release(waiter, first, guard.release()).await;
    // Given back, the guard no longer counts.
    lock.acquire().await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn acquiring_a_fair_lock_the_task_already_holds_fails_at_once_without_queueing() {
    let server = server();
    let c = client(&server).await;
    let lock = c.fair_lock("turnstile");
    let guard = lock.acquire().await.unwrap();
    let again = lock.acquire().await;
    assert!(would_deadlock(&again), "{again:?}");
    assert_eq!(lock.queued().await.unwrap(), 0, "refused before it queued");
    // A plain lock of the name waits for the fair lock's key as well.
    let plain = c.lock("turnstile").acquire().await;
    assert!(would_deadlock(&plain), "{plain:?}");
    guard.release().await.unwrap();
    lock.acquire().await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn asking_for_more_permits_than_the_tasks_own_leave_fails_at_once_with_would_deadlock() {
    let server = server();
    let c = client(&server).await;
    let pool = c.semaphore("pool", 3);
    let two = pool.acquire_many(2).await.unwrap();
    // Two of three held by this task: one more fits.
    let third = pool.acquire().await.unwrap();
    // Every permit is this task's: one more would wait for itself.
    let fourth = pool.acquire().await;
    assert!(would_deadlock(&fourth), "{fourth:?}");
    third.release().await.unwrap();
    // One is free, but two are asked for and this task holds the other two.
    let more = pool.acquire_many(2).await;
    assert!(would_deadlock(&more), "{more:?}");
    // Another task of the same client waits for them instead, and gets them at the release.
    let waiter = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire_many(2).await.map(|p| p.permits()) }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "another task waits for the permits");
    two.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    assert_eq!(got, 2);
}

#[tokio::test]
async fn a_lease_of_the_task_that_ends_by_itself_is_waited_for_not_refused() {
    let server = server();
    let c = client(&server).await;
    let ttl = Duration::from_millis(300);
    let patient = WaitPolicy::up_to(Duration::from_secs(5));
    // Not renewed: it runs out within its ttl.
    let lapsing = c
        .lock("lapsing")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    let next = c
        .lock("lapsing")
        .with_wait(patient)
        .acquire()
        .await
        .unwrap();
    assert!(next.fencing_token() > lapsing.fencing_token());
    assert!(lapsing.is_lost());
    // Under a maximum hold: it ends there.
    let capped = c
        .lock("capped")
        .with_ttl(ttl)
        .with_max_hold(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    let next = c.lock("capped").with_wait(patient).acquire().await.unwrap();
    assert!(next.fencing_token() > capped.fencing_token());
    assert!(capped.is_lost());
}

#[tokio::test]
async fn a_guard_handed_to_another_task_still_counts_as_its_acquirers() {
    let server = server();
    let c = client(&server).await;
    let lock = c.lock("handed");
    let guard = lock.acquire().await.unwrap();
    let first = guard.fencing_token();
    let worker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        guard.release().await
    });
    // Nothing tells a guard moved away from one still kept: refused, as the rule says.
    let again = lock.acquire().await;
    assert!(would_deadlock(&again), "{again:?}");
    // To wait for the worker's release, wait from a task of its own.
    let next = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await.map(|g| g.fencing_token()) }
    });
    worker.await.unwrap().unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("woken by the worker's release")
        .unwrap()
        .unwrap();
    assert!(next > first);
}

/// The futures a `FuturesUnordered` runs (`buffer_unordered`, `for_each_concurrent`) each
/// have a waker of their own: they wait for each other's guards as before, within one task.
#[tokio::test]
async fn futures_run_at_once_by_one_task_wait_for_each_others_guards() {
    use futures_util::StreamExt;
    let server = server();
    let c = client(&server).await;
    let pool = c
        .semaphore("pool", 2)
        .with_wait(WaitPolicy::up_to(Duration::from_secs(20)));
    let lock = c
        .lock("one-by-one")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(20)));
    let done: Vec<Result<(), Error>> = futures_util::stream::iter(0..6)
        .map(|_| {
            let (pool, lock) = (pool.clone(), lock.clone());
            async move {
                let permit = pool.acquire().await?;
                let guard = lock.acquire().await?;
                tokio::task::yield_now().await;
                guard.release().await?;
                permit.release().await?;
                Ok(())
            }
        })
        .buffer_unordered(6)
        .collect()
        .await;
    assert!(done.iter().all(Result::is_ok), "{done:?}");
}

/// A writer's own task asking for the write or a read lease again, a re-entrant lock asked
/// for as a new holder, and an unfenced lock: each would wait for itself, and is told so.
#[tokio::test]
async fn every_lock_a_task_holds_is_refused_to_it_again_at_once() {
    let server = server();
    let c = client(&server).await;
    let rw = c.rw_lock("doc");
    let writing = rw.write().await.unwrap();
    let again = rw.write().await;
    assert!(would_deadlock(&again), "{again:?}");
    let read = rw.read().await;
    assert!(would_deadlock(&read), "{read:?}");
    writing.release().await.unwrap();
    let reading = rw.read().await.unwrap();
    reading.release().await.unwrap();

    let reentrant = c.reentrant_lock("nested");
    let held = reentrant.acquire().await.unwrap();
    let fresh = reentrant.acquire().await;
    assert!(would_deadlock(&fresh), "{fresh:?}");
    let inner = held.reenter().await.unwrap();
    inner.release().await.unwrap();
    held.release().await.unwrap();

    let unfenced = c.lock("plain").unfenced();
    let held = unfenced.acquire().await.unwrap();
    let again = unfenced.acquire().await;
    assert!(would_deadlock(&again), "{again:?}");
    held.release().await.unwrap();
    assert!(unfenced.acquire().await.is_ok());
}

#[tokio::test]
async fn a_multi_lock_over_a_name_the_task_holds_fails_at_once_and_others_wait_for_it() {
    let server = server();
    let c = client(&server).await;
    let started = Instant::now();
    // A plain lock held, then a multi-lock over it and another name.
    let plain = c.lock("b").acquire().await.unwrap();
    let both = c.multi_lock(["a", "b"]).unwrap();
    let at_once = Duration::from_secs(5);
    let over = tokio::time::timeout(at_once, both.acquire())
        .await
        .expect("refused, not waited for");
    assert!(would_deadlock(&over), "{over:?}");
    // Refused before anything was sent: the other name is not taken.
    let a = c.lock("a").try_acquire().await.unwrap().expect("a is free");
    a.release().await.unwrap();
    plain.release().await.unwrap();

    // A multi-lock held, then another that shares a name, and a plain lock of a name in it.
    let held = both.acquire().await.unwrap();
    let overlapping = tokio::time::timeout(at_once, c.multi_lock(["b", "c"]).unwrap().acquire())
        .await
        .expect("refused, not waited for");
    assert!(would_deadlock(&overlapping), "{overlapping:?}");
    let inside = c.lock("a").acquire().await;
    assert!(would_deadlock(&inside), "{inside:?}");
    // A disjoint one is granted.
    let apart = c.multi_lock(["c", "d"]).unwrap().acquire().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once"
    );
    // A try never waits: it answers as before.
    assert!(both.try_acquire().await.unwrap().is_none());

    // Another task waits for the holder, and gets the names at its release.
    let waiter = tokio::spawn({
        let both = both.clone();
        async move { both.acquire().await.map(|g| g.fencing_token()) }
    });
    let first = held.fencing_token();
    granted_at_the_release(waiter, first, held.release()).await;
    apart.release().await.unwrap();
}
