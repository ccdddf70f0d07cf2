//! Optimistic transactions: `WATCH`, read and decide, `MULTI` … `EXEC`, retried with
//! backoff when a watched key changed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Slot;
use redis::aio::MultiplexedConnection;
use redis::{Cmd, FromRedisValue, RedisError, ToRedisArgs, Value};
use tokio::time::Instant;

use crate::backend::pool::{Addr, Pooled, TxPool};
use crate::core::Core;
use crate::error::bounded;
use crate::error::{Error, Result};
use crate::util::Backoff;
use crate::wait::WaitPolicy;

/// A transaction's backoff when its policy sets none: from up to 1 ms, doubling, to 100 ms.
const DEFAULT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(1), Duration::from_millis(100));

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
    /// On a Redis Cluster: the slot of the watched keys.
    slot: Option<Slot>,
    /// A read found the slot moved or migrating: this attempt's reads are void.
    redirect: Mutex<Option<Redirect>>,
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
        match tokio::time::timeout(timeout, cmd.query_async(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if let Some(r) = redirect(&e, self.state.slot) {
                    *crate::util::lock_unpoisoned(&self.state.redirect) = Some(r);
                }
                Err(Error::from_redis("transaction read", timeout, e))
            }
            Err(_) => Err(Error::Timeout {
                operation: "transaction read",
                after: timeout,
            }),
        }
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

/// [`Client::transaction_with`](crate::Client::transaction_with): `WATCH`, the step, `MULTI` …
/// `EXEC`, until one attempt commits or the policy runs out.
pub(crate) async fn transaction<T, E, F, Fut>(
    core: &Core,
    pool: &Arc<TxPool>,
    keys: &[&str],
    policy: WaitPolicy,
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
    let deadline = match policy.deadline() {
        Some(d) => Some(started.checked_add(d).ok_or_else(|| {
            Error::invalid(format!("transaction deadline {d:?} overflows the clock"))
        })?),
        None => None,
    };
    // One node: a transaction's WATCH lives on one connection. On a cluster, that is the
    // master of the keys' one slot.
    core.backend().node_for("a transaction")?;
    #[cfg(feature = "cluster")]
    let slot = if core.backend().is_cluster() {
        Some(one_slot(keys)?)
    } else {
        None
    };
    #[cfg(not(feature = "cluster"))]
    let slot: Option<Slot> = None;
    let timeout = core.options().timeout;
    let (min, max) = policy.backoff().unwrap_or(DEFAULT_BACKOFF);
    let mut backoff = Backoff::new(min, max);
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
        let watched = match deadline {
            Some(d) => match tokio::time::timeout_at(d, watch(pool, keys, timeout, slot)).await {
                Ok(watched) => watched?,
                Err(_) => {
                    return Err(Error::Timeout {
                        operation: "transaction (waiting for a pooled connection)",
                        after: started.elapsed(),
                    }
                    .into());
                }
            },
            None => watch(pool, keys, timeout, slot).await?,
        };
        let retry = match watched {
            // The slot is being migrated: like a conflict, try again after a pause.
            Watched::Busy => Retry::AfterPause,
            Watched::Ready(mut pooled) => {
                let tx = Tx {
                    conn: pooled.conn(),
                    state: Arc::new(TxState {
                        live: AtomicBool::new(true),
                        queued: Mutex::new(Vec::new()),
                        attempt,
                        timeout,
                        slot,
                        redirect: Mutex::new(None),
                    }),
                };
                let outcome = step(tx.clone()).await;
                tx.state.live.store(false, Ordering::Release);
                let writes = std::mem::take(&mut *tx.state.queued());
                let redirected = crate::util::lock_unpoisoned(&tx.state.redirect).take();
                if let Some(r) = redirected {
                    // The step read from a node that no longer serves the slot (or not
                    // yet): whatever it decided rests on a failed read. Run it again.
                    unwatch(&mut pooled, timeout).await;
                    Retry::Redirected(r, pooled.at().cloned())
                } else {
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
                    match exec(&mut pooled, &writes, timeout, slot).await? {
                        Exec::Committed => return Ok(value),
                        Exec::Conflict => {
                            // A watched key changed: EXEC was refused and the connection
                            // is clean again.
                            crate::core::metrics::transaction_conflict();
                            Retry::AfterPause
                        }
                        Exec::Redirected(r) => Retry::Redirected(r, pooled.at().cloned()),
                    }
                }
            }
        };
        let now = Instant::now();
        if policy.max_attempts().is_some_and(|n| attempt >= n) || deadline.is_some_and(|d| now >= d)
        {
            return Err(Error::Conflict {
                attempts: attempt,
                waited: started.elapsed(),
            }
            .into());
        }
        if let Retry::Redirected(Redirect::Moved(moved_slot, addr), answered_by) = &retry
            && pool.moved(*moved_slot, addr, answered_by.as_ref())
        {
            // The slot's new master is known: go there at once.
            tracing::debug!(node = %addr, "fenced: a transaction's slot moved; running it on its new master");
            continue;
        }
        let mut pause = backoff.next_full_jitter();
        if let Some(d) = deadline {
            pause = pause.min(d.saturating_duration_since(now));
        }
        tracing::trace!(attempt, ?pause, "fenced: transaction conflict; retrying");
        tokio::time::sleep(pause).await;
    }
}

/// How the next attempt of a transaction starts.
enum Retry {
    /// After a backoff: a watched key changed, or the slot is being migrated.
    AfterPause,
    /// The cluster redirected a command; the node that answered, if known.
    Redirected(Redirect, Option<Addr>),
}

/// What a cluster said about a transaction's slot.
#[derive(Clone, Debug)]
enum Redirect {
    /// `MOVED`: the slot is served at this address now.
    Moved(Slot, String),
    /// `ASK` or `TRYAGAIN`: the slot is being migrated; nothing ran.
    Busy,
}

#[cfg(not(feature = "cluster"))]
fn redirect(_: &RedisError, slot: Option<Slot>) -> Option<Redirect> {
    slot.map(|slot| match slot {})
}

#[cfg(feature = "cluster")]
/// The redirect in `e`, if it is about the transaction's `slot` (a key of another slot is
/// the caller's mistake, reported as it is).
fn redirect(e: &RedisError, slot: Option<Slot>) -> Option<Redirect> {
    use redis::ServerErrorKind as S;
    let slot = slot?;
    let about_slot = || {
        e.redirect_node()
            .and_then(|(addr, s)| (Slot::new(s) == Some(slot)).then(|| addr.to_owned()))
    };
    match e.kind() {
        redis::ErrorKind::Server(S::Moved) => about_slot().map(|addr| Redirect::Moved(slot, addr)),
        redis::ErrorKind::Server(S::Ask) => about_slot().map(|_| Redirect::Busy),
        redis::ErrorKind::Server(S::TryAgain) => Some(Redirect::Busy),
        _ => None,
    }
}

#[cfg(feature = "cluster")]
/// The one hash slot of a cluster transaction's keys: `WATCH` and `MULTI` run on one node.
fn one_slot(keys: &[&str]) -> Result<Slot> {
    let slot = Slot::for_key(keys[0]);
    match keys.iter().find(|k| Slot::for_key(k) != slot) {
        None => Ok(slot),
        Some(other) => Err(Error::invalid(format!(
            "on a Redis Cluster the keys of one transaction must share a hash slot, and {:?} and {:?} do not: give them one hash tag, like {{order:42}}:stock and {{order:42}}:paid",
            keys[0], other
        ))),
    }
}

/// How many `MOVED` replies one `WATCH` follows before giving up (a slot map in flux).
const MAX_REDIRECTS: u32 = 5;

/// A connection with the keys watched, or a slot being migrated.
enum Watched {
    Ready(Pooled),
    Busy,
}

/// Checks out a connection and `WATCH`es the keys. A reused connection that turns out to be
/// broken (the server restarted, say) is replaced by a fresh one once. On a cluster, a
/// `MOVED` reply sends the `WATCH` to the slot's master.
async fn watch(
    pool: &Arc<crate::backend::pool::TxPool>,
    keys: &[&str],
    timeout: Duration,
    slot: Option<Slot>,
) -> Result<Watched> {
    let mut fresh = false;
    let mut redirects = 0u32;
    loop {
        let mut pooled = pool.checkout(fresh, slot).await?;
        let mut cmd = redis::cmd("WATCH");
        cmd.arg(keys);
        pooled.dirty();
        let mut conn = pooled.conn();
        let e = match tokio::time::timeout(timeout, cmd.query_async::<()>(&mut conn)).await {
            Ok(Ok(())) => return Ok(Watched::Ready(pooled)),
            Ok(Err(e)) => {
                match redirect(&e, slot) {
                    // A refused WATCH leaves nothing watched: the connection stays usable.
                    Some(Redirect::Moved(s, addr)) if redirects < MAX_REDIRECTS => {
                        pooled.cleaned();
                        let at = pooled.at().cloned();
                        drop(pooled);
                        if pool.moved(s, &addr, at.as_ref()) {
                            redirects += 1;
                            continue;
                        }
                    }
                    Some(Redirect::Busy) => {
                        pooled.cleaned();
                        return Ok(Watched::Busy);
                    }
                    _ => {}
                }
                Error::from_redis("watch", timeout, e)
            }
            Err(_) => Error::Timeout {
                operation: "watch",
                after: timeout,
            },
        };
        if e.is_transient() && !fresh {
            fresh = true;
        } else {
            return Err(e);
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
async fn exec(
    pooled: &mut Pooled,
    writes: &[Cmd],
    timeout: Duration,
    slot: Option<Slot>,
) -> Result<Exec> {
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
    exec_outcome(replies, writes.len(), slot)
}

/// How `EXEC` ended.
#[derive(Debug)]
enum Exec {
    Committed,
    /// A watched key changed: nothing was written.
    Conflict,
    /// A queued write met a redirect for the transaction's slot: `EXEC` aborted, nothing was
    /// written.
    Redirected(Redirect),
}

/// Reads the replies of `MULTI`, `n` queued writes and `EXEC`.
fn exec_outcome(replies: Vec<Value>, n: usize, slot: Option<Slot>) -> Result<Exec> {
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
        let e: RedisError = e.clone().into();
        if let Some(r) = redirect(&e, slot) {
            return Ok(Exec::Redirected(r));
        }
        return Err(Error::from_redis("transaction exec", Duration::ZERO, e));
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
            None => Ok(Exec::Committed),
        },
        Some(Value::Nil) => Ok(Exec::Conflict),
        _ => Err(unexpected(&replies)),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    #[cfg(feature = "cluster")]
    use redis::cluster_routing::Slot;

    #[cfg(feature = "cluster")]
    use super::Redirect;
    use super::{Exec, exec_outcome};
    use crate::error::Error;

    fn error(code: &str, detail: &str) -> Value {
        redis::parse_redis_value(format!("-{code} {detail}\r\n").as_bytes())
            .unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn every_reply_shape_of_multi_exec_is_read() {
        let queued = || Value::SimpleString("QUEUED".into());
        let committed = vec![Value::Okay, queued(), Value::Array(vec![Value::Okay])];
        assert!(matches!(
            exec_outcome(committed, 1, None),
            Ok(Exec::Committed)
        ));
        let conflict = vec![Value::Okay, queued(), Value::Nil];
        assert!(matches!(
            exec_outcome(conflict, 1, None),
            Ok(Exec::Conflict)
        ));
        let failed_inside = vec![
            Value::Okay,
            queued(),
            queued(),
            Value::Array(vec![Value::Okay, error("WRONGTYPE", "not an integer")]),
        ];
        assert!(exec_outcome(failed_inside, 2, None).is_err());
        let short = vec![Value::Okay, Value::Nil];
        assert!(matches!(
            exec_outcome(short, 1, None),
            Err(Error::UnexpectedReply { .. })
        ));
    }

    #[test]
    #[cfg(feature = "cluster")]
    fn a_redirect_for_the_transactions_slot_aborts_it_for_a_retry_and_others_are_errors() {
        let slot = Slot::for_key("{order:42}:stock");
        let Some(number) = (0..16384u16).find(|n| Slot::new(*n) == Some(slot)) else {
            panic!("no slot number");
        };
        let moved = |n: u16| {
            vec![
                Value::Okay,
                error("MOVED", &format!("{n} 127.0.0.1:7001")),
                error(
                    "EXECABORT",
                    "Transaction discarded because of previous errors.",
                ),
            ]
        };
        assert!(matches!(
            exec_outcome(moved(number), 1, Some(slot)),
            Ok(Exec::Redirected(Redirect::Moved(s, addr))) if s == slot && addr == "127.0.0.1:7001"
        ));
        // A write to a key of another slot is the caller's mistake, not a migration.
        let other = (number + 1) % 16384;
        assert!(exec_outcome(moved(other), 1, Some(slot)).is_err());
        // On one server a MOVED is not followed.
        assert!(exec_outcome(moved(number), 1, None).is_err());
        let migrating = vec![
            Value::Okay,
            error("TRYAGAIN", "Multiple keys request during rehashing of slot"),
            error(
                "EXECABORT",
                "Transaction discarded because of previous errors.",
            ),
        ];
        assert!(matches!(
            exec_outcome(migrating, 1, Some(slot)),
            Ok(Exec::Redirected(Redirect::Busy))
        ));
    }
}
