//! Reads: a status (a semaphore's, a read-write lock's, an election's) and a cache entry.
//! Each is its commands in one `MULTI`/`EXEC`, never a script: a transaction of reads is as
//! atomic as a script, runs where scripts are refused, and costs the server no Lua.
//!
//! Invariants:
//! 1. One snapshot. `MULTI`/`EXEC` runs the reads with nothing in between, so they see one
//!    state; nothing is written, so no `WATCH` is needed, and the node's own connection
//!    carries it (a pipeline is never interleaved with other calls). Where a read would
//!    depend on an earlier one (the permits of the live holders), a read that returns a
//!    superset goes instead (the whole hash), and the caller picks from it.
//! 2. Time from the server. Whether a lease still runs is judged by the server's `TIME`,
//!    read in the same transaction, never by the client's clock.
//! 3. A `WRONGTYPE` is [`Error::WrongType`] naming the key of the read that met it (its first
//!    argument).
//! 4. Safe where the ACL refuses a part. `MULTI` and `EXEC` go as commands of a plain
//!    pipeline, every reply read in turn (as the grant's transaction does). A read refused
//!    as it is queued ends the transaction on the server (`EXECABORT`), and its refusal
//!    names the command to allow. Where the user may not run `MULTI` (which then lets the
//!    reads run one by one, harmless: their replies are the answer) or `EXEC` (the server
//!    discards the transaction), that is learned (`allows.rs`), and the reads go back to
//!    back in one pipeline from then on: each is exact, but two may see states a write
//!    apart, as for any reader that is not a transaction. What is read is shown to people
//!    (`status`, `list`), followed by the election's watcher, which never reports an older
//!    term after a newer one, or used by the cache to judge freshness: none decides safety.

use redis::{Cmd, RedisError, Value};

use super::{Node, lacks_command};
use crate::error::{Error, Result};
use crate::kind::unexpected;

impl Node {
    /// `reads` run as one `MULTI`/`EXEC` (invariant 1), or back to back where the user may
    /// not run it (invariant 4); `answer` computes the caller's answer from their replies,
    /// in order (`None`: a reply of another shape).
    pub(crate) async fn read<T>(
        &self,
        operation: &'static str,
        reads: &[Cmd],
        answer: impl FnOnce(&[Value]) -> Option<T>,
    ) -> Result<T> {
        let mut results = None;
        if self.allows.multi.worth_trying() {
            results = self.read_in_transaction(operation, reads).await?;
        }
        let results = match results {
            Some(results) => results,
            None => {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for read in reads {
                    pipe.add_command(read.clone());
                }
                let replies = self.send(operation, &pipe).await?;
                self.read_replies(operation, reads, replies)?
            }
        };
        answer(&results).ok_or_else(|| unexpected(operation, format!("{results:?}")))
    }

    /// The reads in one `MULTI`/`EXEC`, sent as commands of a plain pipeline whose every reply
    /// is read (invariant 4): their results; `None` where `EXEC` was refused (nothing ran).
    async fn read_in_transaction(
        &self,
        operation: &'static str,
        reads: &[Cmd],
    ) -> Result<Option<Vec<Value>>> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors().add_command(redis::cmd("MULTI"));
        for read in reads {
            pipe.add_command(read.clone());
        }
        pipe.add_command(redis::cmd("EXEC"));
        let mut replies = self.send(operation, &pipe).await?;
        if replies.len() != reads.len() + 2 {
            return Err(unexpected(operation, format!("{replies:?}")));
        }
        let exec = replies.pop();
        let mut replies = replies.into_iter();
        match replies.next() {
            // `MULTI` refused: the reads ran one by one, and their replies are the answer.
            Some(Err(e)) if lacks_command(&e) => {
                tracing::debug!(error = %e, "fenced: MULTI refused; reads go back to back");
                self.allows.multi.learned(false);
                let replies: Vec<_> = replies.collect();
                return self.read_replies(operation, reads, replies).map(Some);
            }
            Some(Err(e)) => return Err(Error::from_redis(operation, self.timeout, e)),
            _ => {}
        }
        // A read refused as it was queued (its command outside the user's ACL): `EXEC` then
        // ran nothing, and this is what to allow.
        for (read, queued) in reads.iter().zip(replies) {
            if let Err(e) = queued {
                return Err(self.read_error(operation, read, e));
            }
        }
        match exec {
            Some(Ok(Value::Array(results))) if results.len() == reads.len() => {
                self.allows.multi.learned(true);
                let results = results.into_iter().map(|r| match r {
                    Value::ServerError(e) => Err(e.into()),
                    value => Ok(value),
                });
                self.read_replies(operation, reads, results.collect())
                    .map(Some)
            }
            // `EXEC` refused (every read was queued): the server ran nothing and closed the
            // transaction.
            Some(Err(e)) if e.code() == Some("EXECABORT") && e.to_string().contains("NOPERM") => {
                tracing::debug!(error = %e, "fenced: EXEC refused; reads go back to back");
                self.allows.multi.learned(false);
                Ok(None)
            }
            Some(Err(e)) => Err(Error::from_redis(operation, self.timeout, e)),
            other => Err(unexpected(operation, format!("{other:?}"))),
        }
    }

    /// The replies of `reads`, in order, or the first one's error (invariant 3).
    fn read_replies(
        &self,
        operation: &'static str,
        reads: &[Cmd],
        replies: Vec<Result<Value, RedisError>>,
    ) -> Result<Vec<Value>> {
        if replies.len() != reads.len() {
            return Err(unexpected(operation, format!("{replies:?}")));
        }
        replies
            .into_iter()
            .zip(reads)
            .map(|(reply, read)| reply.map_err(|e| self.read_error(operation, read, e)))
            .collect()
    }

    /// The error of `read`: a `WRONGTYPE` names its key (its first argument).
    fn read_error(&self, operation: &'static str, read: &Cmd, e: RedisError) -> Error {
        match read.args_iter().nth(1) {
            Some(redis::Arg::Simple(key)) if crate::error::is_wrong_type(&e) => Error::WrongType {
                key: String::from_utf8_lossy(key).into_owned(),
                operation,
            },
            _ => Error::from_redis(operation, self.timeout, e),
        }
    }
}

/// The server's clock in ms from a `TIME` reply, as the scripts read it: seconds × 1000 +
/// ⌊microseconds / 1000⌋.
pub(crate) fn server_ms(time: &Value) -> Option<i64> {
    let (secs, micros): (i64, i64) = redis::from_redis_value_ref(time).ok()?;
    Some(secs * 1000 + micros / 1000)
}

/// The members of a sorted set of lease ends (a `ZRANGE … WITHSCORES` reply) whose lease
/// ends after `now`, earliest first: what `ZRANGEBYSCORE key (now +inf` answers.
pub(crate) fn live(zset: &Value, now: i64) -> Option<Vec<(Vec<u8>, i64)>> {
    let all: Vec<(Vec<u8>, f64)> = redis::from_redis_value_ref(zset).ok()?;
    Some(
        all.into_iter()
            .filter(|(_, end)| *end > now as f64)
            .map(|(member, end)| (member, end as i64))
            .collect(),
    )
}

/// `ZRANGE key 0 -1 WITHSCORES`: a sorted set of lease ends, whole, earliest first.
pub(crate) fn zrange_all(key: &str) -> Cmd {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .take()
}

/// A semaphore's status from its reads (`TIME`, the holders with their lease ends, the
/// permits of each): the permits and number of the live holders, and the ms until the
/// earliest live lease ends (-1 for none). A count that is missing or no number counts 0.
pub(crate) fn semaphore_status(replies: &[redis::Value]) -> Option<Vec<i64>> {
    let [time, holders, counts] = replies else {
        return None;
    };
    let now = server_ms(time)?;
    let live = live(holders, now)?;
    let counts: std::collections::HashMap<Vec<u8>, Vec<u8>> =
        redis::from_redis_value_ref(counts).ok()?;
    let held: i64 = live
        .iter()
        .map(|(owner, _)| {
            counts
                .get(owner)
                .and_then(|n| std::str::from_utf8(n).ok()?.parse::<i64>().ok())
                .unwrap_or(0)
        })
        .sum();
    let first = live.first().map_or(-1, |(_, end)| end - now);
    Some(vec![held, live.len() as i64, first])
}

/// A read-write lock's status from its reads (`TIME`, the readers' lease ends, the waiting
/// writers' registration ends): how many of each end after the server's now.
pub(crate) fn rw_status(replies: &[Value]) -> Option<Vec<u64>> {
    let [time, readers, writers] = replies else {
        return None;
    };
    let now = server_ms(time)?;
    let live = |zset: &Value| Some(live(zset, now)?.len() as u64);
    Some(vec![live(readers)?, live(writers)?])
}
