//! Reads: a status (a semaphore's, a read-write lock's, an election's), a cache entry, a
//! lock key's type. Each is its commands in one `MULTI`/`EXEC`, never a script: a transaction
//! of reads is as atomic as a script, runs where scripts are refused, and costs the server no
//! Lua.
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
//!    pipeline, every reply read in turn (as the grant's transaction does): a refused `MULTI`
//!    runs the reads one by one, harmless, and its refusal is the answer; a read or an `EXEC`
//!    refused ends the transaction on the server (`EXECABORT`), and the refusal names the
//!    command to allow.

use redis::{Cmd, RedisError, Value};

use super::Node;
use crate::error::{Error, Result};
use crate::kind::unexpected;

impl Node {
    /// `reads` run as one `MULTI`/`EXEC`; `answer` computes the caller's answer from their
    /// replies, in order (`None`: a reply of another shape).
    pub(crate) async fn read<T>(
        &self,
        operation: &'static str,
        reads: &[Cmd],
        answer: impl FnOnce(&[Value]) -> Option<T>,
    ) -> Result<T> {
        // `MULTI` and `EXEC` as commands of a plain pipeline, each reply read (invariant 4).
        let mut pipe = redis::pipe();
        pipe.ignore_errors().add_command(redis::cmd("MULTI"));
        for read in reads {
            pipe.add_command(read.clone());
        }
        pipe.add_command(redis::cmd("EXEC"));
        let replies = self.send(operation, &pipe).await?;
        let error = |e: RedisError, read: Option<&Cmd>| match read
            .and_then(|r| r.args_iter().nth(1))
        {
            Some(redis::Arg::Simple(key)) if crate::error::is_wrong_type(&e) => Error::WrongType {
                key: String::from_utf8_lossy(key).into_owned(),
                operation,
            },
            _ => Error::from_redis(operation, self.timeout, e),
        };
        let mut replies = replies.into_iter();
        // `MULTI` refused: the reads ran one by one (reads only: nothing to undo).
        if let Some(Err(e)) = replies.next() {
            return Err(error(e, None));
        }
        // A read refused as it was queued (its command outside the user's ACL): `EXEC` then
        // ran nothing, and this is what to allow.
        for read in reads {
            if let Some(Err(e)) = replies.next() {
                return Err(error(e, Some(read)));
            }
        }
        let results = match replies.next() {
            Some(Ok(Value::Array(results))) if results.len() == reads.len() => results,
            Some(Err(e)) => return Err(error(e, None)),
            other => return Err(unexpected(operation, format!("{other:?}"))),
        };
        for (result, read) in results.iter().zip(reads) {
            if let Value::ServerError(e) = result {
                return Err(error(e.clone().into(), Some(read)));
            }
        }
        answer(&results).ok_or_else(|| unexpected(operation, format!("{results:?}")))
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
