//! The plain lock's grant by transaction, the default on one server and behind Sentinel, with
//! or without scripts: `MULTI`, `SET lock owner NX PX ttl`,
//! `XADD fence NOMKSTREAM MAXLEN 0 * f 1`, `PEXPIRE fence retention`, `PTTL lock`,
//! `TYPE lock`, `EXEC`. No Lua, one round trip; the token is the fence's new stream ID, read
//! as `scripts/fence.lua` reads it. Where there was no fence, a step more starts it
//! (invariant 2).
//!
//! Invariants:
//! 1. Tokens strictly increase across holders of a name, whichever way each grant went. Every
//!    grant, by script or by transaction, appends one ID to the same stream, and `XADD … *`
//!    answers an ID strictly above the stream's last one; a token is `ms × 1000 + seq` of that
//!    ID (`FenceId`), which orders as the IDs do while seq stays below 1000. A refused `SET`
//!    only burns an ID.
//! 2. A fence lost whole or put back older never sends tokens backwards. The stream's next ID
//!    is floored by the server clock in ms, and every token handed out before was at most the
//!    server time of its grant (1 ms more from a fence started then, 1 s for a Redlock
//!    proposal, `fence.lua`). A fence lost whole (deleted, evicted, `FLUSHALL`, a restart
//!    without persistence) would start again at the clock's `ms-0`, which a grant earlier in
//!    that same ms may equal or pass. So the grant's `XADD` is `NOMKSTREAM`: where there is no
//!    fence it answers nil and starts none (nor does a refused grant), and a granted lease
//!    then starts it one ms past the clock, as the scripts do, while the lock key still holds
//!    its owner (`start_fence`). That costs the first grant of a name within the retention
//!    one round trip more where the node sends scripts (one script: `fence_raise.lua` with no
//!    token), two without (two transactions on the shared connection). A restart from an
//!    older snapshot or append-only file, `DEBUG LOADAOF`, `RESTORE` of an older dump, a
//!    failover to a replica that missed the last grants leave an ID that the clock passes
//!    once it passes the last token's ms, unless the clock stepped back (further than the
//!    retention covers, for a fence that is kept). Nothing is trusted that the server's data
//!    could put back. Left open, as for the scripts: a fence lost twice within one ms, with a
//!    grant between, starts again at the same ID.
//! 3. Out of the ordinary, the token is minted on a dedicated connection under `WATCH`, while
//!    the lease is still this owner's (so no later grant can come between the lease and its
//!    token): a sequence past 999 is carried into the next ms by an explicit ID `(ms + 1)-0`;
//!    a fence found missing is started as in invariant 2 (`*`, not handed out, then the
//!    explicit ID past it);
//!    a fence of an earlier development build (a decimal string) is converted to the ID just
//!    past its token; anything else at the fence key (another type, an ID out of range) frees
//!    the lock just taken and answers [`Error::WrongType`] naming the fence. No token is
//!    handed out from a fence this protocol cannot count on. A key of another type keeps its
//!    own expiry, as under the script: the transaction reads it (`PTTL`) before its
//!    `PEXPIRE`, which then applied to that key too, and puts it back.
//! 4. A refusal answers the holder's remaining lease, as the script does, and a lock key of
//!    another type (with or without an expiry) answers `{0, -5, 1}`: `TYPE` is in the same
//!    `EXEC`.
//! 5. The tombstone of an abandoned attempt is not read: an attempt of unknown outcome that
//!    reaches Redis after its abandon holds the name for its ttl, owned by nobody, as an
//!    unfenced lease's does (`kind/unfenced.rs`). Exclusion and tokens are not at stake.
//! 6. Learned per node. Before the first grant, `MULTI`/`EXEC` is tried on a connection of its
//!    own (the pool's checkout), never on the shared one: a server or ACL that refuses
//!    `MULTI` or `EXEC` gets the script, since the commands after a refused `MULTI` would run
//!    one by one. A transaction refused before `EXEC` (an ACL without `XADD`, `PEXPIRE`,
//!    `PTTL` or `TYPE`), or at `EXEC` for want of a permission, changed nothing and gets the
//!    script too, from then on. A `MULTI` refused after the probe (an ACL changed) let the
//!    commands run alone: a lock so taken gets a minted token. Redis Cluster and Redlock
//!    grant by script: the cluster connection does not route a transaction, and Redlock's
//!    masters agree on a token the script proposes. A grant the client sends by script (a
//!    cache entry's lock, `counted_grants(false)`) goes by transaction only where scripts are
//!    refused.
//! 7. With replica acknowledgements, `WAIT` follows `EXEC` in the same pipeline, as after a
//!    script (`node.rs`, invariant 5), and follows the script or the `EXEC` that starts a
//!    fence and the mint's `EXEC` too.

use futures_util::future::BoxFuture;
use redis::Value;

use super::wait::{Answer, Wait};
use super::watched::{Round, cmd, strings};
use super::{Node, Shortfall, lacks_command};
use crate::error::{Error, Result};
use crate::kind::unexpected;
use crate::scripts::{FENCE_RAISE, ScriptCall};
use crate::token::FenceId;

/// How many times a mint tries before it gives up: each try that does not answer moved the
/// fence (another grant came between, or a sequence carried), which a handful of tries outruns.
const MINT_TRIES: usize = 16;

impl Node {
    /// The transaction executor: the grant of `call` (the plain lock's acquire) by
    /// transaction, answered as the script answers: a token, `{0, pttl}` or `{0, -5, 1}`,
    /// with `WAIT` after it when `wait` is given. `Ok(None)` when the script must run instead
    /// (invariant 6).
    pub(super) async fn grant(
        &self,
        call: &ScriptCall,
        wait: Option<&Wait>,
    ) -> Result<Option<Answer>> {
        if self.is_cluster() || !self.allows.transactions.worth_trying() {
            return Ok(None);
        }
        let Some(commands) = call.grant_transaction() else {
            return Ok(None);
        };
        let operation = call.operation();
        if self.allows.transactions.unknown() && !self.transactions_allowed(call).await? {
            return Ok(None);
        }

        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for cmd in commands {
            pipe.add_command(cmd);
        }
        if let Some(wait) = wait {
            pipe.add_command(wait.cmd.clone());
        }
        let replies = self.send(operation, &pipe).await?;
        // MULTI, six QUEUED, then EXEC's array, then WAIT's reply.
        if let Some(Err(e)) = replies.first() {
            // `MULTI` refused after all (an ACL changed since the probe): the commands ran one
            // by one, outside a transaction (invariant 6).
            if lacks_command(e) {
                tracing::warn!(error = %e, "fenced: MULTI refused; granting by script from now on");
                self.allows.transactions.learned(false);
            }
            let added = match replies.get(2) {
                Some(Ok(Value::BulkString(id))) => FenceId::parse(id),
                _ => FenceId::Foreign,
            };
            return match (replies.get(1), added) {
                // The lock was taken, and the fence appended to right after it on the same
                // connection, while the lease was this owner's: that ID is its token.
                (Some(Ok(Value::Okay)), FenceId::Token(token)) => {
                    let token = Value::BulkString(token.to_string().into_bytes());
                    Ok(Some((token, None)))
                }
                // Any other answer, a missing fence's nil included, is minted while the lease
                // is this owner's.
                (Some(Ok(Value::Okay)), _) => self.mint(call, None, None, wait).await.map(Some),
                // Not taken, or unknown: the script decides (and sees the lock held).
                _ => Ok(None),
            };
        }
        let mut replies = replies.into_iter();
        let mut exec = None;
        for (i, reply) in replies.by_ref().take(8).enumerate() {
            match reply {
                // Without scripts there is nothing to fall back on: the refusal names what to
                // grant.
                Err(e) if self.allows.scripts_refused() => {
                    return Err(Error::from_redis(operation, self.timeout, e));
                }
                // A key or channel outside the user's patterns: the script says so in its
                // own words; and the transaction stays worth trying for other keys.
                Err(e) if e.code() == Some("NOPERM") && !e.to_string().contains("run the") => {
                    return Ok(None);
                }
                Err(e) if lacks_command(&e) => {
                    tracing::debug!(error = %e, "fenced: no grant by transaction on this server; using the script");
                    self.allows.transactions.learned(false);
                    return Ok(None);
                }
                // Refused at `EXEC`: nothing ran, and the server closed the transaction. An
                // `EXEC` outside the user's ACL (changed since the probe) is remembered; out
                // of memory or a failed save is not.
                Err(e) if e.code() == Some("EXECABORT") => {
                    if e.to_string().contains("NOPERM") {
                        tracing::warn!(error = %e, "fenced: EXEC refused; granting by script from now on");
                        self.allows.transactions.learned(false);
                    }
                    return Ok(None);
                }
                Err(e) => return Err(Error::from_redis(operation, self.timeout, e)),
                Ok(value) if i == 7 => exec = Some(value),
                Ok(_) => {}
            }
        }
        let short = Wait::read_if(wait, || replies.next(), self.timeout)?;
        let Some(Value::Array(results)) = exec else {
            return Err(unexpected(operation, format!("{exec:?}")));
        };
        let [set, added, fence_life, _expiry, pttl, kind] = &results[..] else {
            return Err(unexpected(operation, format!("{results:?}")));
        };
        // `WRONGTYPE` at the fence, granted or not: a key of another type, whose own expiry
        // goes back (invariant 3).
        if !matches!(added, Value::BulkString(_) | Value::Nil) {
            self.restore_life(operation, call, fence_life).await;
        }
        let pair = |a: i64, b: i64| Value::Array(vec![Value::Int(a), Value::Int(b)]);
        match (set, pttl) {
            (Value::Okay, _) => {
                let id = match added {
                    Value::BulkString(id) => FenceId::parse(id),
                    // No fence: `NOMKSTREAM` appended nothing (invariant 2).
                    Value::Nil => return self.start_fence(call, short, wait).await.map(Some),
                    // `WRONGTYPE`: not a stream (invariant 3).
                    _ => FenceId::Foreign,
                };
                match id {
                    // Invariants 1 and 2.
                    FenceId::Token(token) => Ok(Some((
                        Value::BulkString(token.to_string().into_bytes()),
                        short,
                    ))),
                    FenceId::Carry(ms) => self.mint(call, Some(ms), short, wait).await.map(Some),
                    FenceId::Foreign => self.mint(call, None, short, wait).await.map(Some),
                }
            }
            // Invariant 4: `TYPE` answers a status ("string"), read as a simple string.
            (Value::Nil, _) if !matches!(kind, Value::SimpleString(t) if t == "string") => {
                Ok(Some((
                    Value::Array(vec![Value::Int(0), Value::Int(-5), Value::Int(1)]),
                    short,
                )))
            }
            (Value::Nil, Value::Int(ms)) => Ok(Some((pair(0, *ms), short))),
            other => Err(unexpected(operation, format!("{other:?}"))),
        }
    }

    /// Gives a fence key of another type back the life it had before the grant's
    /// `PEXPIRE` (`life`, its `PTTL` in the same `EXEC`), as the script, which reads its type
    /// first, leaves it (invariant 3). At best: a round trip after the `EXEC`, whose failure
    /// leaves the retention as the key's expiry and changes no answer.
    async fn restore_life(&self, operation: &'static str, call: &ScriptCall, life: &Value) {
        let Some(fence) = call.key_at(2) else {
            return;
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        match life {
            Value::Int(-1) => pipe.cmd("PERSIST").arg(&fence),
            Value::Int(ms) if *ms > 0 => pipe.cmd("PEXPIRE").arg(&fence).arg(*ms),
            _ => return,
        };
        // At best: the grant's answer is the key's type, however this goes (an ACL without
        // `PERSIST`, a lost reply).
        if let Err(e) = self.send(operation, &pipe).await {
            tracing::debug!(error = %e, "fenced: the fence key of another type kept the retention as its expiry");
        }
    }

    /// The token of a lease granted by transaction where there was no fence (invariant 2),
    /// appended while the lock key still holds this owner: the lease then lasted from the
    /// grant past the append, so no later grant came between the lease and its token. Where
    /// the node sends scripts, one script does it, run as every script is (loaded again on
    /// `NOSCRIPT`, `WAIT` after it): the write-back's with no token (`fence_raise.lua`), which
    /// starts a fence still missing one ms past the clock and appends `*` to one another grant
    /// started meanwhile. Without scripts, or where the server refuses them (an ACL without
    /// scripting that no refusal has taught this node yet: the refusal ran nothing), two round
    /// trips on the shared connection, as the grant went: `XADD fence MAXLEN 0 * f 1` starts
    /// the fence at the clock's `ms-0`, which is not handed out; then one transaction appends
    /// the ID `(ms + 1)-0`, above every token handed out at or before ms, and reads the lock
    /// key, whose token is handed out if the key still holds this owner. Anything else (the
    /// lease lost; the fence moved past that ID meanwhile, as a cache entry's invalidation
    /// moves it without the lease; a key of another type) goes to the mint, which reads
    /// first. Not the mint from the start: its `WATCH` rounds hold the pool's connections,
    /// which renewals without scripts need (600 names granted at once behind a 10 ms round
    /// trip lost 42 leases so). Boxed, as the mint is.
    fn start_fence<'a>(
        &'a self,
        call: &'a ScriptCall,
        short: Option<Shortfall>,
        wait: Option<&'a Wait>,
    ) -> BoxFuture<'a, Result<Answer>> {
        Box::pin(async move {
            let operation = call.operation();
            let Some([lock, fence, _, owner, _, retention]) = call.exact_parts::<6>() else {
                return Err(unexpected(
                    operation,
                    "no fence to start for this call".into(),
                ));
            };
            if !self.allows.scripts_refused() {
                // No token to raise the fence to (an empty ARGV[2]): its next one. The
                // write-back's script, its errors named after the grant it ends.
                let next = ScriptCall::new(&FENCE_RAISE)
                    .named_as(operation)
                    .key(lock)
                    .key(fence)
                    .arg(owner)
                    .arg("")
                    .arg(retention);
                match self.run_script(&next, wait).await {
                    Ok((token @ Value::BulkString(_), acked)) => {
                        return Ok((token, short.or(acked)));
                    }
                    // 0: the lease lost, or a fence this protocol cannot count on.
                    Ok((_, acked)) => return self.mint(call, None, short.or(acked), wait).await,
                    // Scripts refused: the script ran nothing, and the transactions below
                    // need none.
                    Err(e) if e.refuses_scripts() => {}
                    Err(e) => return Err(e),
                }
            }
            let mut start = redis::pipe();
            start
                .ignore_errors()
                .add_command(cmd("XADD", &[fence, b"MAXLEN", b"0", b"*", b"f", b"1"]));
            let started = self.send(operation, &start).await?;
            let past = match started.first() {
                Some(Ok(Value::BulkString(id))) => match FenceId::parse(id) {
                    FenceId::Token(token) => token / 1000 + 1,
                    FenceId::Carry(ms) => ms,
                    FenceId::Foreign => return self.mint(call, None, short, wait).await,
                },
                _ => return self.mint(call, None, short, wait).await,
            };
            let past = format!("{past}-0");
            let mut pipe = redis::pipe();
            pipe.ignore_errors()
                .cmd("MULTI")
                .add_command(cmd(
                    "XADD",
                    &[fence, b"MAXLEN", b"0", past.as_bytes(), b"f", b"1"],
                ))
                .add_command(cmd("PEXPIRE", &[fence, retention]))
                .add_command(cmd("MGET", &[lock]))
                .cmd("EXEC");
            if let Some(wait) = wait {
                pipe.add_command(wait.cmd.clone());
            }
            let replies = self.send(operation, &pipe).await?;
            // MULTI, three QUEUED, then EXEC's array, then WAIT's reply.
            let mut replies = replies.into_iter();
            let exec = replies.nth(4);
            let acked = Wait::read_if(wait, || replies.next(), self.timeout)?;
            let short = short.or(acked);
            if let Some(Ok(Value::Array(results))) = &exec
                && let [Value::BulkString(id), _expiry, Value::Array(held)] = &results[..]
                && matches!(&held[..], [Value::BulkString(holder)] if holder.as_slice() == owner)
                && let FenceId::Token(token) = FenceId::parse(id)
            {
                let token = Value::BulkString(token.to_string().into_bytes());
                return Ok((token, short));
            }
            self.mint(call, None, short, wait).await
        })
    }

    /// The token of a lease granted by transaction whose `XADD` answered none (invariant 3):
    /// `carry`, the ms of the next ID when the sequence ran past 999; `None` when the fence
    /// must be read first (one found missing is started as `start_fence` starts it without
    /// scripts). Boxed, as the probe is: the grant's future would otherwise nest it, and a
    /// caller's `async` block around an acquire would pass the compiler's default type depth.
    fn mint<'a>(
        &'a self,
        call: &'a ScriptCall,
        carry: Option<u64>,
        short: Option<Shortfall>,
        wait: Option<&'a Wait>,
    ) -> BoxFuture<'a, Result<Answer>> {
        Box::pin(async move {
            let operation = call.operation();
            let (Some(pool), Some([lock, fence, _, owner, _, retention])) =
                (&self.pool, call.exact_parts::<6>())
            else {
                return Err(unexpected(operation, "no mint for this call".into()));
            };
            let step = async {
                let mut next = carry.map(|ms| format!("{ms}-0"));
                // The fence is no fence this protocol counts on: the lock goes back.
                let mut foreign = false;
                let mut fresh = false;
                for _ in 0..MINT_TRIES {
                    // What the round read and decided, for after its `EXEC`.
                    let (mut held, mut starts, mut wrote) = (false, false, false);
                    let decide = |replies: &[Value]| {
                        let shape = || unexpected(operation, format!("{replies:?}"));
                        let [seen, kind] = replies else {
                            return Err(shape());
                        };
                        let [lock_holds, legacy] = strings::<2>(seen).ok_or_else(shape)?;
                        let kind: String =
                            redis::from_redis_value_ref(kind).map_err(|_| shape())?;
                        held = lock_holds.as_deref() == Some(owner);
                        // A `*` appended to no fence starts one at the clock's `ms-0`, which a
                        // grant earlier in that ms may have passed: not handed out, the next
                        // try appends the ID past it (invariant 2).
                        starts = kind == "none" && next.is_none();
                        let mut writes = Vec::new();
                        if !held {
                            // The lease ran out in between: not granted, nothing to write.
                        } else if foreign {
                            writes.push(cmd("DEL", &[lock]));
                        } else if kind == "none" || kind == "stream" {
                            // Kept until a round is written: after a voided `EXEC` (another
                            // grant burnt an ID meanwhile) the ID past a started fence is
                            // still owed, and `*` could hand out one in the start's ms.
                            let id = next.clone().unwrap_or_else(|| "*".into());
                            writes.push(cmd(
                                "XADD",
                                &[fence, b"MAXLEN", b"0", id.as_bytes(), b"f", b"1"],
                            ));
                        } else if let Some(ms) = legacy.as_deref().and_then(legacy_floor) {
                            writes.push(cmd("DEL", &[fence]));
                            let id = format!("{ms}-0");
                            writes.push(cmd(
                                "XADD",
                                &[fence, b"MAXLEN", b"0", id.as_bytes(), b"f", b"1"],
                            ));
                        } else {
                            foreign = true;
                            writes.push(cmd("DEL", &[lock]));
                        }
                        if !foreign && !writes.is_empty() {
                            writes.push(cmd("PEXPIRE", &[fence, retention]));
                        }
                        wrote = !writes.is_empty();
                        Ok(writes)
                    };
                    let reads = [cmd("MGET", &[lock, fence]), cmd("TYPE", &[fence])];
                    let round = self
                        .watch_round(
                            pool,
                            operation,
                            &mut fresh,
                            &[lock, fence],
                            reads,
                            decide,
                            wait,
                        )
                        .await?;
                    let Round::Done(results, acked) = round else {
                        continue;
                    };
                    let short = short.or(acked);
                    if foreign && held {
                        return Err(Error::WrongType {
                            key: String::from_utf8_lossy(fence).into_owned(),
                            operation,
                        });
                    }
                    if !wrote {
                        let lost = Value::Array(vec![Value::Int(0), Value::Int(-2)]);
                        return Ok((lost, short));
                    }
                    // The `XADD`: the last write but the `PEXPIRE`.
                    match results.iter().rev().nth(1) {
                        Some(Value::BulkString(id)) => match FenceId::parse(id) {
                            FenceId::Token(token) if starts => {
                                next = Some(format!("{}-0", token / 1000 + 1));
                            }
                            FenceId::Token(token) => {
                                let token = Value::BulkString(token.to_string().into_bytes());
                                return Ok((token, short));
                            }
                            FenceId::Carry(ms) => next = Some(format!("{ms}-0")),
                            // An ID out of range: the lock goes back, then the error.
                            FenceId::Foreign => foreign = true,
                        },
                        // An explicit ID the fence had passed already: the server's next.
                        _ => next = None,
                    }
                }
                Err(unexpected(
                    operation,
                    format!("the fence moved on {MINT_TRIES} times while a token was minted"),
                ))
            };
            self.within_timeout(pool, operation, step).await
        })
    }

    /// Whether the server lets this client run the grant's transaction and its mint
    /// (invariant 6): the pool's checkout tries an empty `MULTI`/`EXEC` on a dedicated
    /// connection, never on the shared one, where a `MULTI` refused or unknown would let the
    /// commands behind it run one by one; then `WATCH` of `call`'s fence, which the mint
    /// needs (the connection is closed after). One probe per node at a time: the grants that
    /// come while it runs go by script. Only a refusal is remembered; a probe that could not
    /// run (no connection in time, a server that is busy) sends this grant by script and the
    /// next one probes again. Without scripts there is nothing to fall back on: a grant waits
    /// for the probe running, and a refusal is the grant's error, naming the command to allow.
    fn transactions_allowed<'a>(&'a self, call: &'a ScriptCall) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let Some(pool) = &self.pool else {
                self.allows.transactions.learned(false);
                return Ok(false);
            };
            // While another grant probes, this one goes by script rather than wait its turn;
            // without scripts there is no other way, and it waits for the probe's answer (the
            // probe's steps are bounded by the call's timeout).
            let _one = if self.allows.scripts_refused() {
                self.allows.transactions_probe.lock().await
            } else {
                let Ok(one) = self.allows.transactions_probe.try_lock() else {
                    return Ok(false);
                };
                one
            };
            if !self.allows.transactions.unknown() {
                return Ok(self.allows.transactions.worth_trying());
            }
            let checkout = tokio::time::timeout(self.timeout, pool.checkout(true, None)).await;
            let mut pooled = match checkout {
                Ok(Ok(pooled)) => pooled,
                // `MULTI` or `EXEC` refused, or unknown (a proxy): that connection is closed
                // already.
                Ok(Err(e @ Error::Permission { .. })) if self.allows.scripts_refused() => {
                    return Err(e);
                }
                Ok(Err(Error::Permission { .. })) => return Ok(self.refused()),
                Ok(Err(Error::Redis(e))) if lacks_command(&e) => return Ok(self.refused()),
                // Without scripts there is no other way: a probe that could not run (the server
                // down, say) is the grant's error, transient, and the next grant probes again.
                Ok(Err(e)) if self.allows.scripts_refused() => return Err(e),
                Err(_) if self.allows.scripts_refused() => {
                    return Err(Error::Timeout {
                        operation: call.operation(),
                        after: self.timeout,
                    });
                }
                Ok(Err(_)) | Err(_) => return Ok(false),
            };
            let Some(fence) = call.key_at(2) else {
                return Ok(false);
            };
            // Closed after the probe: the `WATCH` is not undone.
            pooled.dirty();
            let mut conn = pooled.conn();
            let mut watch = redis::cmd("WATCH");
            watch.arg(&fence);
            match self
                .bounded(call.operation(), watch.query_async::<()>(&mut conn))
                .await
            {
                Ok(()) => {
                    self.allows.transactions.learned(true);
                    Ok(true)
                }
                Err(e @ Error::Permission { .. }) if self.allows.scripts_refused() => Err(e),
                Err(Error::Permission { .. }) => Ok(self.refused()),
                Err(e) if self.allows.scripts_refused() => Err(e),
                Err(_) => Ok(false),
            }
        })
    }

    /// The server or the ACL refuses the transaction: grants go by script from now on.
    fn refused(&self) -> bool {
        tracing::debug!("fenced: MULTI or EXEC refused; granting by script");
        self.allows.transactions.learned(false);
        false
    }
}

/// The ms of the ID that follows a fence of an earlier development build: a decimal string,
/// the last token it handed out (the server time in µs of its grant), whose token the ID's
/// is above (invariant 3). `None` for any other string, or one whose ID would be out of range.
fn legacy_floor(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 16 || text[0] == b'0' {
        return None;
    }
    let token: u64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    let ms = token / 1000 + 1;
    (ms <= crate::token::FENCE_MAX_MS).then_some(ms)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use super::super::differential::lab;
    use super::super::watched::INTERLOPER;
    use super::*;
    use crate::keys::LockKeys;
    use crate::kind::LeaseKind;
    use crate::kind::exclusive::Exclusive;
    use crate::token::OwnerToken;

    /// The ID past a fence the mint started is owed until a round is written: when another
    /// grant's ID voids the round that appends it (invariant 2), the next round appends that
    /// ID still, not `*`, which the clock, two ms on by then, would answer above it: a token
    /// in a later ms than the one past the start, and, had the clock not moved on, one inside
    /// the start's ms, where a grant from the lost fence may have handed out as much.
    #[test]
    fn a_mint_whose_round_another_grant_voided_still_appends_the_id_past_the_fence_it_started() {
        let (server, runtime, nodes) = lab();
        let lock = Exclusive {
            name: "m".into(),
            keys: Arc::new(LockKeys::new("mint:", "m")),
            fence_retention_ms: 60_000,
            counted: true,
        };
        let owner = OwnerToken::generate().unwrap();
        let (lock_key, fence) = (lock.keys.lock.clone(), lock.keys.fence.clone());
        let mut raw = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        // The write runs under the interloper's lock, which every lib test's `WATCH` round
        // takes: bounded, so a stalled server fails this test rather than holding the others.
        raw.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        // Held by the owner, and no fence: the mint starts one, then appends the ID past it.
        let () = redis::cmd("SET")
            .arg(&lock_key)
            .arg(owner.as_str())
            .arg("PX")
            .arg(30_000)
            .query(&mut raw)
            .unwrap();
        let started_ms = Arc::new(AtomicU64::new(0));
        let rounds = Arc::new(AtomicUsize::new(0));
        let (seen, counted) = (started_ms.clone(), rounds.clone());
        let write = move || {
            // The second round, the one that appends the ID past the start: another grant
            // burns an ID inside the start's ms, and the clock moves two ms on.
            if counted.fetch_add(1, Ordering::SeqCst) != 1 {
                return;
            }
            let info: Vec<Value> = redis::cmd("XINFO")
                .arg("STREAM")
                .arg(&fence)
                .query(&mut raw)
                .unwrap();
            let last = info
                .chunks(2)
                .find_map(|pair| match pair {
                    [Value::BulkString(k), Value::BulkString(id)]
                        if k.as_slice() == b"last-generated-id" =>
                    {
                        Some(String::from_utf8(id.clone()).unwrap())
                    }
                    _ => None,
                })
                .unwrap();
            let ms: u64 = last.strip_suffix("-0").unwrap().parse().unwrap();
            seen.store(ms, Ordering::SeqCst);
            let _: String = redis::cmd("XADD")
                .arg(&fence)
                .arg("MAXLEN")
                .arg(0)
                .arg(format!("{ms}-5"))
                .arg("f")
                .arg(1)
                .query(&mut raw)
                .unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            loop {
                let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
                if secs * 1000 + micros / 1000 >= ms + 2 {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "the server clock stood still"
                );
            }
        };
        *INTERLOPER.lock().unwrap() = Some((lock_key.clone().into_bytes(), Box::new(write)));
        let call = lock.acquire(&owner, 30_000);
        let answer = runtime.block_on(nodes.scriptless.mint(&call, None, None, None));
        *INTERLOPER.lock().unwrap() = None;
        let (token, _) = answer.unwrap();
        assert_eq!(
            rounds.load(Ordering::SeqCst),
            3,
            "start, voided round, append"
        );
        let ms = started_ms.load(Ordering::SeqCst);
        assert_eq!(
            token,
            Value::BulkString(((ms + 1) * 1000).to_string().into_bytes()),
            "the fence started at {ms}-0"
        );
    }

    #[test]
    fn a_legacy_fence_gives_the_id_just_past_its_token() {
        assert_eq!(legacy_floor(b"1700000000000042"), Some(1_700_000_000_001));
        assert_eq!(legacy_floor(b"1700000000000999"), Some(1_700_000_000_001));
        assert_eq!(legacy_floor(b"5"), Some(1));
        assert_eq!(legacy_floor(b"9007199254738999"), Some(9_007_199_254_739));
        for foreign in [
            &b"9007199254739000"[..],
            b"18446744073709551615",
            b"0",
            b"017",
            b"-1",
            b"12a",
            b"",
            b"not a fence",
        ] {
            assert_eq!(legacy_floor(foreign), None, "{foreign:?}");
        }
    }
}
