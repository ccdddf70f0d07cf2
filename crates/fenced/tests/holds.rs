//! Minimum and maximum holds (`with_min_hold`, `with_max_hold`): a release before the minimum
//! leaves the lease to expire at it; at the maximum the lease ends whatever its holder does.

use std::time::Duration;

use fenced::{Error, WaitPolicy};
use tokio::time::Instant;

use crate::support::{client, lock_key, raw, server};

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_before_the_minimum_hold_leaves_the_name_taken_until_it_ends() {
    let server = server();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = raw(&server).await;
    let min = Duration::from_millis(800);
    for (i, kind) in ["lock", "unfenced", "semaphore", "write"]
        .iter()
        .enumerate()
    {
        let name = format!("job-{i}");
        let granted = Instant::now();
        // Released at once, as a job that takes 0 ms.
        match *kind {
            "lock" => {
                a.lock(&name)
                    .with_min_hold(min)
                    .acquire()
                    .await
                    .unwrap()
                    .release()
                    .await
            }
            "unfenced" => {
                let lock = a.lock(&name).with_min_hold(min).unfenced();
                lock.acquire().await.unwrap().release().await
            }
            "semaphore" => {
                let sem = a.semaphore(&name, 1).with_min_hold(min);
                sem.acquire().await.unwrap().release().await
            }
            _ => {
                a.rw_lock(&name)
                    .with_min_hold(min)
                    .write()
                    .await
                    .unwrap()
                    .release()
                    .await
            }
        }
        .unwrap();
        // Another machine's run finds the name taken...
        let taken = match *kind {
            "lock" | "unfenced" => b.lock(&name).try_acquire().await.unwrap().is_none(),
            "semaphore" => b.semaphore(&name, 1).try_acquire().await.unwrap().is_none(),
            _ => b.rw_lock(&name).try_read().await.unwrap().is_none(),
        };
        assert!(
            taken,
            "{kind}: the name was free before the minimum hold ended"
        );
        // ... until the minimum hold ends, and not much longer.
        let waited = match *kind {
            "lock" | "unfenced" => b
                .lock(&name)
                .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
                .acquire()
                .await
                .map(|_| ()),
            "semaphore" => b
                .semaphore(&name, 1)
                .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
                .acquire()
                .await
                .map(|_| ()),
            _ => b
                .rw_lock(&name)
                .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
                .read()
                .await
                .map(|_| ()),
        };
        waited.unwrap();
        let after = granted.elapsed();
        assert!(after >= min, "{kind}: free after {after:?}");
        assert!(
            after < min + Duration::from_millis(1500),
            "{kind}: {after:?}"
        );
    }
    // Past the minimum, a release deletes as usual.
    let g = a
        .lock("late")
        .with_min_hold(Duration::from_millis(150))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    g.release().await.unwrap();
    assert_eq!(pttl(&mut conn, &lock_key("late")).await, -2, "deleted");
    // A dropped guard keeps the minimum too.
    drop(
        a.lock("dropped")
            .with_min_hold(min)
            .acquire()
            .await
            .unwrap(),
    );
    a.flush().await;
    let left = pttl(&mut conn, &lock_key("dropped")).await;
    assert!(
        left > 0 && left <= 800,
        "dropped before its minimum: pttl {left}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_maximum_hold_the_lease_ends_and_redis_frees_it_within_a_ttl() {
    let server = server();
    let (a, b) = (client(&server).await, client(&server).await);
    let (ttl, max) = (Duration::from_millis(300), Duration::from_millis(700));
    let g = a
        .lock("hung")
        .with_ttl(ttl)
        .with_max_hold(max)
        .acquire()
        .await
        .unwrap();
    let granted = Instant::now();
    // An extend never reaches past the maximum hold.
    g.extend(Duration::from_secs(30)).await.unwrap();
    let left: i64 = redis::cmd("PTTL")
        .arg(lock_key("hung"))
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    assert!(
        left <= max.as_millis() as i64,
        "extended past the maximum: pttl {left}"
    );
    // Renewed past its ttl meanwhile.
    tokio::time::sleep(ttl * 2).await;
    assert!(!g.is_lost());
    tokio::time::timeout(Duration::from_secs(2), g.lost())
        .await
        .expect("the lost signal fires at the maximum hold");
    let at = granted.elapsed();
    assert!(at <= max + Duration::from_millis(50), "lost after {at:?}");
    assert!(
        at >= max - Duration::from_millis(100),
        "lost early, after {at:?}"
    );
    // The holder hangs on to the guard: Redis frees the name within a ttl anyway.
    let next = b
        .lock("hung")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(3)))
        .acquire()
        .await
        .unwrap();
    assert!(granted.elapsed() < max + ttl + Duration::from_millis(300));
    assert!(matches!(g.release().await, Err(Error::LeaseLost { .. })));
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_out_of_range_are_refused_before_anything_is_sent() {
    let server = server();
    let c = client(&server).await;
    let lock = c
        .lock("bad")
        .with_min_hold(Duration::from_secs(2))
        .with_max_hold(Duration::from_secs(1));
    assert!(
        matches!(lock.try_acquire().await, Err(Error::InvalidArgument(m)) if m.contains("min_hold"))
    );
    let zero = c.lock("bad").with_max_hold(Duration::ZERO);
    assert!(matches!(
        zero.try_acquire().await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_their_cadence_up_to_the_maximum_hold() {
    let server = server();
    let c = client(&server).await;
    let (ttl, max) = (Duration::from_millis(300), Duration::from_millis(1_000));
    let before = c.stats().renewed;
    let g = c
        .lock("capped")
        .with_ttl(ttl)
        .with_max_hold(max)
        .acquire()
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("the lost signal fires at the maximum hold");
    let renewed = c.stats().renewed - before;
    // One renewal per third of a ttl, one that reaches the cap, and room for a loaded machine
    // renewing early; a spin near the cap makes hundreds.
    assert!(
        (2..=14).contains(&renewed),
        "{renewed} renewals in a {max:?} hold of a {ttl:?} lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minimum_hold_ends_on_time_when_its_release_outlives_a_server_pause() {
    let mut server = server();
    let c = fenced::Client::builder(&server.url())
        .timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    let min = Duration::from_millis(1_500);
    let g = c.lock("paused").with_min_hold(min).acquire().await.unwrap();
    let granted = Instant::now();
    server.pause().unwrap();
    // The release's first attempt and its retries queue up on the frozen server.
    let released = tokio::spawn(async move { g.release().await });
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    server.resume().unwrap();
    let _ = released.await.unwrap();
    let mut gone_at = None;
    while granted.elapsed() < min + Duration::from_secs(5) {
        if pttl(&mut conn, &lock_key("paused")).await == -2 {
            gone_at = Some(granted.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let gone = gone_at.expect("the name is freed");
    assert!(gone >= min, "freed before the minimum hold: {gone:?}");
    assert!(
        gone <= min + Duration::from_millis(500),
        "freed {gone:?} after the grant, for a minimum hold of {min:?}"
    );
}
