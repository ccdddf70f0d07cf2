//! The lock scenarios: uncontended cycles, and eight workers contending for one name.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::measure::{Window, histogram, micros};
use crate::peers::{Held, Locker, redlock, redlock_ttl, rslock_manager};
use crate::report::Row;
use crate::scenario::{BoxError, Env, Library, Scenario};

/// `tasks` tasks, each on its own name, acquire + release as fast as they can.
pub(crate) async fn uncontended(
    scenario: Scenario,
    library: Library,
    tasks: usize,
    window: Window,
    env: &Env,
) -> Result<Row, BoxError> {
    let names: Vec<String> = (0..tasks)
        .map(|t| format!("bench:{}:{}:{t}", scenario.name(), library.name()))
        .collect();
    let mut total = histogram()?;
    if library == Library::Redlock {
        // Synchronous: one OS thread per task, as its users would run it.
        let rl = redlock(&env.url);
        let mut threads = Vec::new();
        for name in names {
            let rl = rl.clone();
            threads.push(tokio::task::spawn_blocking(
                move || -> Result<Histogram<u64>, BoxError> {
                    let mut hist = histogram()?;
                    while Instant::now() < window.end {
                        let started = Instant::now();
                        let lock = rl
                            .lock(name.as_bytes(), redlock_ttl())?
                            .ok_or("redlock lock unexpectedly held")?;
                        rl.unlock(&lock);
                        if window.measures(started) {
                            hist.record(micros(started.elapsed()))?;
                        }
                    }
                    Ok(hist)
                },
            ));
        }
        for t in threads {
            total.add(t.await??)?;
        }
    } else {
        let manager = rslock_manager(&env.url);
        let mut handles = Vec::new();
        for name in names {
            let mut locker = Locker::new(library, &name, env, &manager)?;
            handles.push(tokio::spawn(async move {
                let mut hist = histogram()?;
                while Instant::now() < window.end {
                    let started = Instant::now();
                    let held = locker.take().await?;
                    locker.release(held).await?;
                    if window.measures(started) {
                        hist.record(micros(started.elapsed()))?;
                    }
                }
                Ok::<_, BoxError>(hist)
            }));
        }
        for h in handles {
            total.add(h.await??)?;
        }
    }
    Ok(Row {
        scenario: scenario.name().into(),
        library: library.name().into(),
        ops_per_sec: total.len() as f64 / window.duration.as_secs_f64(),
        runs: 1,
        p50_us: total.value_at_quantile(0.5) as f64,
        p99_us: total.value_at_quantile(0.99) as f64,
        ..Row::default()
    })
}

/// What contending workers share: an exclusion flag checked on every acquire, and when the
/// last holder left its section (for the handoff gap).
struct Shared {
    busy: AtomicBool,
    violations: AtomicU64,
    last_end: Mutex<Option<Instant>>,
}

/// One worker's tallies.
struct Tally {
    waits: Histogram<u64>,
    handoffs: Histogram<u64>,
    acquired: u64,
}

impl Shared {
    /// Bookkeeping right after an acquire that was asked for at `asked`.
    fn entered(&self, asked: Instant, window: &Window, tally: &mut Tally) -> Result<(), BoxError> {
        let got = Instant::now();
        if self.busy.swap(true, Ordering::SeqCst) {
            self.violations.fetch_add(1, Ordering::Relaxed);
        }
        if window.measures(asked) {
            tally.acquired += 1;
            tally.waits.record(micros(got - asked))?;
            let last_end = *self.last_end.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(end) = last_end.filter(|end| *end >= asked) {
                tally.handoffs.record(micros(got - end))?;
            }
        }
        Ok(())
    }

    /// Bookkeeping right before the release is sent.
    fn leaving(&self) {
        *self.last_end.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.busy.store(false, Ordering::SeqCst);
    }
}

/// The critical section: 1ms of "work", slept with `std::thread::sleep` by every library.
const HOLD: Duration = Duration::from_millis(1);

/// `workers` workers on one name, each holding it ~1ms, each waiting the library's own way.
pub(crate) async fn contended(
    library: Library,
    workers: usize,
    window: Window,
    env: &Env,
) -> Result<Row, BoxError> {
    // A name of its own per run. A raw worker stopped at the end of a run (its `SET NX` in
    // flight when `timeout_at` drops it) may leave the hand-written lock held for its 30 s
    // ttl, which would stall the next run on the same name; the fresh name sidesteps that
    // leak, it does not fix it (the floor has no clean-up by design).
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let name = format!("bench:contended:{}:{run}", library.name());
    let shared = Arc::new(Shared {
        busy: AtomicBool::new(false),
        violations: AtomicU64::new(0),
        last_end: Mutex::new(None),
    });
    let new_tally = || -> Result<Tally, BoxError> {
        Ok(Tally {
            waits: histogram()?,
            handoffs: histogram()?,
            acquired: 0,
        })
    };
    let mut tallies = Vec::new();
    if library == Library::Redlock {
        let rl = redlock(&env.url);
        let mut threads = Vec::new();
        for _ in 0..workers {
            let (rl, shared, name, mut tally) =
                (rl.clone(), shared.clone(), name.clone(), new_tally()?);
            threads.push(tokio::task::spawn_blocking(
                move || -> Result<Tally, BoxError> {
                    'run: while Instant::now() < window.end {
                        let asked = Instant::now();
                        // lock() itself tries 3 times, sleeping 0–200ms after each failure.
                        let lock = loop {
                            if let Some(lock) = rl.lock(name.as_bytes(), redlock_ttl())? {
                                break lock;
                            }
                            if Instant::now() >= window.end {
                                break 'run;
                            }
                        };
                        shared.entered(asked, &window, &mut tally)?;
                        std::thread::sleep(HOLD);
                        shared.leaving();
                        rl.unlock(&lock);
                    }
                    Ok(tally)
                },
            ));
        }
        for t in threads {
            tallies.push(t.await??);
        }
    } else {
        let manager = rslock_manager(&env.url);
        let mut handles = Vec::new();
        for _ in 0..workers {
            let mut locker = Locker::new(library, &name, env, &manager)?;
            let (shared, mut tally) = (shared.clone(), new_tally()?);
            handles.push(tokio::spawn(async move {
                while Instant::now() < window.end {
                    let asked = Instant::now();
                    // Stop waiting when the run ends; an attempt cut off here is cleaned up.
                    let held: Held = match tokio::time::timeout_at(window.end, locker.wait()).await
                    {
                        Ok(held) => held?,
                        Err(_) => break,
                    };
                    shared.entered(asked, &window, &mut tally)?;
                    // Hold exactly as long as redlock's threads do: tokio's timer would round
                    // 1ms up to about 2ms. The holder blocks its thread the way tokio asks
                    // (`block_in_place`), so the tasks queued on that worker move to the other
                    // one instead of waiting out the hold (a plain `thread::sleep` strands
                    // the task it just woke in the worker's LIFO slot).
                    tokio::task::block_in_place(|| std::thread::sleep(HOLD));
                    shared.leaving();
                    locker.release(held).await?;
                }
                Ok::<_, BoxError>(tally)
            }));
        }
        for h in handles {
            tallies.push(h.await??);
        }
    }
    let mut waits = histogram()?;
    let mut handoffs = histogram()?;
    for t in &tallies {
        waits.add(&t.waits)?;
        handoffs.add(&t.handoffs)?;
    }
    let most = tallies.iter().map(|t| t.acquired).max().unwrap_or(0);
    let least = tallies.iter().map(|t| t.acquired).min().unwrap_or(0);
    let percentiles = [0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0]
        .iter()
        .map(|q| (q * 100.0, waits.value_at_quantile(*q) as f64))
        .collect();
    Ok(Row {
        scenario: Scenario::Contended8.name().into(),
        library: library.name().into(),
        ops_per_sec: waits.len() as f64 / window.duration.as_secs_f64(),
        runs: 1,
        p50_us: waits.value_at_quantile(0.5) as f64,
        p99_us: waits.value_at_quantile(0.99) as f64,
        violations: shared.violations.load(Ordering::Relaxed),
        handoff_p50_us: Some(handoffs.value_at_quantile(0.5) as f64),
        handoff_p99_us: Some(handoffs.value_at_quantile(0.99) as f64),
        max_wait_ms: Some(waits.max() as f64 / 1000.0),
        fairness: Some(if most > 0 {
            least as f64 / most as f64
        } else {
            0.0
        }),
        wait_percentiles_us: Some(percentiles),
        ..Row::default()
    })
}
