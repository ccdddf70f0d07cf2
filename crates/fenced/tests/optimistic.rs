//! Optimistic concurrency: transactions that retry on conflict, and one-step atomic scripts,
//! on the usual scenarios (a contended counter, the seckill sale, keeping a maximum).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use fenced::optimistic::{CasOutcome, Stock, Versioned, VersionedWrite};
use fenced::{Client, Error, WaitPolicy};

use crate::support::{client, raw, server};

async fn set(conn: &mut redis::aio::MultiplexedConnection, key: &str, value: i64) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(conn)
        .await
        .unwrap();
}

async fn get(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<i64> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_conflict_is_retried_and_then_commits_or_gives_up() {
    let server = server();
    let c = client(&server).await;
    let mut other = raw(&server).await;
    set(&mut other, "n", 10).await;
    let runs = Arc::new(AtomicU32::new(0));
    let result: Result<i64, Error> = c
        .transaction(&["n"], |tx| {
            let mut other = other.clone();
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let n: i64 = tx.get("n").await?.unwrap_or(0);
                if tx.attempt() == 1 {
                    // Somebody else changes the watched key between WATCH and EXEC.
                    set(&mut other, "n", 100).await;
                }
                tx.set("n", n + 1);
                Ok(n + 1)
            }
        })
        .await;
    assert_eq!(result.unwrap(), 101, "the retry must read the new value");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(get(&mut other, "n").await, Some(101));

    // With one attempt allowed, the same conflict is a typed error, and nothing is written.
    let result: Result<(), Error> = c
        .transaction_with(&["n"], WaitPolicy::TRANSACTION.with_max_attempts(1), |tx| {
            let mut other = other.clone();
            async move {
                let n: i64 = tx.get("n").await?.unwrap_or(0);
                set(&mut other, "n", 7).await;
                tx.set("n", n + 1);
                Ok(())
            }
        })
        .await;
    assert!(
        matches!(result, Err(Error::Conflict { attempts: 1, .. })),
        "{result:?}"
    );
    assert_eq!(get(&mut other, "n").await, Some(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_may_write_nothing_or_abort_with_its_own_error() {
    #[derive(Debug)]
    enum ShopError {
        SoldOut,
        Fenced(#[allow(dead_code)] Error),
    }
    impl From<Error> for ShopError {
        fn from(e: Error) -> Self {
            ShopError::Fenced(e)
        }
    }
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    set(&mut conn, "stock", 0).await;
    let nothing: Result<&str, Error> = c
        .transaction(&["stock"], |_tx| async move { Ok("looked only") })
        .await;
    assert_eq!(nothing.unwrap(), "looked only");
    let aborted: Result<(), ShopError> = c
        .transaction(&["stock"], |tx| async move {
            let stock: i64 = tx.get("stock").await?.unwrap_or(0);
            if stock == 0 {
                return Err(ShopError::SoldOut);
            }
            tx.incr("stock", -1);
            Ok(())
        })
        .await;
    assert!(matches!(aborted, Err(ShopError::SoldOut)), "{aborted:?}");
    assert_eq!(get(&mut conn, "stock").await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_from_two_clients_add_up_exactly() {
    let server = server();
    let clients = [client(&server).await, client(&server).await];
    let (tasks_per_client, per_task) = (8, 25);
    let conflicts = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in &clients {
        for _ in 0..tasks_per_client {
            let c = c.clone();
            let conflicts = conflicts.clone();
            tasks.push(tokio::spawn(async move {
                let policy = WaitPolicy::TRANSACTION
                    .with_max_attempts(10_000)
                    .with_deadline(Some(Duration::from_secs(120)));
                for _ in 0..per_task {
                    let conflicts = conflicts.clone();
                    c.transaction_with(&["counter"], policy, |tx| {
                        let conflicts = conflicts.clone();
                        async move {
                            if tx.attempt() > 1 {
                                conflicts.fetch_add(1, Ordering::Relaxed);
                            }
                            let n: i64 = tx.get("counter").await?.unwrap_or(0);
                            tx.set("counter", n + 1);
                            Ok::<_, Error>(())
                        }
                    })
                    .await
                    .unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut conn = raw(&server).await;
    let expected = (2 * tasks_per_client * per_task) as i64;
    assert_eq!(get(&mut conn, "counter").await, Some(expected));
    eprintln!(
        "{expected} increments by transaction, {} conflicts retried",
        conflicts.load(Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_transaction_leaves_no_watch_behind() {
    let server = server();
    let c = Client::builder(&server.url())
        .transaction_connections(1)
        .connect()
        .await
        .unwrap();
    let mut other = raw(&server).await;
    // A transaction that WATCHes "a" and is dropped in the middle of its step.
    let stuck = c.transaction(&["a"], |_tx| async move {
        std::future::pending::<()>().await;
        Ok::<_, Error>(())
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(200), stuck)
            .await
            .is_err()
    );
    // "a" changes. Had the dropped transaction's connection gone back to the pool still
    // watching "a", the next transaction (on the pool's only connection) would be refused.
    set(&mut other, "a", 1).await;
    let runs = Arc::new(AtomicU32::new(0));
    c.transaction(&["b"], |tx| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            tx.set("b", 1);
            Ok::<_, Error>(())
        }
    })
    .await
    .unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "a stale WATCH made the next transaction conflict"
    );
    // And no connection is left inside a MULTI, or watching: the `x` flag marks a client in
    // MULTI on every server (Redis shows `multi=-1` outside one, Valkey `multi=0` after an
    // EXEC), and `watch=` (Redis 7+, Valkey) counts watched keys.
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut other)
        .await
        .unwrap();
    let field = |line: &str, name: &str| -> Option<String> {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .map(str::to_owned)
    };
    for line in clients.lines() {
        let flags = field(line, "flags=").unwrap_or_default();
        assert!(!flags.contains('x'), "a client is left in MULTI: {line}");
        assert!(
            field(line, "watch=").is_none_or(|w| w == "0"),
            "a client still watches: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tx_handle_kept_past_its_attempt_is_refused() {
    let server = server();
    let c = client(&server).await;
    let kept = c
        .transaction(&["k"], |tx| async move { Ok::<_, Error>(tx) })
        .await
        .unwrap();
    assert!(matches!(
        kept.get::<i64>("k").await,
        Err(Error::InvalidArgument(_))
    ));
}

/// Reads `key` until `stop` is set; counts the times the value went down between two reads.
fn watch_for_decreases(
    mut conn: redis::aio::MultiplexedConnection,
    key: &'static str,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let (mut last, mut decreases) = (i64::MIN, 0);
        while !stop.load(Ordering::Relaxed) {
            if let Some(v) = get(&mut conn, key).await {
                if v < last {
                    decreases += 1;
                }
                last = v;
            }
            tokio::task::yield_now().await;
        }
        decreases
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_max_keeps_the_true_maximum_where_the_getset_loop_can_lose_it() {
    let server = server();
    let c = client(&server).await;
    let tasks = 16;
    let per_task = 150;
    // Values are spread so that the maximum comes late for some tasks and early for others.
    let value = |t: i64, i: i64| (i * 7919 + t * 104_729) % 1_000_003;
    let true_max = (0..tasks)
        .flat_map(|t| (0..per_task).map(move |i| value(t, i)))
        .max()
        .unwrap();

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = watch_for_decreases(raw(&server).await, "max:script", stop.clone());
    let mut handles = Vec::new();
    for t in 0..tasks {
        let c = c.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..per_task {
                c.set_max("max:script", value(t, i)).await.unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    assert_eq!(reader.await.unwrap(), 0, "a reader saw the maximum go down");
    let mut conn = raw(&server).await;
    assert_eq!(get(&mut conn, "max:script").await, Some(true_max));

    // The first seed's GETSET loop, as written there (retry limit 5, then give up), against
    // the same offers. Each writer swaps its value in and puts back a larger one it took out,
    // so in between, readers see the "maximum" go down; and a writer that gives up after its
    // retries leaves whatever the last swap put there.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = watch_for_decreases(raw(&server).await, "max:getset", stop.clone());
    let given_up = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..tasks {
        let mut conn = raw(&server).await;
        let given_up = given_up.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..per_task {
                let new_val = value(t, i);
                let mut max_in_redis: i64 = get(&mut conn, "max:getset").await.unwrap_or(i64::MIN);
                let mut max_at_hand = new_val;
                let mut retries = 0;
                while max_at_hand > max_in_redis && retries < 5 {
                    max_in_redis = max_at_hand;
                    let old: Option<i64> = redis::cmd("GETSET")
                        .arg("max:getset")
                        .arg(max_at_hand)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    max_at_hand = old.unwrap_or(i64::MIN);
                    retries += 1;
                }
                if max_at_hand > max_in_redis {
                    given_up.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let getset_decreases = reader.await.unwrap();
    let getset_final = get(&mut conn, "max:getset").await.unwrap_or(i64::MIN);
    eprintln!(
        "GETSET loop: final {getset_final} vs true maximum {true_max}; {} of {} writers gave up after 5 retries; a reader saw the maximum go down {getset_decreases} times",
        given_up.load(Ordering::Relaxed),
        tasks * per_task
    );
    assert!(getset_final <= true_max);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_min_and_exact_i64_comparison() {
    let server = server();
    let c = client(&server).await;
    assert_eq!(c.set_max("m", i64::MAX - 1).await.unwrap(), i64::MAX - 1);
    assert_eq!(
        c.set_max("m", i64::MAX - 2).await.unwrap(),
        i64::MAX - 1,
        "2^53 precision would merge these"
    );
    assert_eq!(c.set_max("m", i64::MAX).await.unwrap(), i64::MAX);
    assert_eq!(c.set_min("n", -5).await.unwrap(), -5);
    assert_eq!(c.set_min("n", -3).await.unwrap(), -5);
    assert_eq!(c.set_min("n", i64::MIN).await.unwrap(), i64::MIN);
    assert_eq!(c.set_max("n", 0).await.unwrap(), 0);
    let mut conn = raw(&server).await;
    let _: () = redis::cmd("SET")
        .arg("text")
        .arg("hello")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(matches!(c.set_max("text", 1).await, Err(Error::Redis(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_and_set_and_versioned_values() {
    let server = server();
    let c = client(&server).await;
    assert_eq!(
        c.compare_and_set("cfg", Some(b"x"), b"y").await.unwrap(),
        CasOutcome::Mismatch { current: None }
    );
    assert_eq!(
        c.compare_and_set("cfg", None, b"v1").await.unwrap(),
        CasOutcome::Swapped
    );
    assert_eq!(
        c.compare_and_set("cfg", Some(b"v1"), b"v2").await.unwrap(),
        CasOutcome::Swapped
    );
    assert_eq!(
        c.compare_and_set("cfg", Some(b"v1"), b"v3").await.unwrap(),
        CasOutcome::Mismatch {
            current: Some(b"v2".to_vec())
        }
    );
    assert_eq!(c.get_versioned("doc").await.unwrap(), None);
    assert_eq!(
        c.set_if_version("doc", 0, b"first").await.unwrap(),
        VersionedWrite::Written { version: 1 }
    );
    assert_eq!(
        c.set_if_version("doc", 0, b"again").await.unwrap(),
        VersionedWrite::Stale { current: 1 }
    );
    assert_eq!(
        c.set_if_version("doc", 1, b"second").await.unwrap(),
        VersionedWrite::Written { version: 2 }
    );
    assert_eq!(
        c.get_versioned("doc").await.unwrap(),
        Some(Versioned {
            version: 2,
            value: b"second".to_vec()
        })
    );
    assert!(matches!(
        c.compare_and_set("", None, b"v").await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        c.decrement_if_at_least("s", 0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        c.transaction(&[], |_tx| async move { Ok::<_, Error>(()) })
            .await,
        Err(Error::InvalidArgument(_))
    ));
}

/// The fourth seed's sale: 300 purchase attempts from 20 workers on a stock of 20.
#[derive(Clone, Copy, Debug)]
enum Strategy {
    Transaction,
    Script,
    Lock,
}

async fn seckill(
    c: &Client,
    conn: &mut redis::aio::MultiplexedConnection,
    strategy: Strategy,
) -> (u64, i64) {
    let key = format!("seckill:{strategy:?}");
    set(conn, &key, 20).await;
    let sold = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..20 {
        let c = c.clone();
        let key = key.clone();
        let sold = sold.clone();
        let mut conn = conn.clone();
        workers.push(tokio::spawn(async move {
            for _ in 0..15 {
                let bought = match strategy {
                    Strategy::Script => matches!(
                        c.decrement_if_at_least(&key, 1).await.unwrap(),
                        Stock::Left(_)
                    ),
                    Strategy::Transaction => c
                        .transaction_with(
                            &[key.as_str()],
                            WaitPolicy::TRANSACTION
                                .with_max_attempts(10_000)
                                .with_deadline(None),
                            |tx| {
                                let key = key.clone();
                                async move {
                                    let stock: i64 = tx.get(&key).await?.unwrap_or(0);
                                    if stock <= 0 {
                                        return Ok::<_, Error>(false);
                                    }
                                    tx.set(&key, stock - 1);
                                    Ok(true)
                                }
                            },
                        )
                        .await
                        .unwrap(),
                    Strategy::Lock => {
                        let guard = c
                            .lock(format!("lock:{key}"))
                            .with_wait(WaitPolicy::up_to(Duration::from_secs(60)))
                            .acquire()
                            .await
                            .unwrap();
                        let stock = get(&mut conn, &key).await.unwrap_or(0);
                        let bought = stock > 0;
                        if bought {
                            set(&mut conn, &key, stock - 1).await;
                        }
                        guard.release().await.unwrap();
                        bought
                    }
                };
                if bought {
                    sold.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    (
        sold.load(Ordering::Relaxed),
        get(conn, &key).await.unwrap_or(0),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seckill_sells_exactly_the_stock_with_every_strategy() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    for strategy in [Strategy::Transaction, Strategy::Script, Strategy::Lock] {
        let (sold, left) = seckill(&c, &mut conn, strategy).await;
        assert_eq!(
            (sold, left),
            (20, 0),
            "{strategy:?}: sold {sold}, left {left}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_pooled_connection_respects_the_deadline() {
    let server = server();
    let c = Client::builder(&server.url())
        .transaction_connections(1)
        .connect()
        .await
        .unwrap();
    let (entered_tx, entered) = tokio::sync::oneshot::channel::<()>();
    let busy = c.clone();
    let holder = tokio::spawn(async move {
        let mut entered_tx = Some(entered_tx);
        busy.transaction(&["x"], |_tx| {
            let entered_tx = entered_tx.take();
            async move {
                if let Some(t) = entered_tx {
                    let _ = t.send(());
                }
                std::future::pending::<()>().await;
                Ok::<_, Error>(())
            }
        })
        .await
    });
    entered.await.unwrap(); // the pool's only connection is now in use
    let started = tokio::time::Instant::now();
    let policy = WaitPolicy::TRANSACTION.with_deadline(Some(Duration::from_millis(200)));
    let result: Result<(), Error> = c
        .transaction_with(&["y"], policy, |_tx| async move { Ok(()) })
        .await;
    assert!(matches!(result, Err(Error::Timeout { .. })), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    holder.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decrement_if_at_least_takes_only_plain_integers_within_its_range() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let max = fenced::limits::MAX_STOCK as i64;
    set(&mut conn, "big", max).await;
    assert_eq!(
        c.decrement_if_at_least("big", fenced::limits::MAX_STOCK)
            .await
            .unwrap(),
        Stock::Left(0)
    );
    for bad in ["0x10", " 7", "2.5", "1e3", "10000000000000001"] {
        let _: () = redis::cmd("SET")
            .arg("odd")
            .arg(bad)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            matches!(
                c.decrement_if_at_least("odd", 1).await,
                Err(Error::Redis(_))
            ),
            "{bad:?} was accepted"
        );
    }
    assert!(matches!(
        c.decrement_if_at_least("big", fenced::limits::MAX_STOCK + 1)
            .await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_that_runs_out_of_time_reports_the_conflicts() {
    let server = server();
    let c = client(&server).await;
    let mut other = raw(&server).await;
    // A pooled connection ready first: the deadline is for attempts, and on a loaded machine
    // making the first connection can take most of a short one (it would then answer
    // `Timeout`, rightly, having attempted nothing).
    c.transaction(&["warm"], |tx| async move {
        tx.set("warm", 1);
        Ok::<_, Error>(())
    })
    .await
    .unwrap();
    let policy = WaitPolicy::TRANSACTION
        .with_max_attempts(1_000_000)
        .with_deadline(Some(Duration::from_secs(1)));
    let result: Result<(), Error> = c
        .transaction_with(&["hot"], policy, |tx| {
            let mut other = other.clone();
            async move {
                let n: i64 = tx.get("hot").await?.unwrap_or(0);
                set(&mut other, "hot", n + 1000).await; // always conflicts
                tx.set("hot", n + 1);
                Ok(())
            }
        })
        .await;
    assert!(
        matches!(result, Err(Error::Conflict { attempts, .. }) if attempts > 1),
        "{result:?}"
    );
    let _ = get(&mut other, "hot").await;
}

#[test]
fn set_max_and_set_min_agree_with_integer_order_for_any_i64() {
    use proptest::prelude::*;
    let server = server();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let c = runtime.block_on(client(&server));
    let config = ProptestConfig {
        cases: 200,
        ..ProptestConfig::default()
    };
    // A fresh key for every case (shrinking reruns cases, so no generated key is safe).
    let next = AtomicU64::new(0);
    proptest!(config, |(a in any::<i64>(), b in any::<i64>())| {
        let key = next.fetch_add(1, Ordering::Relaxed);
        runtime.block_on(async {
            let (max_key, min_key) = (format!("pmax:{key}"), format!("pmin:{key}"));
            c.set_max(&max_key, a).await.unwrap();
            prop_assert_eq!(c.set_max(&max_key, b).await.unwrap(), a.max(b));
            c.set_min(&min_key, a).await.unwrap();
            prop_assert_eq!(c.set_min(&min_key, b).await.unwrap(), a.min(b));
            Ok(())
        })?;
    });
}
