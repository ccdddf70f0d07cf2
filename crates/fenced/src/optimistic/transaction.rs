//! Optimistic transactions: `WATCH`, read and decide, `MULTI` … `EXEC`, retried with
//! backoff when a watched key changed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{Cmd, FromRedisValue, ToRedisArgs, Value};
use tokio::time::Instant;

use crate::backend::bounded;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::optimistic::pool::Pooled;
use crate::util::Backoff;

/// How a transaction retries after a conflict: exponential backoff with full jitter, up to an
/// attempt limit and/or a deadline, whichever comes first.
///
/// ```
/// use std::time::Duration;
/// use fenced::RetryPolicy;
///
/// let policy = RetryPolicy::default()
///     .with_max_attempts(20)
///     .with_deadline(Some(Duration::from_secs(2)));
/// assert_eq!(policy.max_attempts(), 20);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: u32,
    deadline: Option<Duration>,
    backoff_min: Duration,
    backoff_max: Duration,
}

impl Default for RetryPolicy {
    /// Up to 50 attempts within 10s; backoff from up to 1ms, doubling, capped at 100ms.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 50,
            deadline: Some(Duration::from_secs(10)),
            backoff_min: Duration::from_millis(1),
            backoff_max: Duration::from_millis(100),
        }
    }
}

impl RetryPolicy {
    /// At most `attempts` runs of the transaction (at least 1).
    pub const fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Give up once `deadline` has passed since the transaction started (`None`: no deadline).
    pub const fn with_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = deadline;
        self
    }

    /// The backoff after the first conflict is drawn from `0..=min`, doubling after each
    /// further conflict up to `max`.
    pub const fn with_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff_min = min;
        self.backoff_max = max;
        self
    }

    /// The attempt limit.
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    fn validate(&self) -> Result<()> {
        if self.max_attempts == 0 {
            return Err(Error::invalid(
                "max_attempts is 0; a transaction needs at least one attempt",
            ));
        }
        if self.backoff_min.is_zero()
            || self.backoff_max < self.backoff_min
            || self.backoff_max > Duration::from_secs(60)
        {
            return Err(Error::invalid(format!(
                "backoff {:?}..{:?} is not a range within (0, 60s]",
                self.backoff_min, self.backoff_max
            )));
        }
        Ok(())
    }
}

/// The handle a transaction's step reads through and queues its writes on.
///
/// Reads (`get`, `query`) go to Redis at once, on the transaction's own connection, after
/// the `WATCH`. Writes (`set`, `incr`, `del`, `queue`) are only queued: they are sent in one
/// `MULTI` … `EXEC` when the step returns `Ok`, and applied all together or (when a watched
/// key changed meanwhile) not at all. A handle is valid for its one attempt; using it later
/// is an error.
#[derive(Clone)]
pub struct Tx {
    conn: MultiplexedConnection,
    state: Arc<TxState>,
}

struct TxState {
    live: AtomicBool,
    queued: Mutex<Vec<Cmd>>,
    attempt: u32,
    timeout: Duration,
}

impl TxState {
    fn queued(&self) -> std::sync::MutexGuard<'_, Vec<Cmd>> {
        // A Vec of commands: a poisoned lock still holds a usable list.
        crate::util::lock_unpoisoned(&self.queued)
    }
}

impl Tx {
    /// Which attempt this is (1 for the first run).
    pub fn attempt(&self) -> u32 {
        self.state.attempt
    }

    /// `GET key`, parsed as `T` (`None` when the key does not exist).
    ///
    /// # Errors
    ///
    /// Transport errors, a reply that does not parse as `T`, or use after the attempt ended.
    pub async fn get<T: FromRedisValue>(&self, key: &str) -> Result<Option<T>> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(key);
        self.query(&cmd).await
    }

    /// Any read command, on the transaction's connection.
    ///
    /// # Errors
    ///
    /// Transport errors, a reply that does not parse as `T`, or use after the attempt ended.
    pub async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        self.check_live()?;
        let mut conn = self.conn.clone();
        let timeout = self.state.timeout;
        bounded(timeout, "transaction read", cmd.query_async(&mut conn)).await
    }

    /// Queues `SET key value`.
    pub fn set(&self, key: &str, value: impl ToRedisArgs) {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(value);
        self.queue(cmd);
    }

    /// Queues `INCRBY key by`.
    pub fn incr(&self, key: &str, by: i64) {
        let mut cmd = redis::cmd("INCRBY");
        cmd.arg(key).arg(by);
        self.queue(cmd);
    }

    /// Queues `DEL key`.
    pub fn del(&self, key: &str) {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(key);
        self.queue(cmd);
    }

    /// Queues any write command, to run inside `MULTI` … `EXEC`.
    pub fn queue(&self, cmd: Cmd) {
        if self.state.live.load(Ordering::Acquire) {
            self.state.queued().push(cmd);
        }
    }

    fn check_live(&self) -> Result<()> {
        if self.state.live.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(Error::invalid(
                "this transaction handle belongs to an attempt that has ended",
            ))
        }
    }
}

impl Client {
    /// Runs `step` as an optimistic transaction over `keys`, with the default [`RetryPolicy`].
    /// See [`transaction_with`](Self::transaction_with).
    ///
    /// # Examples
    ///
    /// The seckill purchase from the seed documents: buy one item if any is left.
    ///
    /// ```
    /// # fenced_testkit::doctest(|url| async move {
    /// let client = fenced::Client::connect(&url).await?;
    /// # let mut c = fenced::redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;
    /// # let _: () = fenced::redis::cmd("SET").arg("stock:42").arg(20).query_async(&mut c).await?;
    /// let bought = client
    ///     .transaction(&["stock:42"], |tx| async move {
    ///         let stock: i64 = tx.get("stock:42").await?.unwrap_or(0);
    ///         if stock <= 0 {
    ///             return Ok::<_, fenced::Error>(false); // sold out: nothing is written
    ///         }
    ///         tx.set("stock:42", stock - 1);
    ///         Ok(true)
    ///     })
    ///     .await?;
    /// assert!(bought);
    /// # Ok(()) });
    /// ```
    ///
    /// # Errors
    ///
    /// As [`transaction_with`](Self::transaction_with).
    pub async fn transaction<T, E, F, Fut>(&self, keys: &[&str], step: F) -> Result<T, E>
    where
        F: FnMut(Tx) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        self.transaction_with(keys, RetryPolicy::default(), step)
            .await
    }

    /// Runs `step` as an optimistic transaction over `keys`.
    ///
    /// Each attempt: `WATCH keys` on a dedicated connection (never the shared multiplexed
    /// one); run `step`, which reads through its [`Tx`] and queues writes; then
    /// - `step` returned `Err(e)`: `UNWATCH`, and `Err(e)` is returned as it is;
    /// - `Ok` with nothing queued: `UNWATCH`, and its value is returned (a decision to write
    ///   nothing, like "sold out");
    /// - `Ok` with writes queued: `MULTI`, the writes, `EXEC`. If a watched key changed since
    ///   the `WATCH`, Redis refuses the whole `EXEC`, and the step runs again after a backoff.
    ///
    /// `step` may therefore run several times: keep side effects other than `Tx` writes out
    /// of it. Keys are used as given (no namespace prefix).
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] (converted into `E`) with the number of attempts when the policy's
    /// limit or deadline is reached; [`Error::InvalidArgument`] for a bad policy or no keys;
    /// transport errors. After a timeout of the `EXEC` itself the outcome is unknown.
    ///
    /// A queued command that fails *inside* `EXEC` (say, `INCRBY` on a key holding text) does
    /// not undo the others: Redis has no rollback. That error is returned as
    /// [`Error::Redis`] and the step is not run again, since the other writes did happen.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future mid-way closes its connection, which makes the server drop the
    /// `WATCH` and any open `MULTI`: nothing is committed that `EXEC` did not already commit,
    /// and no dirty connection goes back to the pool.
    pub async fn transaction_with<T, E, F, Fut>(
        &self,
        keys: &[&str],
        policy: RetryPolicy,
        mut step: F,
    ) -> Result<T, E>
    where
        F: FnMut(Tx) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        policy.validate()?;
        if keys.is_empty() {
            return Err(Error::invalid("a transaction needs at least one key to watch").into());
        }
        for key in keys {
            super::atomic::check_key(key)?;
        }
        let started = Instant::now();
        let deadline = match policy.deadline {
            Some(d) => Some(started.checked_add(d).ok_or_else(|| {
                Error::invalid(format!("transaction deadline {d:?} overflows the clock"))
            })?),
            None => None,
        };
        // One server only: a transaction's WATCH lives on one connection to one node.
        self.core().node()?;
        if self.core().backend().is_cluster() {
            return Err(Error::invalid(
                "optimistic transactions (WATCH/MULTI/EXEC) need one Redis server so far; on a Redis Cluster use the atomic helpers (compare_and_set, set_if_version, decrement_if_at_least), which run as one script on the key's node",
            )
            .into());
        }
        let pool = self.tx_pool();
        let timeout = self.timeout();
        let mut backoff = Backoff::new(policy.backoff_min, policy.backoff_max);
        let mut attempt = 0u32;
        loop {
            attempt = attempt.saturating_add(1);
            if attempt > 1 && deadline.is_some_and(|d| Instant::now() >= d) {
                // The backoff ran into the deadline: the conflicts are what stopped us.
                return Err(Error::Conflict {
                    attempts: attempt - 1,
                    waited: started.elapsed(),
                }
                .into());
            }
            // Waiting for a free pooled connection counts against the deadline too.
            let mut pooled = match deadline {
                Some(d) => match tokio::time::timeout_at(d, watch(pool, keys, timeout)).await {
                    Ok(pooled) => pooled?,
                    Err(_) => {
                        return Err(Error::Timeout {
                            operation: "transaction (waiting for a pooled connection)",
                            after: started.elapsed(),
                        }
                        .into());
                    }
                },
                None => watch(pool, keys, timeout).await?,
            };
            let tx = Tx {
                conn: pooled.conn(),
                state: Arc::new(TxState {
                    live: AtomicBool::new(true),
                    queued: Mutex::new(Vec::new()),
                    attempt,
                    timeout,
                }),
            };
            let outcome = step(tx.clone()).await;
            tx.state.live.store(false, Ordering::Release);
            let writes = std::mem::take(&mut *tx.state.queued());
            let value = match outcome {
                Err(e) => {
                    unwatch(&mut pooled, timeout).await;
                    return Err(e);
                }
                Ok(value) => value,
            };
            if writes.is_empty() {
                unwatch(&mut pooled, timeout).await;
                return Ok(value);
            }
            if exec(&mut pooled, &writes, timeout).await? {
                return Ok(value);
            }
            // A watched key changed: EXEC was refused and the connection is clean again.
            crate::core::metrics::transaction_conflict();
            let now = Instant::now();
            if attempt >= policy.max_attempts || deadline.is_some_and(|d| now >= d) {
                return Err(Error::Conflict {
                    attempts: attempt,
                    waited: started.elapsed(),
                }
                .into());
            }
            drop(pooled);
            let mut pause = backoff.next_full_jitter();
            if let Some(d) = deadline {
                pause = pause.min(d.saturating_duration_since(now));
            }
            tracing::trace!(attempt, ?pause, "fenced: transaction conflict; retrying");
            tokio::time::sleep(pause).await;
        }
    }
}

/// Checks out a connection and `WATCH`es the keys. A reused connection that turns out to be
/// broken (the server restarted, say) is replaced by a fresh one once.
async fn watch(
    pool: &Arc<super::pool::TxPool>,
    keys: &[&str],
    timeout: Duration,
) -> Result<Pooled> {
    let mut fresh = false;
    loop {
        let mut pooled = pool.checkout(fresh).await?;
        let mut cmd = redis::cmd("WATCH");
        cmd.arg(keys);
        pooled.dirty();
        let mut conn = pooled.conn();
        let result = bounded(timeout, "watch", cmd.query_async::<()>(&mut conn)).await;
        match result {
            Ok(()) => return Ok(pooled),
            Err(e) if e.is_transient() && !fresh => fresh = true,
            Err(e) => return Err(e),
        }
    }
}

/// `UNWATCH`; the connection goes back to the pool only if it answered.
async fn unwatch(pooled: &mut Pooled, timeout: Duration) {
    let mut conn = pooled.conn();
    if let Ok(Ok(())) =
        tokio::time::timeout(timeout, redis::cmd("UNWATCH").query_async::<()>(&mut conn)).await
    {
        pooled.cleaned();
    }
}

/// `MULTI`, the writes, `EXEC`: true when committed, false when a watched key changed.
///
/// Sent as a plain pipeline whose every reply is read here, not as redis-rs's atomic
/// pipeline: when the server refuses `MULTI` itself (an ACL without it), redis-rs 1.8's
/// reply counting underflows in the connection's driver task (a panic in debug builds).
/// Read here, the first refusal is returned as the error, naming what was refused.
async fn exec(pooled: &mut Pooled, writes: &[Cmd], timeout: Duration) -> Result<bool> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors().cmd("MULTI");
    for cmd in writes {
        pipe.add_command(cmd.clone());
    }
    pipe.cmd("EXEC");
    let mut conn = pooled.conn();
    let replies: Vec<Value> =
        bounded(timeout, "transaction exec", pipe.query_async(&mut conn)).await?;
    // EXEC answered (committed, or aborted): no transaction is left open. A refused EXEC
    // leaves it open, and the connection is closed instead of going back to the pool.
    if !matches!(replies.last(), Some(Value::ServerError(_))) {
        pooled.cleaned();
    }
    exec_outcome(replies, writes.len())
}

/// Reads the replies of `MULTI`, `n` queued writes and `EXEC`.
fn exec_outcome(replies: Vec<Value>, n: usize) -> Result<bool> {
    let unexpected = |replies: &[Value]| Error::UnexpectedReply {
        script: "transaction exec",
        detail: format!("{replies:?}"),
    };
    if replies.len() != n + 2 {
        return Err(unexpected(&replies));
    }
    // A refused MULTI or queued write explains the abort better than EXEC's EXECABORT.
    if let Some(Value::ServerError(e)) = replies.iter().find(|v| matches!(v, Value::ServerError(_)))
    {
        return Err(Error::from_redis(
            "transaction exec",
            Duration::ZERO,
            e.clone().into(),
        ));
    }
    match replies.last() {
        // Committed; a write that failed inside EXEC did not undo the others (no rollback),
        // and its error is the caller's.
        Some(Value::Array(results)) => match results.iter().find_map(|v| match v {
            Value::ServerError(e) => Some(e),
            _ => None,
        }) {
            Some(e) => Err(Error::from_redis(
                "transaction exec",
                Duration::ZERO,
                e.clone().into(),
            )),
            None => Ok(true),
        },
        Some(Value::Nil) => Ok(false),
        _ => Err(unexpected(&replies)),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::exec_outcome;
    use crate::error::Error;

    fn error(code: &str, detail: &str) -> Value {
        redis::parse_redis_value(format!("-{code} {detail}\r\n").as_bytes())
            .unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn every_reply_shape_of_multi_exec_is_read() {
        let queued = || Value::SimpleString("QUEUED".into());
        let committed = vec![Value::Okay, queued(), Value::Array(vec![Value::Okay])];
        assert!(matches!(exec_outcome(committed, 1), Ok(true)));
        let conflict = vec![Value::Okay, queued(), Value::Nil];
        assert!(matches!(exec_outcome(conflict, 1), Ok(false)));
        let failed_inside = vec![
            Value::Okay,
            queued(),
            queued(),
            Value::Array(vec![Value::Okay, error("WRONGTYPE", "not an integer")]),
        ];
        assert!(exec_outcome(failed_inside, 2).is_err());
        let short = vec![Value::Okay, Value::Nil];
        assert!(matches!(
            exec_outcome(short, 1),
            Err(Error::UnexpectedReply { .. })
        ));
    }
}
