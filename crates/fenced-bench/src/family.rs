//! The lease core's other tenants: the leased semaphore and the reentrant lock. No Rust peer
//! has either (rslock and redlock-rs offer a plain lock only), so these rows are fenced's own
//! figures, next to its plain lock in the same run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::report::Row;
use crate::run::{BoxError, Env, Scenario, Window, histogram, micros};

/// How long a permit is held: tokio's timer (four holders share two cores, so none may block
/// its thread), about 1-2 ms.
const HOLD: Duration = Duration::from_millis(1);

/// `tasks` tasks taking one of `permits` permits each, holding it ~1ms: acquisitions/s,
/// fairness (fewest / most acquisitions of a task), the longest wait, and holders above
/// `permits` at once (violations, must be 0).
pub(crate) async fn semaphore(
    tasks: usize,
    permits: u32,
    window: Window,
    env: &Env,
) -> Result<Row, BoxError> {
    let pool = env
        .fenced
        .semaphore("bench:semaphore", permits)
        .with_ttl(Duration::from_secs(10));
    let inside = Arc::new(AtomicU32::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (pool, inside, violations) = (pool.clone(), inside.clone(), violations.clone());
        handles.push(tokio::spawn(async move {
            let mut waits = histogram()?;
            let mut acquired = 0u64;
            while Instant::now() < window.end {
                let asked = Instant::now();
                let permit = match tokio::time::timeout_at(window.end, pool.acquire()).await {
                    Ok(permit) => permit?,
                    Err(_) => break,
                };
                if inside.fetch_add(1, Ordering::SeqCst) >= permits {
                    violations.fetch_add(1, Ordering::Relaxed);
                }
                if window.measures(asked) {
                    acquired += 1;
                    waits.record(micros(asked.elapsed()))?;
                }
                tokio::time::sleep(HOLD).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await?;
            }
            Ok::<_, BoxError>((waits, acquired))
        }));
    }
    let mut waits = histogram()?;
    let (mut most, mut least) = (0u64, u64::MAX);
    for h in handles {
        let (w, acquired) = h.await??;
        waits.add(&w)?;
        most = most.max(acquired);
        least = least.min(acquired);
    }
    Ok(Row {
        scenario: Scenario::Semaphore4of16.name().into(),
        library: "fenced".into(),
        ops_per_sec: waits.len() as f64 / window.duration.as_secs_f64(),
        runs: 1,
        p50_us: waits.value_at_quantile(0.5) as f64,
        p99_us: waits.value_at_quantile(0.99) as f64,
        violations: violations.load(Ordering::Relaxed),
        max_wait_ms: Some(waits.max() as f64 / 1000.0),
        fairness: Some(if most > 0 {
            least as f64 / most as f64
        } else {
            0.0
        }),
        ..Row::default()
    })
}

/// One task on its own name: take the reentrant lock, enter it `depth - 1` more times through
/// the guard, give every hold back. One operation is the whole cycle.
pub(crate) async fn reentrant(depth: usize, window: Window, env: &Env) -> Result<Row, BoxError> {
    let lock = env
        .fenced
        .reentrant_lock("bench:reentrant")
        .with_ttl(Duration::from_secs(10));
    let mut cycles = histogram()?;
    while Instant::now() < window.end {
        let started = Instant::now();
        let outer = lock.acquire().await?;
        let mut inner = Vec::with_capacity(depth);
        for _ in 1..depth {
            inner.push(outer.reenter().await?);
        }
        while let Some(hold) = inner.pop() {
            hold.release().await?;
        }
        outer.release().await?;
        if window.measures(started) {
            cycles.record(micros(started.elapsed()))?;
        }
    }
    Ok(Row {
        scenario: Scenario::ReentrantDepth3.name().into(),
        library: "fenced".into(),
        ops_per_sec: cycles.len() as f64 / window.duration.as_secs_f64(),
        runs: 1,
        p50_us: cycles.value_at_quantile(0.5) as f64,
        p99_us: cycles.value_at_quantile(0.99) as f64,
        ..Row::default()
    })
}

/// Seed 001's lock segments: 32 tasks, each locking a random one of 10 000 items for ~1ms,
/// through `stripes` locks. Fewer stripes, fewer lock keys, more waiting: acquisitions/s
/// against the number of keys.
pub(crate) async fn striped(
    scenario: Scenario,
    stripes: u32,
    window: Window,
    env: &Env,
) -> Result<Row, BoxError> {
    let items = env
        .fenced
        .striped_lock(format!("bench:striped:{stripes}"), stripes)?
        .configure(|l| l.with_ttl(Duration::from_secs(10)));
    let mut handles = Vec::new();
    for task in 0..32u64 {
        let items = items.clone();
        handles.push(tokio::spawn(async move {
            let mut waits = histogram()?;
            // xorshift: a different item sequence per task, the same in every run.
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (task + 1);
            while Instant::now() < window.end {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let lock = items.lock_for(&format!("item:{}", rng % 10_000));
                let asked = Instant::now();
                let guard = match tokio::time::timeout_at(window.end, lock.acquire()).await {
                    Ok(guard) => guard?,
                    Err(_) => break,
                };
                if window.measures(asked) {
                    waits.record(micros(asked.elapsed()))?;
                }
                tokio::time::sleep(HOLD).await;
                guard.release().await?;
            }
            Ok::<_, BoxError>(waits)
        }));
    }
    let mut waits = histogram()?;
    for h in handles {
        waits.add(&h.await??)?;
    }
    Ok(Row {
        scenario: scenario.name().into(),
        library: "fenced".into(),
        ops_per_sec: waits.len() as f64 / window.duration.as_secs_f64(),
        runs: 1,
        p50_us: waits.value_at_quantile(0.5) as f64,
        p99_us: waits.value_at_quantile(0.99) as f64,
        max_wait_ms: Some(waits.max() as f64 / 1000.0),
        ..Row::default()
    })
}
