//! The multi-lock: all or nothing, no deadlock between opposite orders, one token above every
//! name's, loss of any name ends the lease, and a release of any name wakes the waiter.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fenced::{Client, Error, WaitPolicy};
use tokio::time::Instant;

use crate::support::{client, server};

#[tokio::test]
async fn all_or_nothing_with_one_token_above_every_names_own() {
    let server = server();
    let c = client(&server).await;
    let held_b = c.lock("b").acquire().await.unwrap();
    let ab = c.multi_lock(["b", "a", "a"]).unwrap();
    assert_eq!(ab.names(), ["a", "b"]);
    assert!(
        ab.try_acquire().await.unwrap().is_none(),
        "b is held: nothing taken"
    );
    assert!(
        c.lock("a").try_acquire().await.unwrap().is_some(),
        "a was left alone"
    );
    let b_token = held_b.fencing_token();
    held_b.release().await.unwrap();
    let a_alone = c.lock("a").acquire().await.unwrap();
    let a_token = a_alone.fencing_token();
    a_alone.release().await.unwrap();
    let both = ab.acquire().await.unwrap();
    assert!(both.fencing_token() > a_token && both.fencing_token() > b_token);
    assert!(c.lock("a").try_acquire().await.unwrap().is_none());
    assert!(c.lock("b").try_acquire().await.unwrap().is_none());
    let both_token = both.fencing_token();
    both.release().await.unwrap();
    let next_b = c.lock("b").acquire().await.unwrap();
    assert!(
        next_b.fencing_token() > both_token,
        "tokens keep increasing per name"
    );
    next_b.release().await.unwrap();
    assert!(matches!(
        c.multi_lock(Vec::<String>::new()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        c.multi_lock(["ok", "bad{"]),
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn opposite_orders_never_deadlock_and_never_overlap() {
    let server = server();
    let busy = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for order in [["x", "y"], ["y", "x"], ["x", "y"], ["y", "x"]] {
        let c = client(&server).await;
        let busy = busy.clone();
        tasks.push(tokio::spawn(async move {
            let both = c.multi_lock(order).unwrap();
            for _ in 0..50 {
                let g = both.acquire().await.unwrap();
                assert!(
                    !busy.swap(true, Ordering::SeqCst),
                    "two holders of {{x, y}}"
                );
                tokio::task::yield_now().await;
                busy.store(false, Ordering::SeqCst);
                g.release().await.unwrap();
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
        .expect("deadlock: the multi-locks did not finish");
}

#[tokio::test]
async fn losing_any_one_name_ends_the_whole_lease() {
    let server = server();
    let c = client(&server).await;
    let both = c
        .multi_lock(["p", "q"])
        .unwrap()
        .with_ttl(Duration::from_millis(300));
    let g = both.acquire().await.unwrap();
    c.lock("q").force_release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("the next renewal finds q gone: the lease is lost");
    assert!(matches!(
        g.extend(Duration::from_secs(1)).await,
        Err(Error::LeaseLost { .. } | Error::NotHeld { .. })
    ));
    // p is still ours in Redis until the release gives it back: known lost, the release
    // answers at once and gives p back in the background.
    assert!(matches!(g.release().await, Err(Error::LeaseLost { .. })));
    c.flush().await;
    assert!(c.lock("p").try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn a_release_of_any_name_wakes_the_waiter() {
    let server = server();
    let holder = client(&server).await;
    let waiter_client = Client::builder(&server.url())
        .poll_interval(Duration::from_secs(20), Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    let held = holder
        .lock("second")
        .with_ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        let both = waiter_client
            .multi_lock(["first", "second"])
            .unwrap()
            .with_wait(WaitPolicy::up_to(Duration::from_secs(15)));
        both.acquire().await.map(|g| g.names().len())
    });
    tokio::time::sleep(Duration::from_millis(200)).await; // the waiter subscribes and tries
    let released = Instant::now();
    held.release().await.unwrap();
    assert_eq!(waiting.await.unwrap().unwrap(), 2);
    let woken = released.elapsed();
    assert!(
        woken < Duration::from_secs(3),
        "{woken:?}: woken by a poll, not the release"
    );
}
