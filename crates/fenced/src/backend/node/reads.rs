//! Status reads where scripts are not sent: a script that only reads (a semaphore's, a
//! read-write lock's or an election's status) as its reads in one `MULTI`/`EXEC`.
//!
//! Invariants:
//! 1. Same reads, same answer. The transaction sends the commands the script runs (or, where
//!    the script's next read depends on its last, one that returns a superset: the whole
//!    sorted set `WITHSCORES` for a `ZCOUNT` from `TIME`), and the caller computes from their
//!    replies what the script computes, so the status reads the same either way.
//! 2. Atomic as the script. `MULTI`/`EXEC` runs the reads with nothing in between, so they
//!    see one state; nothing is written, so no `WATCH` is needed, and the node's own
//!    connection carries it (a pipeline is never interleaved with other calls).
//! 3. Taken where the node sends no scripts, or where the server refuses the script (a call
//!    without a lock twin then answers `Unsupported` and teaches the node nothing,
//!    `watched.rs`): inspecting never fails for want of scripts.
//! 4. A `WRONGTYPE` is [`Error::WrongType`] naming the key of the read that met it (its first
//!    argument), as the script's is named.

use redis::{Cmd, RedisError, Value};

use super::Node;
use crate::error::{Error, Result};
use crate::kind::unexpected;
use crate::scripts::ScriptCall;

impl Node {
    /// The answer of `call`, a script that only reads; where this node sends no scripts, or
    /// the server refuses them, `answer` computes it from `reads` (the script's reads, run as
    /// one `MULTI`/`EXEC`).
    pub(crate) async fn read_only<T: redis::FromRedisValue>(
        &self,
        call: &ScriptCall,
        reads: &[Cmd],
        answer: impl FnOnce(&[Value]) -> Option<T>,
    ) -> Result<T> {
        if !self.scripts_forbidden() {
            match self.run(call).await {
                Err(e) if matches!(e, Error::Unsupported(_)) || e.refuses_scripts() => {}
                other => return other,
            }
        }
        let operation = call.operation();
        let mut pipe = redis::pipe();
        pipe.atomic().ignore_errors();
        for read in reads {
            pipe.add_command(read.clone());
        }
        let replies: Vec<std::result::Result<Value, RedisError>> =
            self.query_pipe(operation, &pipe).await?;
        if replies.len() != reads.len() {
            return Err(unexpected(operation, format!("{replies:?}")));
        }
        let replies = replies
            .into_iter()
            .zip(reads)
            .map(|(reply, read)| {
                reply.map_err(|e| match read.args_iter().nth(1) {
                    Some(redis::Arg::Simple(key)) if crate::error::is_wrong_type(&e) => {
                        Error::WrongType {
                            key: String::from_utf8_lossy(key).into_owned(),
                            operation,
                        }
                    }
                    _ => Error::from_redis(operation, self.timeout, e),
                })
            })
            .collect::<Result<Vec<Value>>>()?;
        answer(&replies).ok_or_else(|| unexpected(operation, format!("{replies:?}")))
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

/// What `semaphore_status.lua` answers, from its reads (`TIME`, the holders with their lease
/// ends, the permits of each): the permits and number of the live holders, and the ms until
/// the earliest live lease ends (-1 for none).
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
