//! The driver: every (scenario, library) pair on the same server, repeated in alternating
//! order, medians kept.

use redis::aio::MultiplexedConnection;

use crate::measure::{Window, observe};
use crate::report::{NotApplicable, Report, Row};
use crate::scenario::{BoxError, Config, Env, Library, Scenario};

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
        Scenario::Renew10000 => {
            return crate::renewal::renew(config.renew_leases, library, env, stats).await;
        }
        Scenario::ElectionFailover => {
            return crate::election::failover(config.duration, env, stats).await;
        }
        Scenario::HeartbeatTakeover => {
            return crate::heartbeat::takeover(config.duration, env, stats).await;
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
        Scenario::Waiters1000
        | Scenario::Renew10000
        | Scenario::ElectionFailover
        | Scenario::HeartbeatTakeover => {
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
