//! Automatic renewal keeps a long section's lease; the lost-lease signal fires when the lease
//! is taken away, or when Redis stops answering; a lease lost because renewal could not run
//! says so.

use std::time::Duration;

use fenced::{Error, LostCause};
use tokio::time::Instant;

use crate::support::{client, lock_key, raw, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_section_longer_than_five_ttls_keeps_its_lock() {
    let server = server();
    let a = client(&server).await;
    let b = client(&server).await;
    let ttl = Duration::from_millis(150);
    let guard = a.lock("long").with_ttl(ttl).acquire().await.unwrap();
    let until = Instant::now() + ttl * 6;
    while Instant::now() < until {
        assert!(
            b.lock("long").try_acquire().await.unwrap().is_none(),
            "lock was free during the section"
        );
        assert!(!guard.is_lost());
        tokio::time::sleep(ttl / 4).await;
    }
    let stats = a.stats();
    assert_eq!(stats.leases, 1);
    assert!(stats.batches >= 10 && stats.renewed >= 10, "{stats:?}");
    assert_eq!(stats.lost, 0);
    guard.release().await.expect("still ours after 6 ttls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_key_fires_the_lost_signal_within_one_renewal_period() {
    let server = server();
    let a = client(&server).await;
    let mut conn = raw(&server).await;
    let ttl = Duration::from_millis(600);
    let guard = a.lock("taken").with_ttl(ttl).acquire().await.unwrap();
    let token = guard.lease().cancellation_token();
    let _: i64 = redis::cmd("DEL")
        .arg(lock_key("taken"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let deleted_at = Instant::now();
    tokio::time::timeout(ttl, guard.lost())
        .await
        .expect("lost signal");
    let after = deleted_at.elapsed();
    assert!(
        after <= ttl / 3 + Duration::from_millis(150),
        "signal came {after:?} after the delete"
    );
    assert!(
        token.is_cancelled(),
        "the CancellationToken handed to the work fires too"
    );
    assert!(matches!(
        guard.release().await,
        Err(Error::LeaseLost { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_makes_the_lease_lost_at_its_deadline() {
    let mut server = server();
    let a = client(&server).await;
    let ttl = Duration::from_millis(600);
    let guard = a.lock("frozen").with_ttl(ttl).acquire().await.unwrap();
    server.pause().unwrap();
    let paused_at = Instant::now();
    let fired = tokio::time::timeout(ttl * 3, guard.lost()).await;
    let after = paused_at.elapsed();
    server.resume().unwrap();
    fired.expect("the lost signal fires even though Redis never answers");
    // Renewed at most one period before the pause, so valid at most one ttl after it.
    assert!(
        after <= ttl + ttl / 3 + Duration::from_millis(100),
        "signal came {after:?} after the pause"
    );
    assert!(guard.lease().check().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_cancels_the_work_when_the_lease_is_lost() {
    let server = server();
    let a = client(&server).await;
    let mut conn = raw(&server).await;
    let ttl = Duration::from_millis(300);
    let lock = a.lock("work").with_ttl(ttl);
    let result = lock
        .with_lock(|lease| async move {
            let _: i64 = redis::cmd("DEL")
                .arg(lock_key(lease.name()))
                .query_async(&mut conn)
                .await
                .unwrap();
            // Work that never finishes by itself: only the lost signal can stop it.
            std::future::pending::<()>().await;
            "finished"
        })
        .await;
    assert!(matches!(result, Err(Error::LeaseLost { .. })), "{result:?}");
    // And a normal run returns the work's own result.
    let out = lock
        .with_lock(|lease| async move { lease.fencing_token().get() > 0 })
        .await
        .unwrap();
    assert!(out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_extend_lengthens_the_lease_and_never_resurrects_it() {
    let server = server();
    let a = client(&server).await;
    let mut conn = raw(&server).await;
    let guard = a
        .lock("ext")
        .with_ttl(Duration::from_millis(500))
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    guard.extend(Duration::from_secs(20)).await.unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(lock_key("ext"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pttl > 10_000, "pttl {pttl}");
    assert!(guard.lease().remaining() > Duration::from_secs(10));
    let _: i64 = redis::cmd("DEL")
        .arg(lock_key("ext"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(matches!(
        guard.extend(Duration::from_secs(20)).await,
        Err(Error::NotHeld { .. })
    ));
    let exists: i64 = redis::cmd("EXISTS")
        .arg(lock_key("ext"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(exists, 0, "extend must not re-create a lost lease");
    assert!(guard.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_extend_shortens_the_lease_and_its_deadline() {
    let server = server();
    let a = client(&server).await;
    let guard = a
        .lock("shrink")
        .with_ttl(Duration::from_secs(30))
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    let short = Duration::from_millis(300);
    let extended_at = Instant::now();
    guard.extend(short).await.unwrap();
    assert!(
        guard.lease().remaining() <= short,
        "the deadline still counts on the old 30s lease"
    );
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost at the new, shorter deadline");
    assert!(extended_at.elapsed() < Duration::from_secs(1));
    assert!(matches!(
        guard.extend(Duration::from_secs(5)).await,
        Err(Error::LeaseLost { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_and_giving_back_leases_in_a_loop_does_not_wake_the_renewal_loop_each_time() {
    let server = server();
    let a = client(&server).await;
    let lock = a.lock("cycles");
    let cycles = 500;
    for _ in 0..cycles {
        let guard = lock
            .try_acquire()
            .await
            .unwrap()
            .expect("nobody else takes it");
        guard.release().await.unwrap();
    }
    // Each lease falls due long after the loop's next tick, so only the first one, taken
    // while the loop slept until told, had to wake it (a wake per lease was a hop to the
    // other worker thread, core/renew.rs invariant 4).
    let stats = a.stats();
    assert_eq!(stats.leases, 0);
    assert!(
        stats.woken < 10,
        "{} wake-ups for {cycles} leases",
        stats.woken
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_lease_lost_to_a_blocked_runtime_names_the_late_renewal() {
    let server = server();
    let a = client(&server).await;
    let ttl = Duration::from_millis(300);
    let checked = a.lock("blocked-1").with_ttl(ttl).acquire().await.unwrap();
    let watched = a.lock("blocked-2").with_ttl(ttl).acquire().await.unwrap();
    // Blocking work on the runtime's only thread: renewal cannot run meanwhile. Each renewal
    // was due about a third of a ttl after its grant.
    std::thread::sleep(ttl * 3);

    // The work finds it first, before renewal had a chance to run again.
    let err = checked.lease().check().unwrap_err();
    let Error::LeaseLost {
        cause: Some(LostCause::RenewalLate { late_by }),
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert!(*late_by > ttl * 2, "{late_by:?}");
    let message = err.to_string();
    assert!(
        message.contains("late") && message.contains("spawn_blocking"),
        "{message}"
    );
    assert!(matches!(
        checked.release().await,
        Err(Error::LeaseLost {
            cause: Some(LostCause::RenewalLate { .. }),
            ..
        })
    ));

    // The lost signal, fired by renewal once it runs again, names it too.
    tokio::time::timeout(ttl, watched.lost())
        .await
        .expect("lost signal");
    let cause = watched.lease().lost_cause();
    assert!(
        matches!(cause, Some(LostCause::RenewalLate { late_by }) if late_by > ttl * 2),
        "{cause:?}"
    );
}
