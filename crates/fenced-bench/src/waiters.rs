//! `waiters-1000`: what waiting costs. One holder keeps a name for a few seconds while 1000
//! tasks of one process wait for it; then it releases, and every waiter takes the lock once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::measure::{cpu_us, histogram, micros, total_commands};
use crate::peers::{Locker, rslock_manager};
use crate::report::Row;
use crate::scenario::{BoxError, Env, Library, Scenario};

/// How long to let the waiters settle into waiting before measuring.
const SETTLE: Duration = Duration::from_millis(300);

pub(crate) async fn waiters(
    library: Library,
    n: usize,
    hold: Duration,
    env: &Env,
    stats: &MultiplexedConnection,
) -> Result<Row, BoxError> {
    let name = format!("bench:waiters:{}", library.name());
    let manager = rslock_manager(&env.url);
    let mut holder = Locker::new(library, &name, env, &manager)?;
    let held = holder.take().await?;

    let busy = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for _ in 0..n {
        let mut locker = Locker::new(library, &name, env, &manager)?;
        let (busy, violations) = (busy.clone(), violations.clone());
        handles.push(tokio::spawn(async move {
            let held = locker.wait().await?;
            let got = Instant::now();
            if busy.swap(true, Ordering::SeqCst) {
                violations.fetch_add(1, Ordering::Relaxed);
            }
            busy.store(false, Ordering::SeqCst);
            locker.release(held).await?;
            Ok::<_, BoxError>(got)
        }));
    }

    // Measure the waiting itself: what the waiters cost Redis and this process.
    tokio::time::sleep(SETTLE).await;
    let mut conn = stats.clone();
    let (commands_before, cpu_before, started) =
        (total_commands(&mut conn).await?, cpu_us()?, Instant::now());
    tokio::time::sleep(hold).await;
    let (commands_after, cpu_after) = (total_commands(&mut conn).await?, cpu_us()?);
    let waited = started.elapsed().as_secs_f64();

    let released_at = Instant::now();
    holder.release(held).await?;
    let mut handoffs = histogram()?;
    let mut last = released_at;
    for h in handles {
        // Bounded: a waiter that never gets the lock fails the run instead of hanging it.
        let got = tokio::time::timeout(Duration::from_secs(120), h)
            .await
            .map_err(|_| format!("{}: a waiter never got the lock", library.name()))???;
        handoffs.record(micros(got.saturating_duration_since(released_at)))?;
        last = last.max(got);
    }
    let drain = last - released_at;
    Ok(Row {
        scenario: Scenario::Waiters1000.name().into(),
        library: library.name().into(),
        ops_per_sec: n as f64 / drain.as_secs_f64().max(1e-6),
        runs: 1,
        p50_us: handoffs.value_at_quantile(0.5) as f64,
        p99_us: handoffs.value_at_quantile(0.99) as f64,
        violations: violations.load(Ordering::Relaxed),
        // The INFO call closing the window is not the waiters'.
        waiting_redis_cmds_per_sec: Some(
            commands_after
                .saturating_sub(commands_before)
                .saturating_sub(1) as f64
                / waited,
        ),
        waiting_client_cpu_percent: Some(
            cpu_after.saturating_sub(cpu_before) as f64 / 1e6 / waited * 100.0,
        ),
        drain_ms: Some(drain.as_secs_f64() * 1e3),
        ..Row::default()
    })
}
