//! One surface for every guard: each primitive's guard offers the same methods through
//! `LeaseGuard`, with the same meaning, and every primitive has a scoped run and a
//! `#[fenced::locked]` form.

use std::time::Duration;

use fenced::{Client, Error, FencedGuard, LeaseGuard};

use crate::support::{client, server};

/// Everything a guard offers, on any guard: the name, the token, the lease, the lost signal,
/// an extend that counts, and a release after which the lease is over.
async fn exercise<G: FencedGuard>(guard: G, name: &str) {
    assert_eq!(guard.name(), name);
    let token = guard.fencing_token();
    assert!(token.get() > 0);
    let lease = guard.lease();
    assert_eq!(lease.fencing_token(), token);
    assert!(!guard.is_lost());
    let before = guard.valid_until();
    tokio::time::sleep(Duration::from_millis(5)).await;
    guard.extend(Duration::from_secs(60)).await.unwrap();
    assert!(
        guard.valid_until() > before,
        "{name}: the extend did not count"
    );
    let lost = guard.lost();
    guard.release().await.unwrap();
    assert!(lease.is_lost(), "{name}: the lease outlived its release");
    assert!(matches!(lease.check(), Err(Error::LeaseEnded { .. })));
    tokio::time::timeout(Duration::from_secs(1), lost)
        .await
        .expect("the lost signal fires once the lease is over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guard_has_the_same_surface() {
    let server = server();
    let c = client(&server).await;
    exercise(c.lock("g-lock").acquire().await.unwrap(), "g-lock").await;
    exercise(c.reentrant_lock("g-re").acquire().await.unwrap(), "g-re").await;
    exercise(c.fair_lock("g-fair").acquire().await.unwrap(), "g-fair").await;
    exercise(c.rw_lock("g-rw").read().await.unwrap(), "g-rw").await;
    exercise(c.rw_lock("g-rw").write().await.unwrap(), "g-rw").await;
    exercise(c.semaphore("g-sem", 2).acquire().await.unwrap(), "g-sem").await;
    let multi = c.multi_lock(["g-b", "g-a"]).unwrap();
    exercise(multi.acquire().await.unwrap(), "g-a, g-b").await;
    for ttl in [
        c.lock("t").with_ttl(Duration::from_secs(7)).ttl(),
        c.fair_lock("t").with_ttl(Duration::from_secs(7)).ttl(),
        c.rw_lock("t").with_ttl(Duration::from_secs(7)).ttl(),
        c.reentrant_lock("t").with_ttl(Duration::from_secs(7)).ttl(),
        c.semaphore("t", 1).with_ttl(Duration::from_secs(7)).ttl(),
        multi.with_ttl(Duration::from_secs(7)).ttl(),
    ] {
        assert_eq!(ttl, Duration::from_secs(7));
    }
}

/// Waits for `guard`'s lease to run out (no renewal), then, with the server paused so that no
/// round trip could answer, expects `extend` and `release` to say `LeaseLost` at once.
async fn answers_at_once_when_lost<G: LeaseGuard>(
    guard: G,
    server: &mut fenced_testkit::RedisServer,
) {
    let name = guard.name().to_owned();
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("the lease runs out without renewal");
    server.pause().unwrap();
    let started = tokio::time::Instant::now();
    let extended = guard.extend(Duration::from_secs(5)).await;
    let released = guard.release().await;
    let took = started.elapsed();
    server.resume().unwrap();
    assert!(
        matches!(extended, Err(Error::LeaseLost { .. })),
        "{name}: {extended:?}"
    );
    assert!(
        matches!(released, Err(Error::LeaseLost { .. })),
        "{name}: {released:?}"
    );
    assert!(
        took < Duration::from_millis(100),
        "{name}: {took:?}: a round trip was tried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guard_whose_lease_is_lost_answers_at_once_without_redis() {
    let mut server = server();
    let c = client(&server).await;
    let ttl = Duration::from_millis(200);
    let g = c
        .lock("l")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    answers_at_once_when_lost(g, &mut server).await;
    let g = c
        .lock("u")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .unfenced()
        .acquire()
        .await
        .unwrap();
    answers_at_once_when_lost(g, &mut server).await;
    let g = c
        .reentrant_lock("r")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    answers_at_once_when_lost(g, &mut server).await;
    let g = c
        .fair_lock("f")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    answers_at_once_when_lost(g, &mut server).await;
    let g = c
        .rw_lock("rw")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .read()
        .await
        .unwrap();
    answers_at_once_when_lost(g, &mut server).await;
    let g = c
        .rw_lock("rw")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .write()
        .await
        .unwrap();
    answers_at_once_when_lost(g, &mut server).await;
    let g = c
        .semaphore("s", 2)
        .with_ttl(ttl)
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    answers_at_once_when_lost(g, &mut server).await;
    let multi = c
        .multi_lock(["m1", "m2"])
        .unwrap()
        .with_ttl(ttl)
        .with_auto_renew(false);
    answers_at_once_when_lost(multi.acquire().await.unwrap(), &mut server).await;
    // A re-entry through a lost hold is refused at once too.
    let g = c
        .reentrant_lock("r2")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(2), g.lost())
        .await
        .unwrap();
    assert!(matches!(g.reenter().await, Err(Error::LeaseLost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_has_a_scoped_run() {
    let server = server();
    let c = client(&server).await;
    let token = |lease: fenced::Lease| async move { lease.fencing_token() };
    let mut tokens = vec![
        c.lock("s").with_lock(token).await.unwrap(),
        c.reentrant_lock("s-re").with_lock(token).await.unwrap(),
        c.fair_lock("s-fair").with_lock(token).await.unwrap(),
        c.rw_lock("s-rw").with_read(token).await.unwrap(),
        c.rw_lock("s-rw").with_write(token).await.unwrap(),
        c.semaphore("s-sem", 3).with_permit(token).await.unwrap(),
    ];
    tokens.push(
        c.multi_lock(["s-1", "s-2"])
            .unwrap()
            .with_lock(token)
            .await
            .unwrap(),
    );
    assert!(tokens.iter().all(|t| t.get() > 0));
    // Released at the end of each: free again at once.
    assert!(c.lock("s").try_acquire().await.unwrap().is_some());
    assert!(c.rw_lock("s-rw").try_write().await.unwrap().is_some());
    // A lost lease cancels the work and says so, for any primitive.
    let url = server.url();
    let lost = c
        .semaphore("s-lost", 1)
        .with_ttl(Duration::from_millis(300))
        .with_permit(|lease| {
            async move {
                // Break it from outside: every holder's lease is dropped.
                let mut conn = redis::Client::open(url)
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap();
                let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
                lease.lost().await;
                std::future::pending::<()>().await;
            }
        })
        .await;
    assert!(matches!(lost, Err(Error::LeaseLost { .. })), "{lost:?}");
}

/// `#[fenced::locked]` on every kind (the `macros` feature).
#[cfg(feature = "macros")]
mod locked_kinds {
    use super::*;

    #[fenced::locked(client = client, name = "m-{id}", kind = "read")]
    async fn read_under(
        client: &Client,
        id: u32,
        #[lease] lease: fenced::Lease,
    ) -> fenced::Result<u64> {
        assert!(id > 0);
        Ok(lease.fencing_token().get())
    }

    #[fenced::locked(client = client, name = "m-w", kind = "write")]
    async fn write_under(client: &Client) -> fenced::Result<()> {
        Ok(())
    }

    #[fenced::locked(client = client, name = "m-fair", kind = "fair")]
    async fn fair_under(client: &Client) -> fenced::Result<()> {
        Ok(())
    }

    #[fenced::locked(client = client, name = "m-pool", permits = 2)]
    async fn permit_under(client: &Client) -> fenced::Result<()> {
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn locked_runs_under_every_kind() {
        let server = server();
        let c = client(&server).await;
        assert!(read_under(&c, 1).await.unwrap() > 0);
        write_under(&c).await.unwrap();
        fair_under(&c).await.unwrap();
        // Two permits: two at once; a third would wait.
        let (a, b) = tokio::join!(permit_under(&c), permit_under(&c));
        a.unwrap();
        b.unwrap();
        let status = c.semaphore("m-pool", 2).status().await.unwrap();
        assert_eq!(status.held, 0, "every permit came back");
    }
}

/// One policy type for every wait and retry loop: a bad backoff or attempt limit is refused
/// before anything is sent, for a lock as for a transaction.
#[tokio::test]
async fn one_wait_policy_is_checked_the_same_everywhere() {
    let server = server();
    let c = client(&server).await;
    let ms = Duration::from_millis;
    for bad in [
        fenced::WaitPolicy::FOREVER.with_backoff(Duration::ZERO, ms(5)),
        fenced::WaitPolicy::FOREVER.with_backoff(ms(10), ms(5)),
        fenced::WaitPolicy::up_to(ms(100)).with_max_attempts(0),
    ] {
        let lock = c.lock("policy").with_wait(bad).acquire().await;
        assert!(matches!(lock, Err(Error::InvalidArgument(_))), "{bad:?}");
        let tx: Result<(), Error> = c
            .transaction_with(&["k"], bad, |_tx| async { Ok(()) })
            .await;
        assert!(matches!(tx, Err(Error::InvalidArgument(_))), "{bad:?}");
    }
    // A waiter's own backoff polls: released without a notification (the key deleted behind
    // the client's back), the lock is found free within the backoff's bound, not the
    // client's slow poll interval.
    let c = Client::builder(&server.url())
        .poll_interval(Duration::from_secs(2), Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let held = c.lock("polled").acquire().await.unwrap();
    let waiter = c
        .lock("polled")
        .with_wait(fenced::WaitPolicy::up_to(Duration::from_secs(5)).with_backoff(ms(5), ms(20)));
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    tokio::time::sleep(ms(50)).await;
    let mut conn = crate::support::raw(&server).await;
    let _: () = redis::cmd("DEL")
        .arg("fenced:{polled}")
        .query_async(&mut conn)
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_millis(800), waiting)
        .await
        .expect("the waiter polled by its own backoff")
        .unwrap();
    got.unwrap().release().await.unwrap();
    drop(held);
}
