//! The lease core's other tenants: the leased semaphore and the reentrant lock. No Rust peer
//! has either (rslock and redlock-rs offer a plain lock only), so these rows are fenced's own
//! figures, next to its plain lock in the same run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::measure::{Window, histogram, micros};
use crate::report::Row;
use crate::scenario::{BoxError, Env, Scenario};

/// How long a permit is held: tokio's timer (four holders share two cores, so none may block
/// its thread), about 1-2 ms.
const HOLD: Duration = Duration::from_millis(1);

/// A fenced row of `scenario`: `ops` operations over the window; p50, p99 and max from
/// `waits` (µs).
fn row(scenario: Scenario, ops: u64, window: Window, waits: &hdrhistogram::Histogram<u64>) -> Row {
    Row {
        scenario: scenario.name().into(),
        library: "fenced".into(),
        ops_per_sec: ops as f64 / window.duration.as_secs_f64(),
        runs: 1,
        p50_us: waits.value_at_quantile(0.5) as f64,
        p99_us: waits.value_at_quantile(0.99) as f64,
        max_wait_ms: Some(waits.max() as f64 / 1000.0),
        ..Row::default()
    }
}

/// One worker: take, hold ~1ms, give back, until the window ends; the waits it measured.
async fn worker<G, Take, TakeFut, Give, GiveFut>(
    window: Window,
    mut take: Take,
    give: Give,
) -> Result<hdrhistogram::Histogram<u64>, BoxError>
where
    Take: FnMut() -> TakeFut,
    TakeFut: Future<Output = fenced::Result<G>>,
    Give: Fn(G) -> GiveFut,
    GiveFut: Future<Output = fenced::Result<()>>,
{
    let mut waits = histogram()?;
    while Instant::now() < window.end {
        let asked = Instant::now();
        let held = match tokio::time::timeout_at(window.end, take()).await {
            Ok(held) => held?,
            Err(_) => break,
        };
        if window.measures(asked) {
            waits.record(micros(asked.elapsed()))?;
        }
        // Held as `contended-8` holds (`locks.rs`): exactly 1ms, where tokio's timer would
        // round up to about 2ms, so that the rows of one run compare.
        tokio::task::block_in_place(|| std::thread::sleep(HOLD));
        give(held).await?;
    }
    Ok(waits)
}

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
        violations: violations.load(Ordering::Relaxed),
        fairness: Some(if most > 0 {
            least as f64 / most as f64
        } else {
            0.0
        }),
        ..row(Scenario::Semaphore4of16, waits.len(), window, &waits)
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

/// Lock segments: 32 tasks, each locking a random one of 10 000 items for ~1ms,
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
            // xorshift: a different item sequence per task, the same in every run.
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (task + 1);
            let take = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let lock = items.lock_for(&format!("item:{}", rng % 10_000));
                async move { lock.acquire().await }
            };
            worker(window, take, |g: fenced::LockGuard| g.release()).await
        }));
    }
    let mut waits = histogram()?;
    for h in handles {
        waits.add(&h.await??)?;
    }
    Ok(row(scenario, waits.len(), window, &waits))
}

/// `fair-8`: 8 workers on one fair lock, each holding it ~1ms: acquisitions/s, fairness
/// (fewest / most acquisitions of a worker), the longest and the mean wait.
pub(crate) async fn fair(window: Window, env: &Env) -> Result<Row, BoxError> {
    let lock = env
        .fenced
        .fair_lock("bench:fair")
        .with_ttl(Duration::from_secs(10));
    let mut handles = Vec::new();
    for _ in 0..8 {
        let lock = lock.clone();
        handles.push(tokio::spawn(async move {
            let take = || lock.acquire();
            worker(window, take, |g: fenced::LockGuard| g.release()).await
        }));
    }
    let mut waits = histogram()?;
    let (mut most, mut least) = (0u64, u64::MAX);
    for h in handles {
        let w = h.await??;
        most = most.max(w.len());
        least = least.min(w.len());
        waits.add(&w)?;
    }
    Ok(Row {
        scenario: Scenario::Fair8.name().into(),
        library: "fenced".into(),
        ops_per_sec: waits.len() as f64 / window.duration.as_secs_f64(),
        runs: 1,
        p50_us: waits.mean(),
        p99_us: waits.value_at_quantile(0.99) as f64,
        max_wait_ms: Some(waits.max() as f64 / 1000.0),
        fairness: Some(if most > 0 {
            least as f64 / most as f64
        } else {
            0.0
        }),
        ..Row::default()
    })
}

/// `rw-reads`: 32 readers and 1 writer on one read-write lock, each holding ~1ms: reads/s
/// (the row's ops/s) and the writer's longest wait (max wait).
pub(crate) async fn rw_reads(window: Window, env: &Env) -> Result<Row, BoxError> {
    let rw = env
        .fenced
        .rw_lock("bench:rw")
        .with_ttl(Duration::from_secs(10));
    let mut readers = Vec::new();
    for _ in 0..32 {
        let rw = env
            .fenced
            .rw_lock("bench:rw")
            .with_ttl(Duration::from_secs(10));
        readers.push(tokio::spawn(async move {
            let mut reads = 0u64;
            while Instant::now() < window.end {
                let asked = Instant::now();
                let guard = match tokio::time::timeout_at(window.end, rw.read()).await {
                    Ok(guard) => guard?,
                    Err(_) => break,
                };
                if window.measures(asked) {
                    reads += 1;
                }
                tokio::time::sleep(HOLD).await;
                guard.release().await?;
            }
            Ok::<_, BoxError>(reads)
        }));
    }
    let mut writer_waits = histogram()?;
    while Instant::now() < window.end {
        let asked = Instant::now();
        let guard = match tokio::time::timeout_at(window.end, rw.write()).await {
            Ok(guard) => guard?,
            Err(_) => break,
        };
        if window.measures(asked) {
            writer_waits.record(micros(asked.elapsed()))?;
        }
        tokio::time::sleep(HOLD).await;
        guard.release().await?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut reads = 0;
    for r in readers {
        reads += r.await??;
    }
    Ok(row(Scenario::RwReads, reads, window, &writer_waits))
}

/// `latch-1000`: 1000 waiters on one latch; the time from the last count down to the last
/// waiter awake (p50/p99 of the wake-ups, max = the last one), over repeated rounds.
pub(crate) async fn latch(window: Window, env: &Env) -> Result<Row, BoxError> {
    let mut woken = histogram()?;
    let mut rounds = 0u64;
    while Instant::now() < window.end {
        let latch = env.fenced.latch(format!("bench:latch:{rounds}"));
        latch.arm(1).await?;
        let mut waiters = Vec::with_capacity(1000);
        for _ in 0..1000 {
            let latch = latch.clone();
            waiters.push(tokio::spawn(async move {
                latch.wait().await?;
                Ok::<_, BoxError>(Instant::now())
            }));
        }
        // Let every waiter reach its wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let opened = Instant::now();
        latch.count_down().await?;
        for w in waiters {
            let at = w.await??;
            woken.record(micros(at.saturating_duration_since(opened)))?;
        }
        rounds += 1;
    }
    Ok(row(Scenario::Latch1000, rounds, window, &woken))
}

/// `multi-3`: 16 tasks taking 3 of 6 names at a time (all or nothing), each holding ~1ms.
pub(crate) async fn multi(window: Window, env: &Env) -> Result<Row, BoxError> {
    let names = ["m0", "m1", "m2", "m3", "m4", "m5"];
    let mut handles = Vec::new();
    for task in 0..16usize {
        let lock = env
            .fenced
            .multi_lock((0..3).map(|i| format!("bench:{}", names[(task + i * 2) % 6])))?
            .with_ttl(Duration::from_secs(10));
        handles.push(tokio::spawn(async move {
            let take = || lock.acquire();
            worker(window, take, |g: fenced::MultiGuard| g.release()).await
        }));
    }
    let mut waits = histogram()?;
    for h in handles {
        waits.add(&h.await??)?;
    }
    Ok(row(Scenario::Multi3, waits.len(), window, &waits))
}
