//! The plain lock's grant by transaction, for clients that ask for it
//! (`ClientBuilder::counted_grants`): `MULTI`, `SET lock owner NX PX ttl`, `INCR fence`,
//! `PTTL lock`, `EXEC`, for about what a bare `SET NX PX` costs the server. The script
//! (`acquire.lua`) reads `TIME`, the fence and the tombstone and writes the fence on every
//! grant, which doubles a grant's server time.
//!
//! Invariants:
//! 1. Tokens strictly increase across holders of a name, whichever way each grant went,
//!    while the fence is kept. `INCR` hands out one more than the last token, whoever wrote
//!    it (the script stores its tokens as decimals, which `INCR` reads). A refused `SET` only
//!    burns a number.
//! 2. A fence lost whole never sends tokens backwards. A lost fence (a new name, a fence past
//!    its retention, a restart without persistence) makes `INCR` start again from 1, and one
//!    of another type or not a number makes it fail. Either way the grant's count is not
//!    used: `fence_mint.lua` hands out the lease's token as the acquire script would, the
//!    larger of the fence and the server clock, and writes it, atomically. Every token handed
//!    out is at most the server time of its grant (the clock's tokens are that time; `INCR`'s
//!    lag behind it unless a name is granted more than once a microsecond), so the minted one
//!    is above them all. `MIN_COUNTED` tells a count from a lost one: no token below it was
//!    ever read from a clock.
//! 3. What it trusts, and the script does not: a fence is kept or lost whole. A fence
//!    restored OLDER than it was (a failover to a replica that missed the last grants, a
//!    restart from a snapshot that lost them) counts on from its old value, and can hand out
//!    a token again. That is why the transaction is the client's choice, never the default.
//! 4. The tombstone of an abandoned attempt is not read: an attempt of unknown outcome that
//!    reaches Redis after its abandon holds the name for its ttl, owned by nobody, as an
//!    unfenced lease's does (`kind/unfenced.rs`). Exclusion and tokens are not at stake.
//! 5. A refusal answers the holder's remaining lease, as the script does. A lock key with no
//!    expiry (held forever, or a key of another type) goes to the script, which tells them
//!    apart.
//! 6. Learned per node. Before the first grant, `MULTI` is tried alone (then `DISCARD`): a
//!    server or ACL that refuses it gets the script, since the commands after a refused
//!    `MULTI` would run outside any transaction. A transaction refused before `EXEC` (an ACL
//!    without `INCR` or `PTTL`) changed nothing and gets the script too. Redis Cluster and
//!    Redlock grant by script: the cluster connection does not route a transaction, and
//!    Redlock's masters agree on a token the script proposes.
//! 7. With replica acknowledgements, `WAIT` follows `EXEC` in the same pipeline, as after a
//!    script (`node.rs`, invariant 5); the mint waits as any script does.

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
    /// (invariants 5 and 6).
    pub(crate) async fn grant(
        &self,
        call: &ScriptCall,
    ) -> Result<Option<(Value, Option<Shortfall>)>> {
        if !self.counted || self.is_cluster() || !self.grants.worth_trying() {
            return Ok(None);
        }
        let Some(commands) = call.grant_transaction() else {
            return Ok(None);
        };
        let operation = call.lua.operation;
        if self.grants.unknown() && !self.transactions_allowed(operation).await? {
            return Ok(None);
        }
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
        // MULTI, three QUEUED, then EXEC's array.
        let mut exec = None;
        for (i, reply) in replies.by_ref().take(5).enumerate() {
            match reply {
                // `MULTI` refused after all (an ACL changed since the probe): the commands ran
                // outside a transaction. The error leaves the attempt to be abandoned, which
                // gives back a lease it may have taken (invariant 6).
                Err(e) if i == 0 => {
                    self.grants.learned(false);
                    return Err(Error::from_redis(operation, self.timeout, e));
                }
                // A key or channel outside the user's patterns: the script says so in its
                // own words; and the transaction stays worth trying for other keys.
                Err(e) if lacks_command(&e) && !e.to_string().contains("run the") => {
                    return Ok(None);
                }
                Err(e) if lacks_command(&e) => {
                    tracing::debug!(error = %e, "fenced: no grant by transaction on this server; using the script");
                    self.grants.learned(false);
                    return Ok(None);
                }
                // Refused at `EXEC` (out of memory, a failed save): nothing ran.
                Err(e) if e.code() == Some("EXECABORT") => return Ok(None),
                Err(e) => return Err(Error::from_redis(operation, self.timeout, e)),
                Ok(value) if i == 4 => exec = Some(value),
                Ok(_) => {}
            }
        }
        let short = self.shortfall(wait.map(|(_, needed)| needed), replies.next())?;
        let Some(Value::Array(results)) = exec else {
            return Err(unexpected(operation, format!("{exec:?}")));
        };
        let [set, incr, pttl] = &results[..] else {
            return Err(unexpected(operation, format!("{results:?}")));
        };
        match (set, incr, pttl) {
            // Granted, counted on a fence that holds (invariant 1).
            (Value::Okay, Value::Int(token), _) if *token >= MIN_COUNTED => Ok(Some((
                Value::BulkString(token.to_string().into_bytes()),
                short,
            ))),
            // Granted on a fence that did not hold (invariant 2): the clock's token, by the
            // script that takes the larger of the fence and the clock.
            (Value::Okay, _, _) => {
                let mint = call
                    .fence_mint()
                    .ok_or_else(|| unexpected(operation, "no mint for this call".into()))?;
                let (value, mint_short) = self.run_acked(&mint).await?;
                Ok(Some((value, short.or(mint_short))))
            }
            // Held forever, or another type (invariant 5).
            (Value::Nil, _, Value::Int(-1)) => Ok(None),
            (Value::Nil, _, Value::Int(ms)) => Ok(Some((
                Value::Array(vec![Value::Int(0), Value::Int(*ms)]),
                short,
            ))),
            other => Err(unexpected(operation, format!("{other:?}"))),
        }
    }

    /// Whether the server lets this client open a transaction: `MULTI` alone, then
    /// `DISCARD`, once per node (invariant 6).
    async fn transactions_allowed(&self, operation: &'static str) -> Result<bool> {
        let mut probe = redis::pipe();
        probe.ignore_errors().cmd("MULTI").cmd("DISCARD");
        let replies: Vec<std::result::Result<Value, RedisError>> =
            self.query_pipe(operation, &probe).await?;
        let allowed = matches!(replies.first(), Some(Ok(_)));
        if !allowed {
            tracing::debug!("fenced: MULTI refused; granting by script");
        }
        self.grants.learned(allowed);
        Ok(allowed)
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
