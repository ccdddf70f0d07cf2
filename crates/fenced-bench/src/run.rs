//! Running the scenarios: every (scenario, library) pair on the same server, one after another.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::raw::RawLock;
use crate::report::{Report, Row};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// One task, acquire + release cycles on one name.
    Uncontended1,
    /// 32 tasks on 32 distinct names, one shared client.
    Uncontended32,
    /// 8 tasks on one name, each holding it about 1 ms.
    Contended8,
    /// The seed's sale, round after round: 20 workers make 300 purchase attempts on a stock
    /// of 20.
    Seckill,
    /// 32 tasks changing one counter as fast as they can.
    CounterContended,
}

impl Scenario {
    /// Every scenario, in run order.
    pub const ALL: [Scenario; 5] = [
        Scenario::Uncontended1,
        Scenario::Uncontended32,
        Scenario::Contended8,
        Scenario::Seckill,
        Scenario::CounterContended,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended1 => "uncontended-1",
            Scenario::Uncontended32 => "uncontended-32",
            Scenario::Contended8 => "contended-8",
            Scenario::Seckill => "seckill",
            Scenario::CounterContended => "counter-contended",
        }
    }

    /// The libraries that can do this scenario's job.
    pub fn libraries(self) -> &'static [Library] {
        match self {
            Scenario::Uncontended1 | Scenario::Uncontended32 | Scenario::Contended8 => {
                &[Library::Fenced, Library::Raw]
            }
            Scenario::Seckill => &[
                Library::FencedTx,
                Library::FencedScript,
                Library::FencedLock,
            ],
            Scenario::CounterContended => &[Library::FencedTx, Library::FencedScript],
        }
    }
}

impl FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Scenario::ALL
            .into_iter()
            .find(|sc| sc.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown scenario {s:?}; known: {}",
                    Scenario::ALL.map(Scenario::name).join(", ")
                )
            })
    }
}

/// An implementation under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    /// This project's lock.
    Fenced,
    /// The hand-written redis-rs lock floor.
    Raw,
    /// This project's WATCH/MULTI/EXEC transaction.
    FencedTx,
    /// This project's atomic script (`decrement_if_at_least`).
    FencedScript,
    /// This project's lock around read-check-write, with fenced writes.
    FencedLock,
}

impl Library {
    /// Every library.
    pub const ALL: [Library; 5] = [
        Library::Fenced,
        Library::Raw,
        Library::FencedTx,
        Library::FencedScript,
        Library::FencedLock,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Library::Fenced => "fenced",
            Library::Raw => "raw",
            Library::FencedTx => "fenced-tx",
            Library::FencedScript => "fenced-script",
            Library::FencedLock => "fenced-lock",
        }
    }
}

impl FromStr for Library {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Library::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown library {s:?}; known: {}",
                    Library::ALL.map(Library::name).join(", ")
                )
            })
    }
}

/// What to run, and for how long.
#[derive(Clone, Debug)]
pub struct Config {
    /// Measured time per (scenario, library).
    pub duration: Duration,
    /// Unmeasured time before it.
    pub warmup: Duration,
    /// Scenarios to run.
    pub scenarios: Vec<Scenario>,
    /// Libraries to run.
    pub libraries: Vec<Library>,
    /// Runs of each pair; the libraries take turns, in alternating order, so drift of the
    /// machine's speed hits all of them alike. The report holds each pair's median run.
    pub repeat: usize,
}

/// Runs every configured pair against the server at `url`.
pub async fn run(config: &Config, url: &str) -> Result<Report, BoxError> {
    let mut report = Report::default();
    let fenced = fenced::Client::connect(url).await?;
    let redis_client = redis::Client::open(url)?;
    let raw_conn = redis_client.get_multiplexed_async_connection().await?;
    let mut stats_conn = redis_client.get_multiplexed_async_connection().await?;
    for &scenario in &config.scenarios {
        let libraries: Vec<Library> = scenario
            .libraries()
            .iter()
            .copied()
            .filter(|l| config.libraries.contains(l))
            .collect();
        let mut runs: Vec<Vec<Row>> = vec![Vec::new(); libraries.len()];
        for round in 0..config.repeat.max(1) {
            let mut order: Vec<usize> = (0..libraries.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let library = libraries[i];
                let window = Window::new(config.warmup, config.duration);
                let counter = tokio::spawn(count_commands(stats_conn.clone(), window));
                let mut row = match scenario {
                    Scenario::Uncontended1 | Scenario::Uncontended32 => {
                        let tasks = if scenario == Scenario::Uncontended1 {
                            1
                        } else {
                            32
                        };
                        uncontended(scenario, library, tasks, window, &fenced, &raw_conn).await?
                    }
                    Scenario::Contended8 => {
                        contended(library, 8, window, &fenced, &raw_conn).await?
                    }
                    Scenario::Seckill => {
                        crate::optimistic::seckill(library, window, &fenced, &raw_conn).await?
                    }
                    Scenario::CounterContended => {
                        crate::optimistic::counter(library, 32, window, &fenced, &raw_conn).await?
                    }
                };
                let commands = counter.await??;
                let measured_ops = row.ops_per_sec * window.duration.as_secs_f64();
                row.redis_cmds_per_op = if measured_ops > 0.0 {
                    commands as f64 / measured_ops
                } else {
                    0.0
                };
                runs[i].push(row);
            }
        }
        for rows in runs {
            report.scenarios.push(median(rows));
        }
    }
    let _: () = redis::cmd("FLUSHALL").query_async(&mut stats_conn).await?;
    Ok(report)
}

/// The run with the median ops/s, carrying the spread of all runs; violations are summed, so
/// one bad run shows.
fn median(mut rows: Vec<Row>) -> Row {
    rows.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    let min = rows.first().map_or(0.0, |r| r.ops_per_sec);
    let max = rows.last().map_or(0.0, |r| r.ops_per_sec);
    let violations = rows.iter().map(|r| r.violations).sum();
    let runs = rows.len();
    let mut mid = rows.swap_remove(runs / 2);
    mid.ops_per_sec_min = min;
    mid.ops_per_sec_max = max;
    mid.runs = runs;
    mid.violations = violations;
    mid
}

/// The warm-up and measured phases of one pair.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    pub(crate) measure_from: Instant,
    pub(crate) end: Instant,
    pub(crate) duration: Duration,
}

impl Window {
    fn new(warmup: Duration, duration: Duration) -> Self {
        let measure_from = Instant::now() + warmup;
        Window {
            measure_from,
            end: measure_from + duration,
            duration,
        }
    }
}

async fn count_commands(
    mut conn: redis::aio::MultiplexedConnection,
    window: Window,
) -> Result<u64, BoxError> {
    tokio::time::sleep_until(window.measure_from).await;
    let before = total_commands(&mut conn).await?;
    tokio::time::sleep_until(window.end).await;
    let after = total_commands(&mut conn).await?;
    // The two INFO calls themselves are not the workload's.
    Ok(after.saturating_sub(before).saturating_sub(1))
}

async fn total_commands(conn: &mut redis::aio::MultiplexedConnection) -> Result<u64, BoxError> {
    let info: String = redis::cmd("INFO").arg("stats").query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "INFO stats has no total_commands_processed".into())
}

pub(crate) fn histogram() -> Result<Histogram<u64>, BoxError> {
    Ok(Histogram::new_with_bounds(1, 120_000_000, 3)?)
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

async fn uncontended(
    scenario: Scenario,
    library: Library,
    tasks: usize,
    window: Window,
    fenced: &fenced::Client,
    raw_conn: &redis::aio::MultiplexedConnection,
) -> Result<Row, BoxError> {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let name = format!("bench:{}:{}:{t}", scenario.name(), library.name());
        let lock = fenced.lock(name.clone());
        let mut raw = RawLock::new(raw_conn.clone(), &name);
        handles.push(tokio::spawn(async move {
            let mut hist = histogram()?;
            while Instant::now() < window.end {
                let started = Instant::now();
                match library {
                    Library::Fenced => lock.acquire().await?.release().await?,
                    Library::Raw => {
                        let token = raw
                            .try_acquire()
                            .await?
                            .ok_or("raw lock unexpectedly held")?;
                        raw.release(&token).await?;
                    }
                    other => return Err(format!("{} is not a lock", other.name()).into()),
                }
                if started >= window.measure_from && started < window.end {
                    hist.record(micros(started.elapsed()))?;
                }
            }
            Ok::<_, BoxError>(hist)
        }));
    }
    let mut total = histogram()?;
    for h in handles {
        total.add(h.await??)?;
    }
    Ok(Row {
        scenario: scenario.name().into(),
        library: library.name().into(),
        ops_per_sec: total.len() as f64 / window.duration.as_secs_f64(),
        p50_us: total.value_at_quantile(0.5) as f64,
        p99_us: total.value_at_quantile(0.99) as f64,
        violations: 0,
        redis_cmds_per_op: 0.0,
        ops_per_sec_min: 0.0,
        ops_per_sec_max: 0.0,
        runs: 1,
        retries_per_success: None,
        oversold: None,
        handoff_p50_us: None,
        handoff_p99_us: None,
        max_wait_ms: None,
        fairness: None,
    })
}

/// What the contending workers share: an exclusion flag checked on every acquire, and when the
/// last holder left its section.
struct Shared {
    busy: AtomicBool,
    violations: AtomicU64,
    last_end: Mutex<Option<Instant>>,
}

async fn contended(
    library: Library,
    workers: usize,
    window: Window,
    fenced: &fenced::Client,
    raw_conn: &redis::aio::MultiplexedConnection,
) -> Result<Row, BoxError> {
    let name = format!("bench:contended:{}", library.name());
    let shared = Arc::new(Shared {
        busy: AtomicBool::new(false),
        violations: AtomicU64::new(0),
        last_end: Mutex::new(None),
    });
    let mut handles = Vec::new();
    for _ in 0..workers {
        let lock = fenced.lock(name.clone());
        let mut raw = RawLock::new(raw_conn.clone(), &name);
        let shared = shared.clone();
        handles.push(tokio::spawn(async move {
            let mut waits = histogram()?;
            let mut handoffs = histogram()?;
            let mut acquired = 0u64;
            while Instant::now() < window.end {
                let asked = Instant::now();
                // Stop waiting when the run ends; an attempt cut off here is cleaned up.
                let held = match library {
                    Library::Fenced => {
                        match tokio::time::timeout_at(window.end, lock.acquire()).await {
                            Ok(guard) => Held::Fenced(guard?),
                            Err(_) => break,
                        }
                    }
                    Library::Raw => {
                        match tokio::time::timeout_at(window.end, raw.acquire_polling()).await {
                            Ok(token) => Held::Raw(token?),
                            Err(_) => break,
                        }
                    }
                    other => return Err(format!("{} is not a lock", other.name()).into()),
                };
                let got = Instant::now();
                if shared.busy.swap(true, Ordering::SeqCst) {
                    shared.violations.fetch_add(1, Ordering::Relaxed);
                }
                let measured = asked >= window.measure_from;
                if measured {
                    acquired += 1;
                    waits.record(micros(got - asked))?;
                    if let Some(end) = *shared.last_end.lock().await
                        && end >= asked
                    {
                        handoffs.record(micros(got - end))?;
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await; // the critical section
                *shared.last_end.lock().await = Some(Instant::now());
                shared.busy.store(false, Ordering::SeqCst);
                match held {
                    Held::Fenced(guard) => guard.release().await?,
                    Held::Raw(token) => {
                        raw.release(&token).await?;
                    }
                }
            }
            Ok::<_, BoxError>((waits, handoffs, acquired))
        }));
    }
    let mut waits = histogram()?;
    let mut handoffs = histogram()?;
    let mut per_worker = Vec::new();
    for h in handles {
        let (w, ho, n) = h.await??;
        waits.add(w)?;
        handoffs.add(ho)?;
        per_worker.push(n);
    }
    let most = per_worker.iter().copied().max().unwrap_or(0);
    let least = per_worker.iter().copied().min().unwrap_or(0);
    Ok(Row {
        scenario: Scenario::Contended8.name().into(),
        library: library.name().into(),
        ops_per_sec: waits.len() as f64 / window.duration.as_secs_f64(),
        p50_us: waits.value_at_quantile(0.5) as f64,
        p99_us: waits.value_at_quantile(0.99) as f64,
        violations: shared.violations.load(Ordering::Relaxed),
        redis_cmds_per_op: 0.0,
        ops_per_sec_min: 0.0,
        ops_per_sec_max: 0.0,
        runs: 1,
        retries_per_success: None,
        oversold: None,
        handoff_p50_us: Some(handoffs.value_at_quantile(0.5) as f64),
        handoff_p99_us: Some(handoffs.value_at_quantile(0.99) as f64),
        max_wait_ms: Some(waits.max() as f64 / 1000.0),
        fairness: Some(if most > 0 {
            least as f64 / most as f64
        } else {
            0.0
        }),
    })
}

enum Held {
    Fenced(fenced::LockGuard),
    Raw(String),
}
