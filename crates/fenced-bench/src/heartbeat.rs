//! `heartbeat-takeover`: a holder that hangs under a heartbeat, its guard alive, until a
//! waiter is granted.
//!
//! Round after round, on one name: a holder (a client of its own) takes the lock with a
//! 500 ms lease and a 300 ms heartbeat (`with_heartbeat`), beats once and then hangs: it
//! keeps its guard, never beats again and never releases. A waiter on another client asks for
//! the name meanwhile. Measured: from the holder's last beat until the waiter's acquire
//! returned. `with_heartbeat` bounds it: the holder keeps the name at most its maximum
//! silence and a ttl after its last beat (the last renewal goes out no later than the silence
//! allows, and Redis keeps it a ttl). The row's target adds 100 ms for the waiter to notice.
//! Coming later than the target is reported, not counted: on a loaded machine it is timing,
//! not safety.
//!
//! Counted as violations:
//! - the waiter granted before the holder's `valid_until`: the holder could still count on
//!   its lease (the last grant or renewal Redis confirmed, a ttl from before it was sent, less
//!   the drift allowance), so two would have held the name at once. This is the lower bound
//!   used, rather than one reckoned from the last beat: renewals go out between a sixth and a
//!   third of a ttl after the one before (early when it lets leases share a round trip), so
//!   how long before the silence ran out the last one went out is the renewal loop's affair,
//!   and only the holder's own deadline is promised;
//! - the waiter's fencing token not greater than the holder's;
//! - the holder's lease not reported lost for its silence (`LostCause::Silent`) once the
//!   waiter has the name.

use std::time::Duration;

use fenced::{Client, LostCause};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::measure::{cpu_us, histogram, micros, total_commands};
use crate::report::Row;
use crate::scenario::{BoxError, Env, Library, Scenario};

/// The holder's lease.
const TTL: Duration = Duration::from_millis(500);
/// The longest the holder may go without a beat and still be renewed.
const SILENCE: Duration = Duration::from_millis(300);
/// What the waiter may need beyond the bound (`SILENCE + TTL`) to find the name free.
const NOTICE: Duration = Duration::from_millis(100);
/// How long one step may take before the scenario fails instead of hanging.
const STEP_LIMIT: Duration = Duration::from_secs(10);
const NAME: &str = "bench:heartbeat-takeover";

pub(crate) async fn takeover(
    duration: Duration,
    env: &Env,
    stats: &MultiplexedConnection,
) -> Result<Row, BoxError> {
    // A round lasts about 0.7 s: five takeovers give a p50 and a max worth reading; a run
    // shorter than a second (a smoke test) only shows that it works, in three.
    let min_rounds: u64 = if duration < Duration::from_secs(1) {
        3
    } else {
        5
    };
    // The holder on a client of its own, whose renewal loop tracks this lease alone; the
    // waiter on the run's client, so it waits as the run is configured (keyspace events or
    // not).
    let holder = Client::connect(&env.url).await?;
    let hung = holder.lock(NAME).with_ttl(TTL).with_heartbeat(SILENCE);
    let mut takeovers = histogram()?;
    let mut longest = Duration::ZERO;
    let mut conn = stats.clone();
    let (commands_before, cpu_before) = (total_commands(&mut conn).await?, cpu_us()?);
    let started = Instant::now();
    let (mut rounds, mut violations) = (0u64, 0u64);
    while rounds < min_rounds || started.elapsed() < duration {
        let held = within("the holder was not granted", hung.acquire()).await??;
        // The holder's last sign of life: from here on it hangs with its guard alive. (The
        // grant counts as a beat too; this one comes a moment later.)
        let last_beat = Instant::now();
        held.beat();
        let waiting = env.fenced.lock(NAME).with_ttl(TTL);
        let waiter = tokio::spawn(async move {
            let guard = waiting.acquire().await?;
            // Read in the waiter's task, so that the measure leaves out the hop back.
            Ok::<_, fenced::Error>((guard, Instant::now()))
        });
        let (granted, granted_at) = within("the waiter was not granted", waiter).await???;
        let took = granted_at.saturating_duration_since(last_beat);
        takeovers.record(micros(took))?;
        longest = longest.max(took);
        violations += u64::from(granted_at < held.valid_until());
        violations += u64::from(granted.fencing_token() <= held.fencing_token());
        // Past its deadline, a lease not yet given up is declared lost by this call for its
        // deadline (expired, or renewal late): only the renewal loop names silence.
        let silent = matches!(held.lease().lost_cause(), Some(LostCause::Silent { .. }));
        violations += u64::from(!silent);
        // A lease given up for silence is left to run out: dropping its guard deletes
        // nothing, so the waiter's hold is untouched either way.
        drop(held);
        granted.release().await?;
        rounds += 1;
    }
    let elapsed = started.elapsed();
    let (commands_after, cpu_after) = (total_commands(&mut conn).await?, cpu_us()?);
    let ops = rounds as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Ok(Row {
        scenario: Scenario::HeartbeatTakeover.name().into(),
        library: Library::Fenced.name().into(),
        ops_per_sec: ops / elapsed.as_secs_f64(),
        runs: 1,
        p50_us: takeovers.value_at_quantile(0.5) as f64,
        p99_us: takeovers.value_at_quantile(0.99) as f64,
        violations,
        // The second INFO is not the workload's.
        redis_cmds_per_op: commands_after
            .saturating_sub(commands_before)
            .saturating_sub(1) as f64
            / ops,
        client_cpu_us_per_op: cpu_after.saturating_sub(cpu_before) as f64 / ops,
        takeovers: Some(rounds),
        takeover_p50_ms: Some(takeovers.value_at_quantile(0.5) as f64 / 1000.0),
        takeover_max_ms: Some(ms(longest)),
        takeover_target_ms: Some(ms(SILENCE + TTL + NOTICE)),
        ..Row::default()
    })
}

/// `step`, or an error saying `what` once it has taken [`STEP_LIMIT`].
async fn within<T>(what: &str, step: impl std::future::Future<Output = T>) -> Result<T, BoxError> {
    tokio::time::timeout(STEP_LIMIT, step)
        .await
        .map_err(|_| BoxError::from(format!("{what} within {} s", STEP_LIMIT.as_secs())))
}
