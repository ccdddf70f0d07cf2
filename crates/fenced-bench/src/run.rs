//! The driver: every (scenario, library) pair on the same server, repeated in alternating
//! order, medians kept.

use std::str::FromStr;
use std::time::Duration;

use hdrhistogram::Histogram;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::report::{NotApplicable, Report, Row};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// One task, acquire + release cycles on one name.
    Uncontended1,
    /// 32 tasks on 32 distinct names, one shared client.
    Uncontended32,
    /// 8 workers on one name, each holding it about 1 ms.
    Contended8,
    /// 16 tasks sharing 4 leased permits of one semaphore, each holding one about 1 ms.
    Semaphore4of16,
    /// One task: a reentrant lock taken, entered twice more, and given back three times.
    ReentrantDepth3,
    /// 32 tasks locking random items of 10 000 through 1 stripe (one global lock).
    Striped1,
    /// The same through 16 stripes.
    Striped16,
    /// The same through 256 stripes.
    Striped256,
    /// The same through 1024 stripes.
    Striped1024,
    /// 8 workers on one fair lock, each holding it ~1ms.
    Fair8,
    /// 32 readers and 1 writer on one read-write lock.
    RwReads,
    /// 1000 waiters on one latch, opened by one count down, round after round.
    Latch1000,
    /// 16 tasks taking 3 of 6 names at a time.
    Multi3,
    /// One holder keeps a name for a few seconds while 1000 tasks of one process wait.
    Waiters1000,
    /// One process holds 10 000 leases with automatic renewal for a few renewal periods.
    Renew10000,
    /// The seckill sale, round after round: 20 workers make 300 purchase attempts on a stock
    /// of 20.
    Seckill,
    /// 32 tasks changing one counter as fast as they can.
    CounterContended,
    /// 1000 requests at once for a cold cache key, over 4 clients, round after round.
    Stampede1000,
    /// One task's lock cycles over 3 independent masters, each 1 ms away (Redlock).
    Redlock3,
    /// One task's lock cycles over 5 independent masters, each 1 ms away.
    Redlock5,
    /// As `Redlock5`, with one master 50 ms away.
    Redlock5Slow,
    /// 32 tasks' lock cycles on a Redis Cluster of 3 masters, each task on its own name.
    ClusterUncontended32,
    /// Leaders cut off (as by a SIGKILL) and stepping down, candidates waiting, an observer
    /// following; then 1000 observers of a quiet election.
    ElectionFailover,
}

impl Scenario {
    /// Every scenario, in run order.
    pub const ALL: [Scenario; 23] = [
        Scenario::Uncontended1,
        Scenario::Uncontended32,
        Scenario::Contended8,
        Scenario::Semaphore4of16,
        Scenario::ReentrantDepth3,
        Scenario::Striped1,
        Scenario::Striped16,
        Scenario::Striped256,
        Scenario::Striped1024,
        Scenario::Fair8,
        Scenario::RwReads,
        Scenario::Latch1000,
        Scenario::Multi3,
        Scenario::Waiters1000,
        Scenario::Renew10000,
        Scenario::Seckill,
        Scenario::CounterContended,
        Scenario::Stampede1000,
        Scenario::Redlock3,
        Scenario::Redlock5,
        Scenario::Redlock5Slow,
        Scenario::ClusterUncontended32,
        Scenario::ElectionFailover,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended1 => "uncontended-1",
            Scenario::Uncontended32 => "uncontended-32",
            Scenario::Contended8 => "contended-8",
            Scenario::Semaphore4of16 => "semaphore-4of16",
            Scenario::ReentrantDepth3 => "reentrant-depth-3",
            Scenario::Striped1 => "striped-1",
            Scenario::Striped16 => "striped-16",
            Scenario::Striped256 => "striped-256",
            Scenario::Striped1024 => "striped-1024",
            Scenario::Fair8 => "fair-8",
            Scenario::RwReads => "rw-reads",
            Scenario::Latch1000 => "latch-1000",
            Scenario::Multi3 => "multi-3",
            Scenario::Waiters1000 => "waiters-1000",
            Scenario::Renew10000 => "renew-10000",
            Scenario::Seckill => "seckill",
            Scenario::CounterContended => "counter-contended",
            Scenario::Stampede1000 => "stampede-1000",
            Scenario::Redlock3 => "redlock-3",
            Scenario::Redlock5 => "redlock-5",
            Scenario::Redlock5Slow => "redlock-5-slow",
            Scenario::ClusterUncontended32 => "cluster-uncontended-32",
            Scenario::ElectionFailover => "election-failover",
        }
    }

    /// The libraries that can do this scenario's job.
    pub fn libraries(self) -> &'static [Library] {
        use Library::*;
        match self {
            Scenario::Uncontended1 | Scenario::Uncontended32 | Scenario::Contended8 => &[
                Fenced,
                FencedScripted,
                FencedNoScripts,
                FencedUnfenced,
                Raw,
                Rslock,
                Redlock,
            ],
            Scenario::Waiters1000 => &[Fenced, FencedUnfenced, Raw, Rslock],
            Scenario::Renew10000 => &[Fenced, FencedNoScripts],
            Scenario::Semaphore4of16
            | Scenario::ReentrantDepth3
            | Scenario::Striped1
            | Scenario::Striped16
            | Scenario::Striped256
            | Scenario::Striped1024
            | Scenario::Fair8
            | Scenario::RwReads
            | Scenario::Latch1000
            | Scenario::Multi3 => &[Fenced],
            Scenario::Seckill => &[FencedTx, FencedScript, FencedLock],
            Scenario::CounterContended => &[FencedTx, FencedScript],
            Scenario::Stampede1000 => &[FencedCache, CacheAside],
            Scenario::Redlock3 | Scenario::Redlock5 | Scenario::Redlock5Slow => {
                &[Fenced, Raw, Rslock, Redlock]
            }
            Scenario::ClusterUncontended32 | Scenario::ElectionFailover => &[Fenced],
        }
    }

    /// The libraries left out, and why.
    pub fn not_applicable(self) -> &'static [(Library, &'static str)] {
        use Library::*;
        match self {
            Scenario::Waiters1000 => &[(
                Redlock,
                "synchronous: 1000 waiters would need 1000 OS threads, each sleeping in thread::sleep",
            )],
            Scenario::Renew10000 => &[
                (
                    Raw,
                    "no renewal: the hand-written floor only acquires and releases",
                ),
                (
                    Rslock,
                    "extend() only, no automatic renewal: the caller would need a timer per lock",
                ),
                (Redlock, "no extend and no renewal"),
            ],
            Scenario::Semaphore4of16 => &[
                (Raw, "a plain lock only"),
                (Rslock, "a plain lock only: no semaphore"),
                (Redlock, "a plain lock only: no semaphore"),
            ],
            Scenario::ReentrantDepth3 => &[
                (Raw, "a plain lock only"),
                (
                    Rslock,
                    "no re-entry: a second lock() by the holder waits for itself",
                ),
                (
                    Redlock,
                    "no re-entry: a second lock() by the holder waits for itself",
                ),
            ],
            Scenario::ElectionFailover => &[
                (Raw, "no election"),
                (Rslock, "no election: a lock, without terms or observers"),
                (Redlock, "no election: a lock, without terms or observers"),
            ],
            Scenario::ClusterUncontended32 => &[
                (Raw, "written for one server"),
                (Rslock, "no Redis Cluster mode"),
                (Redlock, "no Redis Cluster mode"),
            ],
            _ => &[],
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
    /// This project's lock on a client with `counted_grants(false)`: granted by script.
    FencedScripted,
    /// This project's lock on a client built without scripts (`without_scripts`): each step
    /// a `WATCH`/`MULTI`/`EXEC` transaction.
    FencedNoScripts,
    /// This project's unfenced lock (`Lock::unfenced`): no fencing token.
    FencedUnfenced,
    /// The hand-written redis-rs lock floor.
    Raw,
    /// rslock 0.10 (async, redis-rs 1.x).
    Rslock,
    /// redlock 2.0 (redlock-rs; synchronous, run on blocking threads).
    Redlock,
    /// This project's WATCH/MULTI/EXEC transaction.
    FencedTx,
    /// This project's atomic script (`decrement_if_at_least`).
    FencedScript,
    /// This project's lock around read-check-write, with fenced writes.
    FencedLock,
    /// This project's `Cache::get_or_compute`.
    FencedCache,
    /// Cache-aside without protection: GET, and on a miss query the database and SET.
    CacheAside,
}

impl Library {
    /// Every library.
    pub const ALL: [Library; 12] = [
        Library::Fenced,
        Library::FencedScripted,
        Library::FencedNoScripts,
        Library::FencedUnfenced,
        Library::Raw,
        Library::Rslock,
        Library::Redlock,
        Library::FencedTx,
        Library::FencedScript,
        Library::FencedLock,
        Library::FencedCache,
        Library::CacheAside,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Library::Fenced => "fenced",
            Library::FencedScripted => "fenced-scripted",
            Library::FencedNoScripts => "fenced-noscripts",
            Library::FencedUnfenced => "fenced-unfenced",
            Library::Raw => "raw",
            Library::Rslock => "rslock",
            Library::Redlock => "redlock",
            Library::FencedTx => "fenced-tx",
            Library::FencedScript => "fenced-script",
            Library::FencedLock => "fenced-lock",
            Library::FencedCache => "fenced-cache",
            Library::CacheAside => "cache-aside",
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
    /// Measured time per (scenario, library) in the throughput scenarios.
    pub duration: Duration,
    /// Unmeasured time before it.
    pub warmup: Duration,
    /// How long the holder keeps the lock in `waiters-1000`.
    pub hold: Duration,
    /// Scenarios to run.
    pub scenarios: Vec<Scenario>,
    /// Libraries to run.
    pub libraries: Vec<Library>,
    /// Runs of each pair; the libraries take turns, in alternating order, so drift of the
    /// machine's speed hits all of them alike. The report holds each pair's median run.
    pub repeat: usize,
    /// fenced's clients wake waiters by keyspace events and release without `PUBLISH`
    /// (connecting turns the events on, so every library runs against a server sending them).
    pub keyspace_events: bool,
}

/// What every scenario gets: the server's URL and a few shared connections.
pub(crate) struct Env {
    pub(crate) url: String,
    pub(crate) fenced: fenced::Client,
    /// A client that grants the lock by script (`counted_grants(false)`).
    pub(crate) scripted: fenced::Client,
    /// A client that sends no scripts (`without_scripts`).
    pub(crate) no_scripts: fenced::Client,
    pub(crate) raw: MultiplexedConnection,
}

/// Runs every configured pair against the server at `url`.
pub async fn run(config: &Config, url: &str) -> Result<Report, BoxError> {
    let mut report = Report::default();
    let redis_client = redis::Client::open(url)?;
    let env = Env {
        url: url.to_owned(),
        fenced: fenced::Client::builder(url)
            .keyspace_events(config.keyspace_events)
            .connect()
            .await?,
        scripted: fenced::Client::builder(url)
            .keyspace_events(config.keyspace_events)
            .counted_grants(false)
            .connect()
            .await?,
        no_scripts: fenced::Client::builder(url)
            .keyspace_events(config.keyspace_events)
            .without_scripts()
            .connect()
            .await?,
        raw: redis_client.get_multiplexed_async_connection().await?,
    };
    let mut stats_conn = redis_client.get_multiplexed_async_connection().await?;
    for &scenario in &config.scenarios {
        for (library, why) in scenario.not_applicable() {
            if config.libraries.contains(library) {
                report.not_applicable.push(NotApplicable {
                    scenario: scenario.name().into(),
                    library: library.name().into(),
                    why: (*why).into(),
                });
            }
        }
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
                let row = run_pair(scenario, libraries[i], config, &env, &stats_conn).await?;
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

async fn run_pair(
    scenario: Scenario,
    library: Library,
    config: &Config,
    env: &Env,
    stats: &MultiplexedConnection,
) -> Result<Row, BoxError> {
    match scenario {
        Scenario::Waiters1000 => {
            return crate::waiters::waiters(library, 1000, config.hold, env, stats).await;
        }
        Scenario::Renew10000 => return crate::renewal::renew(10_000, library, env, stats).await,
        Scenario::ElectionFailover => {
            return crate::election::failover(config.duration, env, stats).await;
        }
        _ => {}
    }
    let window = Window::new(config.warmup, config.duration);
    let observer = tokio::spawn(observe(stats.clone(), window));
    let mut row = match scenario {
        Scenario::Uncontended1 => {
            crate::locks::uncontended(scenario, library, 1, window, env).await?
        }
        Scenario::Uncontended32 => {
            crate::locks::uncontended(scenario, library, 32, window, env).await?
        }
        Scenario::Contended8 => crate::locks::contended(library, 8, window, env).await?,
        Scenario::Semaphore4of16 => crate::family::semaphore(16, 4, window, env).await?,
        Scenario::ReentrantDepth3 => crate::family::reentrant(3, window, env).await?,
        Scenario::Striped1 => crate::family::striped(scenario, 1, window, env).await?,
        Scenario::Striped16 => crate::family::striped(scenario, 16, window, env).await?,
        Scenario::Striped256 => crate::family::striped(scenario, 256, window, env).await?,
        Scenario::Striped1024 => crate::family::striped(scenario, 1024, window, env).await?,
        Scenario::Fair8 => crate::family::fair(window, env).await?,
        Scenario::RwReads => crate::family::rw_reads(window, env).await?,
        Scenario::Latch1000 => crate::family::latch(window, env).await?,
        Scenario::Multi3 => crate::family::multi(window, env).await?,
        Scenario::Seckill => crate::optimistic::seckill(library, window, env).await?,
        Scenario::CounterContended => crate::optimistic::counter(library, 32, window, env).await?,
        Scenario::Stampede1000 => crate::stampede::stampede(library, window, env).await?,
        Scenario::Redlock3 => crate::redlock3::redlock3(library, window).await?,
        Scenario::Redlock5 => crate::redlock3::redlock(scenario, 5, None, library, window).await?,
        Scenario::Redlock5Slow => {
            let slow = Some(crate::redlock3::SLOW);
            crate::redlock3::redlock(scenario, 5, slow, library, window).await?
        }
        Scenario::ClusterUncontended32 => crate::cluster::uncontended(library, window).await?,
        Scenario::Waiters1000 | Scenario::Renew10000 | Scenario::ElectionFailover => {
            return Err("handled above".into());
        }
    };
    let seen = observer.await??;
    let ops = row.ops_per_sec * window.duration.as_secs_f64();
    // Redlock and the cluster run on servers of their own: the shared server's counters
    // are not their cost.
    if ops > 0.0
        && !matches!(
            scenario,
            Scenario::Redlock3
                | Scenario::Redlock5
                | Scenario::Redlock5Slow
                | Scenario::ClusterUncontended32
        )
    {
        row.redis_cmds_per_op = seen.commands as f64 / ops;
        row.client_cpu_us_per_op = seen.cpu_us as f64 / ops;
        row.redis_cpu_us_per_op = seen.server_cpu_us as f64 / ops;
        row.lua_us_per_op = seen.lua_us as f64 / ops;
    }
    Ok(row)
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

    /// The same window, starting `by` later (after a deployment that took that long to form).
    pub(crate) fn later(self, by: Duration) -> Self {
        Window {
            measure_from: self.measure_from + by,
            end: self.end + by,
            duration: self.duration,
        }
    }

    /// Whether an operation that started at `t` counts.
    pub(crate) fn measures(&self, t: Instant) -> bool {
        t >= self.measure_from && t < self.end
    }
}

/// What the server did and the client spent over a window.
pub(crate) struct Seen {
    pub(crate) commands: u64,
    pub(crate) cpu_us: u64,
    pub(crate) server_cpu_us: u64,
    pub(crate) lua_us: u64,
}

async fn observe(mut conn: MultiplexedConnection, window: Window) -> Result<Seen, BoxError> {
    tokio::time::sleep_until(window.measure_from).await;
    let (commands, cpu) = (total_commands(&mut conn).await?, cpu_us()?);
    let server_cpu = server_cpu_us(&mut conn).await?;
    let lua = lua_us(&mut conn).await?;
    tokio::time::sleep_until(window.end).await;
    Ok(Seen {
        server_cpu_us: server_cpu_us(&mut conn).await?.saturating_sub(server_cpu),
        lua_us: lua_us(&mut conn).await?.saturating_sub(lua),
        // The second INFO is not the workload's.
        commands: total_commands(&mut conn)
            .await?
            .saturating_sub(commands)
            .saturating_sub(1),
        cpu_us: cpu_us()?.saturating_sub(cpu),
    })
}

/// `total_commands_processed` from `INFO stats`.
pub(crate) async fn total_commands(conn: &mut MultiplexedConnection) -> Result<u64, BoxError> {
    let info: String = redis::cmd("INFO").arg("stats").query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "INFO stats has no total_commands_processed".into())
}

/// User + system CPU time of the redis-server process so far (`INFO cpu`), µs.
pub(crate) async fn server_cpu_us(conn: &mut MultiplexedConnection) -> Result<u64, BoxError> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    let field = |name: &str| -> Result<f64, BoxError> {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("INFO cpu has no {name}").into())
    };
    let seconds = field("used_cpu_user:")? + field("used_cpu_sys:")?;
    Ok((seconds * 1e6) as u64)
}

/// Time spent in scripts so far: the `usec` of `EVAL` and `EVALSHA` in `INFO commandstats`.
pub(crate) async fn lua_us(conn: &mut MultiplexedConnection) -> Result<u64, BoxError> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(info
        .lines()
        .filter(|l| l.starts_with("cmdstat_eval:") || l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split(',')
                .find_map(|f| f.strip_prefix("usec="))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum())
}

/// User + system CPU time of this process so far, µs.
pub(crate) fn cpu_us() -> Result<u64, BoxError> {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_SELF)?;
    let us = |t: nix::sys::time::TimeVal| (t.tv_sec() as u64) * 1_000_000 + t.tv_usec() as u64;
    Ok(us(usage.user_time()) + us(usage.system_time()))
}

pub(crate) fn histogram() -> Result<Histogram<u64>, BoxError> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}
