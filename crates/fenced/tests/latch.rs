//! The countdown latch: waiters of several clients woken by the count down that opens it,
//! arming rules, expiry.

use std::time::Duration;

use fenced::{Client, Error, WaitPolicy};
use tokio::time::Instant;

use crate::support::{client, eventually, server};

/// A client that polls only every 20s: progress can only come from the opening message.
async fn notified_only(url: &str) -> Client {
    Client::builder(url)
        .poll_interval(Duration::from_secs(20), Duration::from_secs(20))
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_count_down_that_opens_the_latch_wakes_every_waiter_of_every_client() {
    let server = server();
    let url = server.url();
    let coordinator = client(&server).await;
    let latch = coordinator.latch("shards");
    assert!(latch.arm(3).await.unwrap());
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let other = notified_only(&url).await;
        for _ in 0..5 {
            let latch = other.latch("shards");
            waiters.push(tokio::spawn(async move { latch.wait().await }));
        }
    }
    // And waiters of the coordinator's own client (woken locally, not by the echo).
    for _ in 0..5 {
        let latch = latch.clone();
        waiters.push(tokio::spawn(async move { latch.wait().await }));
    }
    assert_eq!(latch.count_down().await.unwrap(), Some(2));
    assert_eq!(latch.count_down().await.unwrap(), Some(1));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "opened early");
    let opened = Instant::now();
    assert_eq!(latch.count_down().await.unwrap(), Some(0));
    for w in waiters {
        w.await.unwrap().unwrap();
    }
    let woken = opened.elapsed();
    assert!(
        woken < Duration::from_secs(5),
        "{woken:?}: not woken by the opening"
    );
    // Counting down an open latch leaves it open.
    assert_eq!(latch.count_down().await.unwrap(), Some(0));
}

#[tokio::test]
async fn arming_is_refused_while_counting_and_allowed_once_open_and_the_key_expires() {
    let server = server();
    let c = client(&server).await;
    let latch = c.latch("job").with_lifetime(Duration::from_millis(300));
    assert_eq!(latch.count().await.unwrap(), None);
    assert_eq!(
        latch.count_down().await.unwrap(),
        None,
        "no latch to count down"
    );
    latch.wait().await.unwrap(); // a latch that does not exist counts as open
    assert!(latch.arm(2).await.unwrap());
    assert!(!latch.arm(5).await.unwrap(), "armed and counting: refused");
    assert_eq!(latch.count().await.unwrap(), Some(2));
    let bounded = latch
        .clone()
        .with_wait(WaitPolicy::up_to(Duration::from_millis(100)));
    assert!(matches!(
        bounded.wait().await,
        Err(Error::NotAcquired { .. })
    ));
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    assert!(latch.arm(1).await.unwrap(), "open: may be armed again");
    // The key expires by its lifetime, open or not: nothing is left behind.
    assert!(
        eventually(Duration::from_secs(3), || async {
            latch.count().await.unwrap().is_none()
        })
        .await
    );
    assert!(matches!(latch.arm(0).await, Err(Error::InvalidArgument(_))));
    assert!(matches!(
        c.latch("x").with_lifetime(Duration::ZERO).arm(1).await,
        Err(Error::InvalidArgument(_))
    ));
}
