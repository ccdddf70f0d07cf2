//! The unfenced lease (`Lock::unfenced`): exclusion, renewal, the lost signal and wake-ups of
//! a lock, at the cost of a bare `SET NX PX` and a compare-and-delete: no fence, no `TIME`, no
//! script on the way in, and `DELIFEQ` where the server has it.

use std::time::Duration;

use fenced::{Error, FencingToken, WaitPolicy};
use tokio::time::Instant;

use crate::support::{calls, client, lock_key, on_backends, raw, server};

on_backends!(Single, Cluster, Redlock;
    /// Two holders never overlap, fenced or not: both take the same key.
    async fn unfenced_and_fenced_holders_of_one_name_exclude_each_other(c, _d) {
        let unfenced = c.lock("job").unfenced();
        let g = unfenced.try_acquire().await.unwrap().expect("free");
        assert!(unfenced.try_acquire().await.unwrap().is_none());
        assert!(c.lock("job").try_acquire().await.unwrap().is_none());
        g.release().await.unwrap();
        let fenced = c.lock("job").try_acquire().await.unwrap().expect("free again");
        assert!(unfenced.try_acquire().await.unwrap().is_none());
        fenced.release().await.unwrap();
        assert!(unfenced.try_acquire().await.unwrap().is_some());
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_is_set_nx_px_and_a_compare_and_delete_with_no_fence_and_no_time() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    // Warm up (loads the release script where it is used), then count one cycle.
    c.lock("warm")
        .unfenced()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let before = [
        calls(&mut conn, "set").await,
        calls(&mut conn, "time").await,
        calls(&mut conn, "evalsha").await,
        calls(&mut conn, "delifeq").await,
    ];
    let g = c.lock("cycle").unfenced().acquire().await.unwrap();
    g.release().await.unwrap();
    let after = [
        calls(&mut conn, "set").await,
        calls(&mut conn, "time").await,
        calls(&mut conn, "evalsha").await,
        calls(&mut conn, "delifeq").await,
    ];
    assert_eq!(after[0] - before[0], 1, "one SET NX PX");
    assert_eq!(after[1], before[1], "no TIME");
    // The release: DELIFEQ where the server has it (Valkey 9), else the script.
    let natively = after[3] - before[3];
    let scripted = after[2] - before[2];
    assert_eq!(natively + scripted, 1, "one compare-and-delete");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(keys.is_empty(), "no fence, nothing left behind: {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_is_renewed_signals_loss_and_wakes_waiters_like_a_lock() {
    let server = server();
    let c = client(&server).await;
    let other = client(&server).await;
    let ttl = Duration::from_millis(300);
    let lock = c.lock("renewed").with_ttl(ttl).unfenced();
    let g = lock.acquire().await.unwrap();
    // A waiter of another client, woken by the release's announcement.
    let waiter = tokio::spawn({
        let lock = other
            .lock("renewed")
            .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
            .unfenced();
        async move {
            let g = lock.acquire().await?;
            let at = Instant::now();
            g.release().await?;
            Ok::<_, Error>(at)
        }
    });
    // Held past three ttls: renewed.
    tokio::time::sleep(ttl * 3).await;
    assert!(!g.is_lost());
    let released = Instant::now();
    g.release().await.unwrap();
    let woken = waiter.await.unwrap().unwrap();
    assert!(
        woken.duration_since(released) < Duration::from_millis(250),
        "woken by the release, not by a poll: {:?}",
        woken.duration_since(released)
    );

    // The lost signal: the key is taken away behind the holder's back.
    let g = lock.acquire().await.unwrap();
    let lease = g.lease();
    assert_eq!(lease.fencing_token(), FencingToken::UNFENCED);
    let _: () = redis::cmd("DEL")
        .arg(lock_key("renewed"))
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    tokio::time::timeout(ttl * 4, lease.lost())
        .await
        .expect("the lost signal fires once a renewal is refused");
    assert!(matches!(
        g.release().await,
        Err(Error::NotHeld { .. } | Error::LeaseLost { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn its_token_is_refused_by_fenced_writes_and_with_lock_runs_the_work() {
    let server = server();
    let c = client(&server).await;
    let stock = c.resource("stock");
    let out = c
        .lock("sale")
        .unfenced()
        .with_lock(|lease| async move { stock.set(lease.fencing_token(), "n", "1").await })
        .await
        .unwrap();
    assert!(matches!(out, Err(Error::InvalidArgument(m)) if m.contains("unfenced")));
    assert_eq!(c.resource("stock").get("n").await.unwrap(), None);
}

/// On a server without `DELIFEQ`, the first release learns it and every release after goes
/// out as the script; on one with it, no script is loaded at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_use_delifeq_where_the_server_has_it_and_the_script_elsewhere() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let has_delifeq = {
        let probe: redis::RedisResult<i64> = redis::cmd("DELIFEQ")
            .arg("probe")
            .arg("x")
            .query_async(&mut conn)
            .await;
        probe.is_ok()
    };
    for _ in 0..3 {
        let g = c.lock("native").unfenced().acquire().await.unwrap();
        g.release().await.unwrap();
    }
    let (delifeq, evalsha) = (
        calls(&mut conn, "delifeq").await,
        calls(&mut conn, "evalsha").await,
    );
    if has_delifeq {
        assert_eq!(
            (delifeq, evalsha),
            (3 + 1, 0),
            "DELIFEQ for every release (and the probe)"
        );
    } else {
        // The first release tried DELIFEQ, was told the command is unknown, and sent the
        // script (loading it: one more EVALSHA, answered NOSCRIPT); the others went straight
        // to the script.
        assert!((3..=4).contains(&evalsha), "{evalsha} EVALSHA");
    }
}
