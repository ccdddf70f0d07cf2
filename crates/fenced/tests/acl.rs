//! The least-privilege ACL of a lock client, as documented in the README: with exactly these
//! permissions everything a lock does works (acquire, wait and be woken, renew, hand over,
//! release); with any one of them taken away, the error names what is missing.

use std::time::Duration;

use fenced::{Client, Error, WaitPolicy};

use crate::acl_family::user;
use crate::support::raw;

/// The commands a lock client needs, besides its key and channel patterns (README, "Least
/// privilege").
const LOCK_COMMANDS: [&str; 11] = [
    "evalsha",
    "script|load",
    "ping",
    "set",
    "get",
    "mget",
    "del",
    "pexpire",
    "pttl",
    "time",
    "publish",
];

/// For wake-up on release (`subscribe`, `unsubscribe`: without them waiters poll) and for the
/// one-round-trip handover to a waiter of the same client (`pubsub|numsub`, `llen`: without
/// them a release goes the ordinary way). Nothing fails without them; it is slower.
const SPEED_COMMANDS: [&str; 4] = ["subscribe", "unsubscribe", "pubsub|numsub", "llen"];

/// Everything a lock does, end to end: the first error, if any.
async fn exercise(url: &str, name: &str) -> Result<(), Error> {
    let c = Client::builder(url)
        .timeout(Duration::from_millis(500))
        .connect()
        .await?;
    let lock = c
        .lock(name)
        .with_ttl(Duration::from_millis(300))
        .with_wait(WaitPolicy::up_to(Duration::from_secs(3)));
    let g = lock.acquire().await?;
    // Renewal's script, called directly (the background renewal would only lose the lease).
    g.extend(Duration::from_millis(300)).await?;
    // A waiter of the same client (woken by a handover), and one of another client (woken
    // by the release's message).
    let other = Client::builder(url)
        .timeout(Duration::from_millis(500))
        .connect()
        .await?;
    let local = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await?.release().await }
    });
    let remote = tokio::spawn({
        let lock = other
            .lock(name)
            .with_wait(WaitPolicy::up_to(Duration::from_secs(3)));
        async move { lock.acquire().await?.release().await }
    });
    // Renewed past its ttl.
    tokio::time::sleep(Duration::from_millis(700)).await;
    g.lease().check()?;
    g.extend(Duration::from_millis(400)).await?;
    g.release().await?;
    local.await.expect("task")?;
    remote.await.expect("task")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_is_enough_and_each_permission_is_needed() {
    let server = crate::support::server();
    let all: Vec<&str> = LOCK_COMMANDS
        .iter()
        .chain(&SPEED_COMMANDS)
        .copied()
        .collect();
    let url = user(&server, "locker", &all).await;
    exercise(&url, "all").await.unwrap();
    // Without the commands that only make it faster: slower, still correct.
    let url = user(&server, "poller", &LOCK_COMMANDS).await;
    exercise(&url, "poller").await.unwrap();
    for (i, missing) in LOCK_COMMANDS.iter().enumerate() {
        let fewer: Vec<&str> = all.iter().copied().filter(|c| c != missing).collect();
        let url = user(&server, &format!("without{i}"), &fewer).await;
        // A fresh script cache, so that loading scripts is needed again.
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut raw(&server).await)
            .await
            .unwrap();
        match exercise(&url, missing).await {
            Err(Error::Permission { command, .. }) => assert_eq!(&command, missing),
            other => panic!("without {missing}: {other:?}"),
        }
    }
}

/// What a semaphore client needs besides the lock's connection basics (`evalsha`,
/// `script|load`, `ping`, `subscribe`, `unsubscribe`; README, "Least privilege").
const SEMAPHORE_COMMANDS: [&str; 16] = [
    "evalsha",
    "script|load",
    "ping",
    "time",
    "set",
    "get",
    "mget",
    "del",
    "publish",
    "zadd",
    "zrange",
    "zrangebyscore",
    "zremrangebyscore",
    "zscore",
    "zrem",
    "pexpireat",
];

/// The semaphore's hash commands, listed apart to keep each list readable.
const SEMAPHORE_HASH_COMMANDS: [&str; 4] = ["hset", "hdel", "hvals", "hget"];

/// Everything a semaphore does: take permits, renew them, give them back, and read status.
async fn exercise_semaphore(url: &str, name: &str) -> Result<(), Error> {
    let c = Client::builder(url)
        .timeout(Duration::from_millis(500))
        .connect()
        .await?;
    let pool = c.semaphore(name, 2).with_ttl(Duration::from_millis(300));
    let a = pool.acquire().await?;
    let b = pool.acquire_many(1).await?;
    // Renewal's script, called directly (the background renewal would only lose the lease).
    a.extend(Duration::from_millis(300)).await?;
    tokio::time::sleep(Duration::from_millis(500)).await; // renewed past its ttl
    a.lease().check()?;
    assert_eq!(pool.status().await?.held, 2);
    a.release().await?;
    b.release().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semaphores_acl_is_enough_and_each_permission_is_needed() {
    let server = crate::support::server();
    let all: Vec<&str> = SEMAPHORE_COMMANDS
        .iter()
        .chain(&SEMAPHORE_HASH_COMMANDS)
        .chain(&["subscribe", "unsubscribe"])
        .copied()
        .collect();
    let url = user(&server, "pool", &all).await;
    exercise_semaphore(&url, "all").await.unwrap();
    let needed: Vec<&str> = SEMAPHORE_COMMANDS
        .iter()
        .chain(&SEMAPHORE_HASH_COMMANDS)
        .copied()
        .collect();
    for (i, missing) in needed.iter().enumerate() {
        let fewer: Vec<&str> = all.iter().copied().filter(|c| c != missing).collect();
        let url = user(&server, &format!("pool{i}"), &fewer).await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut raw(&server).await)
            .await
            .unwrap();
        match exercise_semaphore(&url, missing).await {
            Err(Error::Permission { command, .. }) => assert_eq!(&command, missing),
            other => panic!("without {missing}: {other:?}"),
        }
    }
}
