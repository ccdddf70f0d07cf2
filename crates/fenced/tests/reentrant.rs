//! The reentrant lock: re-entry through guards and holder handles, the hold count kept in
//! Redis, refusal after loss, and exclusion of everybody else.

use std::time::Duration;

use fenced::{Error, WaitPolicy};

use crate::support::{client, eventually, lock_key, raw, server};

/// A small deterministic generator, so a failing path can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[tokio::test]
async fn the_lock_is_held_exactly_until_the_last_of_any_number_of_holds_is_released() {
    let server = server();
    let client = client(&server).await;
    let mut conn = raw(&server).await;
    let lock = client
        .reentrant_lock("depth")
        .with_ttl(Duration::from_secs(10));
    let outsider = client.lock("depth");
    for (seed, depth) in [(1u64, 1usize), (7, 2), (42, 13), (2026, 100)] {
        let mut rng = Rng(seed);
        let first = lock.acquire().await.unwrap();
        let token = first.fencing_token();
        let mut holds = vec![first];
        while holds.len() < depth {
            // Re-enter from a random hold, through its guard or through a handle in a task.
            let from = rng.below(holds.len());
            let next = if rng.below(2) == 0 {
                holds[from].reenter().await.unwrap()
            } else {
                let handle = holds[from].holder();
                let lock = lock.clone();
                tokio::spawn(async move { lock.reenter(&handle).await })
                    .await
                    .unwrap()
                    .unwrap()
            };
            assert_eq!(next.fencing_token(), token, "one token for the whole hold");
            holds.push(next);
        }
        let status = lock_status(&client, "depth").await;
        assert_eq!(status, depth as u64, "the hold count in Redis");
        // Release in a random order; the key lives until the last one.
        while !holds.is_empty() {
            assert!(
                outsider.try_acquire().await.unwrap().is_none(),
                "seed {seed}: still held"
            );
            let hold = holds.swap_remove(rng.below(holds.len()));
            hold.release().await.unwrap();
        }
        let exists: bool = redis::cmd("EXISTS")
            .arg(lock_key("depth"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            !exists,
            "seed {seed}: the lock key is gone after the last release"
        );
        let holds_left: bool = redis::cmd("EXISTS")
            .arg(format!("{}:holds", lock_key("depth")))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!holds_left);
    }
}

async fn lock_status(client: &fenced::Client, name: &str) -> u64 {
    client.lock(name).status().await.unwrap().holds
}

#[tokio::test]
async fn dropped_holds_are_given_back_in_the_background_and_free_the_lock_at_the_last() {
    let server = server();
    let client = client(&server).await;
    let lock = client.reentrant_lock("drops");
    let outer = lock.acquire().await.unwrap();
    let inner = outer.reenter().await.unwrap();
    drop(inner);
    client.flush().await;
    assert_eq!(lock_status(&client, "drops").await, 1);
    drop(outer);
    client.flush().await;
    assert!(client.lock("drops").try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn a_re_entry_after_the_lease_was_lost_is_refused() {
    let server = server();
    let client = client(&server).await;
    let lock = client
        .reentrant_lock("lost")
        .with_ttl(Duration::from_millis(300))
        .with_auto_renew(false);
    let guard = lock.acquire().await.unwrap();
    let handle = guard.holder();
    guard.lost().await;
    assert!(matches!(
        guard.reenter().await,
        Err(Error::LeaseLost { .. })
    ));
    // Redis agrees once the key has expired: a handle cannot take a free lock.
    let mut conn = raw(&server).await;
    assert!(
        eventually(Duration::from_secs(2), || {
            let mut conn = conn.clone();
            async move {
                !redis::cmd("EXISTS")
                    .arg(lock_key("lost"))
                    .query_async::<bool>(&mut conn)
                    .await
                    .unwrap()
            }
        })
        .await
    );
    assert!(matches!(
        lock.reenter(&handle).await,
        Err(Error::NotHeld { .. })
    ));
    let _: () = redis::cmd("PING").query_async(&mut conn).await.unwrap();
}

#[tokio::test]
async fn other_holders_wait_and_a_handle_works_only_for_its_own_lock() {
    let server = server();
    let a = client(&server).await;
    let b = client(&server).await;
    let held = a.reentrant_lock("shared").acquire().await.unwrap();
    let waiting = b
        .reentrant_lock("shared")
        .with_wait(WaitPolicy::up_to(Duration::from_millis(200)));
    assert!(matches!(
        waiting.acquire().await,
        Err(Error::NotAcquired { .. })
    ));
    assert!(
        b.lock("shared").try_acquire().await.unwrap().is_none(),
        "plain locks are excluded too"
    );
    // A handle for "shared" is refused on another lock, and a forged secret is refused.
    assert!(matches!(
        a.reentrant_lock("other").reenter(&held.holder()).await,
        Err(Error::InvalidArgument(_))
    ));
    let forged = b
        .reentrant_lock("shared")
        .holder_from_secret(&"ab".repeat(16))
        .unwrap();
    assert!(matches!(
        b.reentrant_lock("shared").reenter(&forged).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(
        b.reentrant_lock("shared")
            .holder_from_secret("not hex")
            .is_err()
    );
    // Across clients, the real secret re-enters (as a child process does).
    let secret = held.holder().secret().to_owned();
    let handle = b
        .reentrant_lock("shared")
        .holder_from_secret(&secret)
        .unwrap();
    let nested = b.reentrant_lock("shared").reenter(&handle).await.unwrap();
    assert_eq!(nested.fencing_token(), held.fencing_token());
    // The waiter is woken by the last release.
    let waiter = tokio::spawn({
        let lock = b
            .reentrant_lock("shared")
            .with_wait(WaitPolicy::up_to(Duration::from_secs(10)));
        async move { lock.acquire().await.map(|g| g.fencing_token()) }
    });
    let first_token = held.fencing_token();
    nested.release().await.unwrap();
    held.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(next > first_token);
}
