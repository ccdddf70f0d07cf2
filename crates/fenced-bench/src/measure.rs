//! What a run measures with: the warm-up and measured phases, the server's counters (commands,
//! CPU, Lua time), the process's CPU, and latency histograms.

use std::time::Duration;

use hdrhistogram::Histogram;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::scenario::BoxError;

/// The warm-up and measured phases of one pair.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    pub(crate) measure_from: Instant,
    pub(crate) end: Instant,
    pub(crate) duration: Duration,
}

impl Window {
    pub(crate) fn new(warmup: Duration, duration: Duration) -> Self {
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

pub(crate) async fn observe(
    mut conn: MultiplexedConnection,
    window: Window,
) -> Result<Seen, BoxError> {
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
