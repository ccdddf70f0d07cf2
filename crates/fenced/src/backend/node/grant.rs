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
//!    the grant's token is not used: `fence_mint.lua` hands out the lease's token from the
//!    server clock, as the script would, before the grant is reported. Every token handed out
//!    is at most the server time of its grant (the clock's tokens are that time; `INCR`'s lag
//!    behind it unless a name is granted more than once a microsecond), so the clock's next
//!    one is above them all. `MIN_COUNTED` tells the two apart: no token below it was ever
//!    read from the clock.
//! 3. The tombstone of an abandoned attempt is not read: an attempt of unknown outcome that
//!    reaches Redis after its abandon holds the name for its ttl, owned by nobody, as an
//!    unfenced lease's does (`kind/unfenced.rs`). Exclusion and tokens are not at stake.
//! 4. A refusal answers the holder's remaining lease, as the script does. A lock key with no
//!    expiry (held forever, or a key of another type) goes to the script, which tells them
//!    apart.
//! 5. The transaction is learned per node, like a native twin (`node.rs`, invariant 6): a
//!    server or ACL that refuses `MULTI`, `INCR` or `PTTL` gets the script from then on, and
//!    a transaction refused before `EXEC` ran changed nothing. Redis Cluster and Redlock grant
//!    by script: the cluster connection does not route a transaction, and Redlock's masters
//!    agree on a token the script proposes.
//! 6. With replica acknowledgements, `WAIT` follows `EXEC` (and the mint) in the same
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
        let short = match (wait, replies.next()) {
            (None, _) => None,
            (Some((_, needed)), Some(Ok(Value::Int(acked)))) => {
                let acked = usize::try_from(acked).unwrap_or(0);
                (acked < needed).then_some(Shortfall { acked, needed })
            }
            (Some(_), Some(Err(e))) => return Err(Error::from_redis("wait", self.timeout, e)),
            (Some(_), other) => return Err(unexpected("wait", format!("{other:?}"))),
        };
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
            (Value::Okay, _, _) => {
                let mint = call
                    .fence_mint()
                    .ok_or_else(|| unexpected(operation, "no mint for this call".into()))?;
                let (value, mint_short) = self.run_acked(&mint).await?;
                Ok(Some((value, short.or(mint_short))))
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
}
