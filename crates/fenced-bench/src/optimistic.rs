//! The optimistic-concurrency scenarios: the seckill sale (300 buyers, a stock of 20), and a contended counter.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fenced::optimistic::Stock;
use fenced::resource::FencedUpdate;
use fenced::{Client, WaitPolicy};
use tokio::time::Instant;

use crate::measure::{Window, histogram, micros};
use crate::report::Row;
use crate::scenario::{BoxError, Env, Library, Scenario};

const STOCK: i64 = 20;
const WORKERS: u64 = 20;
const ATTEMPTS_PER_WORKER: u64 = 15;

/// Tallies shared by the workers of one pair.
#[derive(Default)]
struct Tally {
    sold: AtomicU64,
    retries: AtomicU64,
}

/// Rounds of the sale (20 workers × 15 attempts on a stock of 20) until the window
/// ends; ops/s counts purchase attempts, sold out or not.
pub(crate) async fn seckill(library: Library, window: Window, env: &Env) -> Result<Row, BoxError> {
    let (client, raw) = (&env.fenced, &env.raw);
    let key = format!("bench:seckill:{}", library.name());
    let stock = client.resource(key.clone());
    let lock = client.lock(format!("{key}:lock"));
    let tally = Arc::new(Tally::default());
    let mut latencies = histogram()?;
    let mut oversold = 0u64;
    let mut conn = raw.clone();
    while Instant::now() < window.end {
        // A new round: restock (every worker of the last round has finished).
        match library {
            Library::FencedLock => {
                let guard = lock.acquire().await?;
                stock
                    .set(guard.fencing_token(), "count", STOCK.to_string())
                    .await?;
                guard.release().await?;
            }
            _ => {
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(STOCK)
                    .query_async(&mut conn)
                    .await?;
            }
        }
        let sold_before = tally.sold.load(Ordering::Relaxed);
        let mut workers = Vec::new();
        for _ in 0..WORKERS {
            let (client, key, stock, lock, tally) = (
                client.clone(),
                key.clone(),
                stock.clone(),
                lock.clone(),
                tally.clone(),
            );
            workers.push(tokio::spawn(async move {
                let mut hist = histogram()?;
                for _ in 0..ATTEMPTS_PER_WORKER {
                    let started = Instant::now();
                    let bought = match library {
                        Library::FencedScript => {
                            matches!(client.decrement_if_at_least(&key, 1).await?, Stock::Left(_))
                        }
                        Library::FencedTx => buy_by_transaction(&client, &key, &tally).await?,
                        Library::FencedLock => {
                            // A fenced read-modify-write: the read fences off older holders.
                            let guard = lock.acquire().await?;
                            let sold = stock
                                .update(guard.fencing_token(), "count", |count| {
                                    let left: i64 = count?.parse().ok()?;
                                    (left > 0).then(|| (left - 1).to_string().into_bytes())
                                })
                                .await?;
                            guard.release().await?;
                            sold == FencedUpdate::Applied
                        }
                        other => {
                            return Err::<_, BoxError>(
                                format!("{} is not a seckill strategy", other.name()).into(),
                            );
                        }
                    };
                    if bought {
                        tally.sold.fetch_add(1, Ordering::Relaxed);
                    }
                    if started >= window.measure_from && started < window.end {
                        hist.record(micros(started.elapsed()))?;
                    }
                }
                Ok(hist)
            }));
        }
        for w in workers {
            latencies.add(w.await??)?;
        }
        let sold_in_round = tally.sold.load(Ordering::Relaxed) - sold_before;
        oversold += sold_in_round.saturating_sub(STOCK as u64);
    }
    Ok(optimistic_row(
        Scenario::Seckill,
        library,
        window,
        &latencies,
        &tally,
        Some(oversold),
    ))
}

async fn buy_by_transaction(
    client: &Client,
    key: &str,
    tally: &Arc<Tally>,
) -> Result<bool, fenced::Error> {
    let policy = WaitPolicy::TRANSACTION
        .with_max_attempts(100_000)
        .with_deadline(None);
    client
        .transaction_with(&[key], policy, |tx| {
            let tally = tally.clone();
            async move {
                if tx.attempt() > 1 {
                    tally.retries.fetch_add(1, Ordering::Relaxed);
                }
                let left: i64 = tx.get(key).await?.unwrap_or(0);
                if left <= 0 {
                    return Ok(false);
                }
                tx.set(key, left - 1);
                Ok(true)
            }
        })
        .await
}

/// `tasks` tasks changing one counter until the window ends: by transaction (read, add one,
/// write) or by the atomic script (take one from a practically endless stock).
pub(crate) async fn counter(
    library: Library,
    tasks: usize,
    window: Window,
    env: &Env,
) -> Result<Row, BoxError> {
    let (client, raw) = (&env.fenced, &env.raw);
    let key = format!("bench:counter:{}", library.name());
    let mut conn = raw.clone();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(fenced::limits::MAX_STOCK)
        .query_async(&mut conn)
        .await?;
    let tally = Arc::new(Tally::default());
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (client, key, tally) = (client.clone(), key.clone(), tally.clone());
        handles.push(tokio::spawn(async move {
            let mut hist = histogram()?;
            while Instant::now() < window.end {
                let started = Instant::now();
                match library {
                    Library::FencedScript => {
                        client.decrement_if_at_least(&key, 1).await?;
                    }
                    Library::FencedTx => {
                        let policy = WaitPolicy::TRANSACTION
                            .with_max_attempts(100_000)
                            .with_deadline(None);
                        client
                            .transaction_with(&[key.as_str()], policy, |tx| {
                                let (key, tally) = (key.clone(), tally.clone());
                                async move {
                                    if tx.attempt() > 1 {
                                        tally.retries.fetch_add(1, Ordering::Relaxed);
                                    }
                                    let n: i64 = tx.get(&key).await?.unwrap_or(0);
                                    tx.set(&key, n - 1);
                                    Ok::<_, fenced::Error>(())
                                }
                            })
                            .await?;
                    }
                    _ => return Err::<_, BoxError>("not a counter strategy".into()),
                }
                if started >= window.measure_from && started < window.end {
                    tally.sold.fetch_add(1, Ordering::Relaxed);
                    hist.record(micros(started.elapsed()))?;
                }
            }
            Ok(hist)
        }));
    }
    let mut latencies = histogram()?;
    for h in handles {
        latencies.add(h.await??)?;
    }
    Ok(optimistic_row(
        Scenario::CounterContended,
        library,
        window,
        &latencies,
        &tally,
        None,
    ))
}

fn optimistic_row(
    scenario: Scenario,
    library: Library,
    window: Window,
    latencies: &hdrhistogram::Histogram<u64>,
    tally: &Tally,
    oversold: Option<u64>,
) -> Row {
    let successes = tally.sold.load(Ordering::Relaxed).max(1);
    Row {
        scenario: scenario.name().into(),
        library: library.name().into(),
        ops_per_sec: latencies.len() as f64 / window.duration.as_secs_f64(),
        runs: 1,
        p50_us: latencies.value_at_quantile(0.5) as f64,
        p99_us: latencies.value_at_quantile(0.99) as f64,
        violations: oversold.unwrap_or(0),
        retries_per_success: Some(tally.retries.load(Ordering::Relaxed) as f64 / successes as f64),
        oversold,
        ..Row::default()
    }
}
