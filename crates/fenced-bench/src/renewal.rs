//! `renew-10000`: one process holds 10 000 leases with automatic renewal for a few renewal
//! periods. One renewal loop per client should renew them all in one pipelined round trip
//! per tick, and lose none; without scripts, in one `WATCH` transaction per dedicated
//! connection.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::measure::{cpu_us, total_commands};
use crate::report::Row;
use crate::scenario::{BoxError, Env, Library, Scenario};

/// Short enough for a few renewal periods in a few seconds; renewal runs at a third of it.
const TTL: Duration = Duration::from_secs(3);
/// How many renewal periods to watch.
const PERIODS: u32 = 3;

pub(crate) async fn renew(
    leases: usize,
    library: Library,
    env: &Env,
    stats: &MultiplexedConnection,
) -> Result<Row, BoxError> {
    // A client of its own, so its renewal counters are this scenario's alone.
    let mut builder = fenced::Client::builder(&env.url);
    if library == Library::FencedNoScripts {
        builder = builder.without_scripts();
    }
    let client = builder.connect().await?;
    let mut guards = Vec::with_capacity(leases);
    let mut batch = Vec::new();
    for i in 0..leases {
        let lock = client.lock(format!("bench:renew:{i}")).with_ttl(TTL);
        batch.push(tokio::spawn(async move { lock.try_acquire().await }));
        if batch.len() == 256 || i + 1 == leases {
            for h in batch.drain(..) {
                guards.push(h.await??.ok_or("a fresh name was held")?);
            }
        }
    }
    let mut conn = stats.clone();
    let before = client.stats();
    let (commands_before, cpu_before) = (total_commands(&mut conn).await?, cpu_us()?);
    let watched = Instant::now();
    tokio::time::sleep(TTL / 3 * PERIODS + TTL / 10).await;
    let (commands_after, cpu_after) = (total_commands(&mut conn).await?, cpu_us()?);
    let after = client.stats();
    let elapsed = watched.elapsed();
    let ticks = after.batches - before.batches;
    let per_tick = |x: f64| {
        if ticks > 0 {
            Some(x / ticks as f64)
        } else {
            None
        }
    };
    let lost = after.lost - before.lost + guards.iter().filter(|g| g.is_lost()).count() as u64;
    for g in guards {
        drop(g);
    }
    client.flush().await;
    Ok(Row {
        scenario: Scenario::Renew10000.name().into(),
        library: library.name().into(),
        ops_per_sec: (after.renewed - before.renewed) as f64 / elapsed.as_secs_f64(),
        runs: 1,
        leases: Some(leases as u64),
        renewal_ticks: Some(ticks),
        leases_per_tick: per_tick((after.renewed - before.renewed) as f64),
        redis_cmds_per_tick: per_tick(
            commands_after
                .saturating_sub(commands_before)
                .saturating_sub(1) as f64,
        ),
        client_cpu_us_per_tick: per_tick(cpu_after.saturating_sub(cpu_before) as f64),
        leases_lost: Some(lost),
        violations: lost,
        ..Row::default()
    })
}
