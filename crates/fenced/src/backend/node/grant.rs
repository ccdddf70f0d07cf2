//! The plain lock's fenced grant without a script: `MULTI`, `SET lock owner NX PX ttl`,
//! `INCR fence`, `PTTL lock`, `EXEC`, for about what a bare `SET NX PX` costs the server. The
//! script (`acquire.lua`) reads `TIME`, the fence and the tombstone and writes the fence, which
//! doubles a grant's server time.
//!
//! Invariants:
//! 1. Tokens strictly increase across holders of a name, whichever way each grant went. While
//!    the fence exists, `INCR` hands out one more than the last token, whoever wrote it (the
//!    script stores its tokens as decimals, which `INCR` reads). A refused `SET` only burns a
//!    number.
//! 2. Tokens never go backwards after the fence is lost. A lost fence (a new name, a fence
//!    past its retention, a restart, a failover to a replica that missed it) makes `INCR`
//!    start again from 1, and one of another type or not a number makes it fail. Either way
//!    the grant's token is not used: the lease's token is minted from the server clock, as the
//!    script would, before the grant is reported, and without a script either. `TIME` reads
//!    the clock (T), then `INCRBY fence T-n` lifts the counter the grant's `INCR` left at n to
//!    T, or above it if refused attempts counted on meanwhile; its reply is the token. (A
//!    fence `INCR` cannot count is overwritten: `SET fence T`.) Every token handed out is at
//!    most the server time of its grant (the clock's tokens are that time; `INCR`'s lag
//!    behind it unless a name is granted more than once a microsecond), so the minted one is
//!    above them all; and `INCRBY` only ever adds, so two mints of one lost fence (a lease
//!    that ran out in between) still hand out increasing tokens. `MIN_COUNTED` tells a
//!    counted token from a lost count: no token below it was ever read from the clock. The
//!    minted fence lives for the retention after the mint, as the script's does.
//! 3. The tombstone of an abandoned attempt is not read: an attempt of unknown outcome that
//!    reaches Redis after its abandon holds the name for its ttl, owned by nobody, as an
//!    unfenced lease's does (`kind/unfenced.rs`). Exclusion and tokens are not at stake.
//! 4. A refusal answers the holder's remaining lease, as the script does. A lock key with no
//!    expiry (held forever, or a key of another type) goes to the script, which tells them
//!    apart.
//! 5. The transaction is learned per node, like a native twin (`node.rs`, invariant 6): a
//!    server or ACL that refuses `MULTI`, `INCR` or `PTTL` gets the script from then on, and
//!    a transaction refused before `EXEC` ran changed nothing. A grant runs no script at all,
//!    so it works where scripts are forbidden. Redis Cluster and Redlock grant
//!    by script: the cluster connection does not route a transaction, and Redlock's masters
//!    agree on a token the script proposes.
//! 6. With replica acknowledgements, `WAIT` follows `EXEC` (and the mint's) in the same
//!    pipeline, as after a script (`node.rs`, invariant 5).

use redis::{RedisError, Value};

use super::{Node, Shortfall, lacks_command};
use crate::error::{Error, Result};
use crate::kind::unexpected;
use crate::scripts::ScriptCall;

/// The least token `INCR` may hand out as it is: server microseconds since 2001. Every token
/// read from a clock is above it (invariant 2).
pub(crate) const MIN_COUNTED: i64 = 1_000_000_000_000_000;

impl Node {
    /// The grant of `call` (the plain lock's acquire) by transaction, answered as the script
    /// answers: a token, or `{0, pttl}`. `Ok(None)` when the script must run instead
    /// (invariants 4 and 5).
    pub(crate) async fn grant(
        &self,
        call: &ScriptCall,
    ) -> Result<Option<(Value, Option<Shortfall>)>> {
        if self.is_cluster() || !self.grants.worth_trying() {
            return Ok(None);
        }
        let Some(commands) = call.grant_transaction() else {
            return Ok(None);
        };
        let operation = call.lua.operation;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for cmd in commands {
            pipe.add_command(cmd);
        }
        let wait = self.wait_cmd();
        if let Some((cmd, _)) = &wait {
            pipe.add_command(cmd.clone());
        }
        let pipe = &pipe;
        let replies: Vec<std::result::Result<Value, RedisError>> = self
            .bounded(
                operation,
                self.resending(|mut conn| async move { pipe.query_async(&mut conn).await }),
            )
            .await?;
        let mut replies = replies.into_iter();
        // MULTI, three QUEUED, then EXEC's array: a refusal of any (an ACL, a server without
        // the command) aborts the transaction, which then changed nothing.
        let mut exec = None;
        for (i, reply) in replies.by_ref().take(5).enumerate() {
            match reply {
                // A key or channel outside the user's patterns: the script says so in its
                // own words; and the transaction stays worth trying for other keys.
                Err(e) if lacks_command(&e) && !e.to_string().contains("run the") => {
                    return Ok(None);
                }
                Err(e) if lacks_command(&e) || e.code() == Some("EXECABORT") => {
                    tracing::debug!(error = %e, "fenced: no grant by transaction on this server; using the script");
                    self.grants.learned(false);
                    return Ok(None);
                }
                Err(e) => return Err(Error::from_redis(operation, self.timeout, e)),
                Ok(value) if i == 4 => exec = Some(value),
                Ok(_) => {}
            }
        }
        let short = self.shortfall(wait.map(|(_, needed)| needed), replies.next())?;
        let Some(Value::Array(results)) = exec else {
            return Err(unexpected(operation, format!("{exec:?}")));
        };
        if self.grants.unknown() {
            self.grants.learned(true);
        }
        let [set, incr, pttl] = &results[..] else {
            return Err(unexpected(operation, format!("{results:?}")));
        };
        match (set, incr, pttl) {
            // Granted, counted on a fence that holds (invariant 1).
            (Value::Okay, Value::Int(token), _) if *token >= MIN_COUNTED => Ok(Some((
                Value::BulkString(token.to_string().into_bytes()),
                short,
            ))),
            // Granted on a fence that did not hold (invariant 2): the clock's token.
            (Value::Okay, counted, _) => {
                let counted = match counted {
                    Value::Int(n) => Some(*n),
                    _ => None,
                };
                let (token, mint_short) = self.mint(call, counted).await?;
                Ok(Some((
                    Value::BulkString(token.to_string().into_bytes()),
                    short.or(mint_short),
                )))
            }
            // Held forever, or another type (invariant 4).
            (Value::Nil, _, Value::Int(-1)) => Ok(None),
            (Value::Nil, _, Value::Int(ms)) => Ok(Some((
                Value::Array(vec![Value::Int(0), Value::Int(*ms)]),
                short,
            ))),
            other => Err(unexpected(operation, format!("{other:?}"))),
        }
    }

    /// The token of a lease granted on a fence that did not hold, from the server clock
    /// (invariant 2); `counted`: what the grant's `INCR` answered, if it could count.
    async fn mint(
        &self,
        call: &ScriptCall,
        counted: Option<i64>,
    ) -> Result<(i64, Option<Shortfall>)> {
        let operation = call.lua.operation;
        let (fence, retention) = call
            .fence_of_grant()
            .ok_or_else(|| unexpected(operation, "no fence in this call".into()))?;
        let (secs, micros): (i64, i64) = self.query(operation, &redis::cmd("TIME")).await?;
        let now = secs
            .checked_mul(1_000_000)
            .and_then(|s| s.checked_add(micros))
            .filter(|t| *t >= MIN_COUNTED)
            .ok_or_else(|| unexpected(operation, format!("TIME {secs} {micros}")))?;
        let mut pipe = redis::pipe();
        pipe.ignore_errors().cmd("MULTI");
        match counted {
            Some(n) => pipe
                .cmd("INCRBY")
                .arg(fence)
                .arg(now.saturating_sub(n).max(1)),
            None => pipe.cmd("SET").arg(fence).arg(now),
        };
        pipe.cmd("PEXPIRE").arg(fence).arg(retention).cmd("EXEC");
        // `WAIT` after the transaction, on the same connection (invariant 6).
        let wait = self.wait_cmd();
        if let Some((cmd, _)) = &wait {
            pipe.add_command(cmd.clone());
        }
        let replies: Vec<std::result::Result<Value, RedisError>> =
            self.query_pipe(operation, &pipe).await?;
        let mut replies = replies.into_iter();
        let mut exec = None;
        // MULTI, two QUEUED, then EXEC's array; a refusal names its command.
        for (i, reply) in replies.by_ref().take(4).enumerate() {
            match reply {
                Err(e) => return Err(Error::from_redis(operation, self.timeout, e)),
                Ok(value) if i == 3 => exec = Some(value),
                Ok(_) => {}
            }
        }
        let short = self.shortfall(wait.map(|(_, needed)| needed), replies.next())?;
        let token = match exec {
            Some(Value::Array(results)) => results.into_iter().next(),
            other => return Err(unexpected(operation, format!("mint: {other:?}"))),
        };
        match token {
            Some(Value::Int(token)) => Ok((token, short)),
            Some(Value::Okay) if counted.is_none() => Ok((now, short)),
            other => Err(unexpected(operation, format!("mint: {other:?}"))),
        }
    }

    /// What `WAIT`'s reply says of a write that needed `needed` acknowledgements.
    fn shortfall(
        &self,
        needed: Option<usize>,
        reply: Option<std::result::Result<Value, RedisError>>,
    ) -> Result<Option<Shortfall>> {
        match (needed, reply) {
            (None, _) => Ok(None),
            (Some(needed), Some(Ok(Value::Int(acked)))) => {
                let acked = usize::try_from(acked).unwrap_or(0);
                Ok((acked < needed).then_some(Shortfall { acked, needed }))
            }
            (Some(_), Some(Err(e))) => Err(Error::from_redis("wait", self.timeout, e)),
            (Some(_), other) => Err(unexpected("wait", format!("{other:?}"))),
        }
    }
}
