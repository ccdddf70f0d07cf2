//! `election-failover`: how fast an election moves on, and what observing it costs.
//!
//! Round after round, on one name:
//! - a leader (a client of its own, behind a proxy) is cut off as by a SIGKILL: the proxy
//!   drops everything, so it neither renews nor steps down. Measured: from the cut until the
//!   waiting candidate (another client) is elected; the lease is 300 ms, so about 300 ms plus
//!   what the candidate needs to notice;
//! - that leader steps down while a third candidate waits. Measured: from the call until the
//!   candidate is elected;
//! - an observer (a client of its own) follows the election. Measured: from the moment a
//!   candidate's campaign returned until the observer reported its term (0 when the observer
//!   was first).
//!
//! Then 1000 observers (over 4 clients) watch a leader that renews while nothing changes:
//! Redis commands per second over the quiet window, the leader's renewals included.

use std::net::ToSocketAddrs;
use std::time::Duration;

use fenced::{Client, FencingToken, LeaderChanges};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::measure::{cpu_us, histogram, micros, total_commands};
use crate::report::Row;
use crate::scenario::{BoxError, Env, Library, Scenario};

/// The leaders' lease: a cut-off leader is replaced about this long after the cut.
const TTL: Duration = Duration::from_millis(300);
/// Observers of the quiet window.
const OBSERVERS: usize = 1000;

pub(crate) async fn failover(
    duration: Duration,
    env: &Env,
    stats: &MultiplexedConnection,
) -> Result<Row, BoxError> {
    let name = "bench:election";
    let addr = server_addr(&env.url)?;
    let heirs = Client::connect(&env.url).await?;
    let successors = Client::connect(&env.url).await?;
    let watching = Client::connect(&env.url).await?;
    let mut changes = watching.election(name).observe()?;
    let (mut failover, mut resign, mut observed) = (histogram()?, histogram()?, histogram()?);
    let mut conn = stats.clone();
    let (commands_before, cpu_before) = (total_commands(&mut conn).await?, cpu_us()?);
    let started = Instant::now();
    let mut elections = 0u64;
    let mut violations = 0u64;
    let mut last_term = FencingToken::new(0);
    while elections < 6 || started.elapsed() < duration {
        let proxy = fenced_testkit::Proxy::start(addr)?;
        let doomed = Client::builder(&proxy.url())
            .timeout(Duration::from_millis(200))
            .connect()
            .await?;
        let leading = doomed
            .election(name)
            .with_ttl(TTL)
            .campaign("doomed")
            .await?;
        observed.record(micros(
            seen(&mut changes, leading.term(), Instant::now()).await?,
        ))?;
        violations += u64::from(leading.term() <= last_term);
        // The heir waits in the queue, then the leader is cut off.
        let election = heirs.election(name).with_ttl(TTL);
        let heir = tokio::spawn(async move { election.campaign("heir").await });
        queued(&watching, name).await?;
        proxy.set(fenced_testkit::Fault::Blackhole);
        let cut = Instant::now();
        let heir = heir.await??;
        let elected = Instant::now();
        failover.record(micros(elected - cut))?;
        observed.record(micros(seen(&mut changes, heir.term(), elected).await?))?;
        violations += u64::from(heir.term() <= leading.term());
        // A step down with a successor waiting.
        let election = successors.election(name).with_ttl(TTL);
        let successor = tokio::spawn(async move { election.campaign("successor").await });
        queued(&watching, name).await?;
        let asked = Instant::now();
        let heir_term = heir.term();
        heir.resign().await?;
        let successor = successor.await??;
        let elected = Instant::now();
        resign.record(micros(elected - asked))?;
        violations += u64::from(successor.term() <= heir_term);
        observed.record(micros(seen(&mut changes, successor.term(), elected).await?))?;
        last_term = successor.term();
        successor.resign().await?;
        drop(leading);
        drop(doomed);
        drop(proxy);
        elections += 3;
    }
    let elapsed = started.elapsed();
    let (commands_after, cpu_after) = (total_commands(&mut conn).await?, cpu_us()?);
    let quiet = quiet_window(duration, env, &mut conn, name).await?;
    let ms = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let ops = elections as f64;
    Ok(Row {
        scenario: Scenario::ElectionFailover.name().into(),
        library: Library::Fenced.name().into(),
        ops_per_sec: ops / elapsed.as_secs_f64(),
        runs: 1,
        p50_us: observed.value_at_quantile(0.5) as f64,
        p99_us: observed.value_at_quantile(0.99) as f64,
        violations,
        redis_cmds_per_op: commands_after.saturating_sub(commands_before) as f64 / ops,
        client_cpu_us_per_op: cpu_after.saturating_sub(cpu_before) as f64 / ops,
        failover_p50_ms: Some(ms(&failover, 0.5)),
        failover_max_ms: Some(failover.max() as f64 / 1000.0),
        resign_p50_ms: Some(ms(&resign, 0.5)),
        observed_p50_ms: Some(ms(&observed, 0.5)),
        observers: Some(OBSERVERS as u64),
        quiet_redis_cmds_per_sec: Some(quiet),
        ..Row::default()
    })
}

/// Waits until `changes` reports `term`; how long after `since` that was (0 if before).
async fn seen(
    changes: &mut LeaderChanges,
    term: FencingToken,
    since: Instant,
) -> Result<Duration, BoxError> {
    loop {
        let change = tokio::time::timeout(Duration::from_secs(10), changes.next())
            .await
            .map_err(|_| "the observer saw no change within 10 s")?
            .ok_or("the observer's stream ended")?;
        if change.as_ref().is_some_and(|l| l.term >= term) {
            return Ok(Instant::now().saturating_duration_since(since));
        }
    }
}

/// Waits until a candidate is queued for `name`.
async fn queued(client: &Client, name: &str) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.election(name).status().await?.candidates == 0 {
        if Instant::now() > deadline {
            return Err("a candidate never queued".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// Redis commands per second while 1000 observers (over 4 clients) watch a renewing leader.
async fn quiet_window(
    duration: Duration,
    env: &Env,
    conn: &mut MultiplexedConnection,
    name: &str,
) -> Result<f64, BoxError> {
    let leader = Client::connect(&env.url).await?;
    let leading = leader
        .election(name)
        .with_ttl(Duration::from_secs(3))
        .campaign("steady")
        .await?;
    let mut clients = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..4 {
        let c = Client::connect(&env.url).await?;
        for _ in 0..OBSERVERS / 4 {
            streams.push(c.election(name).observe()?);
        }
        clients.push(c);
    }
    for s in &mut streams {
        seen(s, leading.term(), Instant::now()).await?;
    }
    let window = duration.max(Duration::from_secs(1));
    let before = total_commands(conn).await?;
    let at = Instant::now();
    tokio::time::sleep(window).await;
    let after = total_commands(conn).await?;
    let per_sec =
        after.saturating_sub(before).saturating_sub(1) as f64 / at.elapsed().as_secs_f64();
    drop(streams);
    leading.resign().await?;
    Ok(per_sec)
}

/// `host:port` of `redis://host:port[/db]`.
fn server_addr(url: &str) -> Result<std::net::SocketAddr, BoxError> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hostport = rest.split('/').next().unwrap_or(rest);
    hostport
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| format!("no address for {hostport}").into())
}
