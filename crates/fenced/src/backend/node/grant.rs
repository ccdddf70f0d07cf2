//! The plain lock's grant by transaction, the default on one server and behind Sentinel:
//! `MULTI`, `SET lock owner NX PX ttl`, `SET fence 0 NX PX retention`, `INCR fence`,
//! `PTTL lock`, `GET fence:replid`, `INFO replication`, `EXEC`. The script (`acquire.lua`)
//! reads `TIME`, the fence and the tombstone and writes the fence on every grant, in Lua.
//!
//! Invariants:
//! 1. Tokens strictly increase across holders of a name, whichever way each grant went,
//!    while the fence is kept. `INCR` hands out one more than the last token, whoever wrote
//!    it (the script stores its tokens as decimals, which `INCR` reads). A refused `SET` only
//!    burns a number.
//! 2. A fence lost whole never sends tokens backwards. A lost fence (a new name, a fence past
//!    its retention, a restart without persistence) starts at 0 (the `SET … NX` before the
//!    `INCR`, which also gives it an expiry when the grant is refused), and one of another
//!    type or not a number makes `INCR` fail. Either way the grant's count is not used:
//!    `fence_mint.lua` hands out the lease's token as the acquire script would, the larger of
//!    the fence and the server clock, and writes it, atomically. Every token handed out is at
//!    most the server time of its grant (the clock's tokens are that time; `INCR`'s lag
//!    behind it unless a name is granted more than once a microsecond), so the minted one is
//!    above them all. `MIN_COUNTED` tells a count from a lost one: no token below it was
//!    ever read from a clock.
//! 3. A fence restored OLDER than it was never sends tokens backwards either. A count is
//!    trusted only under the replication ID it was minted under: the mint writes the
//!    server's `master_replid` beside the fence (`fence:replid`), and the transaction reads
//!    it back with the server's own, atomically with the `INCR`; on a master whose ID differs,
//!    or on a server that is not a master, the count is not used and the token is minted
//!    (invariant 2). Why that is enough: Redis and Valkey draw a new random replication ID
//!    whenever a server's data may have come from elsewhere or from the past: at every start
//!    (a restart from a snapshot or an append-only file) and at every promotion (a failover
//!    to a replica that missed the last grants; a master demoted, resynchronised from an
//!    older copy and promoted again). Between two such moments a master's data changes only
//!    by the commands it runs, so its fence only grows, or is lost whole. A mint under ID `R`
//!    leaves the fence above every earlier token, and only a master whose ID is `R` trusts
//!    counts after it: the same master, in the same term, whose fence has only grown since.
//!    A mint whose ID changed after the transaction read it writes an ID that is no longer
//!    any master's, which costs a mint later, never a token. The ID is read in every
//!    transaction, not once per connection: a connection outlives a demotion and a promotion
//!    of its server.
//!    What it does not cover, and the script does: commands that put older data back on a
//!    running master without a new ID (`DEBUG RELOAD` of an older file, `SWAPDB` or `MOVE`
//!    with an older copy, `RESTORE` of an older dump of the fence), and servers that keep one
//!    replication ID through promotions (Dragonfly: never counted, `learn_counting`).
//! 4. The tombstone of an abandoned attempt is not read: an attempt of unknown outcome that
//!    reaches Redis after its abandon holds the name for its ttl, owned by nobody, as an
//!    unfenced lease's does (`kind/unfenced.rs`). Exclusion and tokens are not at stake.
//!    `INCR` keeps the fence's expiry: a name granted only by transaction keeps its fence for
//!    the retention after its last mint, then mints again.
//! 5. A refusal answers the holder's remaining lease, as the script does. A lock key with no
//!    expiry (held forever, or a key of another type) goes to the script, which tells them
//!    apart.
//! 6. Learned per node. Before the first grant, one probe (`MULTI`, `INFO replication`,
//!    `EXEC`) runs on a connection of its own, never on the shared one: a server or ACL that
//!    refuses `MULTI`, `EXEC` or `INFO` gets the script, since the commands after a refused
//!    `MULTI` would run one by one. A transaction refused before `EXEC` (an ACL without
//!    `INCR`, `PTTL` or `GET`), or at `EXEC` for want of a permission, changed nothing and
//!    gets the script too, from then on. A `MULTI` refused after the probe (an ACL changed)
//!    let the commands run alone: a lock so taken gets the mint's token. Redis Cluster and
//!    Redlock grant by script: the cluster connection does not route a transaction, and
//!    Redlock's masters agree on a token the script proposes. A client built with
//!    `counted_grants(false)` always sends the script.
//! 7. With replica acknowledgements, `WAIT` follows `EXEC` in the same pipeline, as after a
//!    script (`node.rs`, invariant 5); the mint waits as any script does.

use futures_util::future::BoxFuture;
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
        // MULTI, six QUEUED, then EXEC's array, then WAIT's reply.
        if let Some(Err(e)) = replies.first() {
            // `MULTI` refused after all (an ACL changed since the probe): the commands ran one
            // by one, outside a transaction (invariant 6).
            if lacks_command(e) {
                tracing::warn!(error = %e, "fenced: MULTI refused; granting by script from now on");
                self.grants.learned(false);
            }
            return match replies.get(1) {
                // The lock was taken: its token is the clock's, by the mint, which checks
                // that the lease is still this owner's.
                Some(Ok(Value::Okay)) => self.mint(call, "", None).await.map(Some),
                // Not taken, or unknown: the script decides (and sees the lock held).
                _ => Ok(None),
            };
        }
        let mut replies = replies.into_iter();
        let mut exec = None;
        for (i, reply) in replies.by_ref().take(8).enumerate() {
            match reply {
                // A key or channel outside the user's patterns: the script says so in its
                // own words; and the transaction stays worth trying for other keys.
                Err(e) if e.code() == Some("NOPERM") && !e.to_string().contains("run the") => {
                    return Ok(None);
                }
                Err(e) if lacks_command(&e) => {
                    tracing::debug!(error = %e, "fenced: no grant by transaction on this server; using the script");
                    self.grants.learned(false);
                    return Ok(None);
                }
                // Refused at `EXEC`: nothing ran, and the server closed the transaction. An
                // `EXEC` outside the user's ACL (changed since the probe) is remembered; out
                // of memory or a failed save is not.
                Err(e) if e.code() == Some("EXECABORT") => {
                    if e.to_string().contains("NOPERM") {
                        tracing::warn!(error = %e, "fenced: EXEC refused; granting by script from now on");
                        self.grants.learned(false);
                    }
                    return Ok(None);
                }
                Err(e) => return Err(Error::from_redis(operation, self.timeout, e)),
                Ok(value) if i == 7 => exec = Some(value),
                Ok(_) => {}
            }
        }
        let short = self.shortfall(wait.map(|(_, needed)| needed), replies.next())?;
        let Some(Value::Array(results)) = exec else {
            return Err(unexpected(operation, format!("{exec:?}")));
        };
        let [set, _floor, incr, pttl, counted_under, info] = &results[..] else {
            return Err(unexpected(operation, format!("{results:?}")));
        };
        match (set, incr, pttl) {
            (Value::Okay, incr, _) => {
                let replid = master_replid(info);
                // Granted, counted on a fence that holds, in this master's term
                // (invariants 1 and 3).
                if let (Value::Int(token), Some(replid)) = (incr, replid)
                    && *token >= MIN_COUNTED
                    && matches!(counted_under, Value::BulkString(b) if b == replid.as_bytes())
                {
                    return Ok(Some((
                        Value::BulkString(token.to_string().into_bytes()),
                        short,
                    )));
                }
                // Granted on a fence whose count cannot be trusted (invariants 2 and 3): the
                // clock's token, by the script that takes the larger of the fence and the
                // clock, and the fence counts under this master's ID from now on.
                self.mint(call, replid.unwrap_or_default(), short)
                    .await
                    .map(Some)
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

    /// The token of a lease granted by transaction whose count is not used: `fence_mint.lua`
    /// (invariant 2), recording `replid` as the fence's (invariant 3). Boxed, as the probe
    /// is: the grant's future would otherwise nest them, and a caller's `async` block around
    /// an acquire would pass the compiler's default type depth.
    fn mint<'a>(
        &'a self,
        call: &'a ScriptCall,
        replid: &'a str,
        short: Option<Shortfall>,
    ) -> BoxFuture<'a, Result<(Value, Option<Shortfall>)>> {
        Box::pin(async move {
            let mint = call
                .fence_mint(replid)
                .ok_or_else(|| unexpected(call.lua.operation, "no mint for this call".into()))?;
            let (value, mint_short) = self.run_acked(&mint).await?;
            Ok((value, short.or(mint_short)))
        })
    }

    /// Whether the server lets this client run the grant's transaction (invariant 6):
    /// `MULTI`, `INFO replication`, `EXEC` on a dedicated connection (the pool tries an empty
    /// `MULTI`/`EXEC` first), never on the shared one, where a `MULTI` refused or unknown
    /// would let the commands behind it run one by one. One probe per node at a time: the
    /// grants that come while it runs go by script. Only a refusal is remembered; a probe that could not run (no connection
    /// in time, a server that is busy) sends this grant by script and the next one probes
    /// again.
    fn transactions_allowed(&self, operation: &'static str) -> BoxFuture<'_, Result<bool>> {
        Box::pin(self.probe_transactions(operation))
    }

    /// [`transactions_allowed`](Self::transactions_allowed), unboxed.
    async fn probe_transactions(&self, operation: &'static str) -> Result<bool> {
        let Some(pool) = &self.pool else {
            self.grants.learned(false);
            return Ok(false);
        };
        // While another grant probes, this one goes by script rather than wait its turn.
        let Ok(_one) = self.grant_probe.try_lock() else {
            return Ok(false);
        };
        if !self.grants.unknown() {
            return Ok(self.grants.worth_trying());
        }
        let checkout = tokio::time::timeout(self.timeout, pool.checkout(true, None)).await;
        let pooled = match checkout {
            Ok(Ok(pooled)) => pooled,
            // `MULTI` or `EXEC` refused, or unknown (a proxy): that connection is closed
            // already.
            Ok(Err(Error::Permission { .. })) => return Ok(self.refused()),
            Ok(Err(Error::Redis(e))) if lacks_command(&e) => return Ok(self.refused()),
            Ok(Err(_)) | Err(_) => return Ok(false),
        };
        // Closed after the probe: a client keeps one connection for its commands.
        let mut pooled = pooled;
        pooled.dirty();
        let mut probe = redis::pipe();
        probe
            .ignore_errors()
            .cmd("MULTI")
            .cmd("INFO")
            .arg("replication")
            .cmd("EXEC");
        let mut conn = pooled.conn();
        let replies: Vec<std::result::Result<Value, RedisError>> =
            match self.bounded(operation, probe.query_async(&mut conn)).await {
                Ok(replies) => replies,
                Err(_) => return Ok(false),
            };
        let allowed = matches!(replies.last(), Some(Ok(Value::Array(_))));
        let refused = replies.iter().any(|reply| match reply {
            Err(e) => lacks_command(e) || e.to_string().contains("NOPERM"),
            Ok(_) => false,
        });
        if allowed {
            self.grants.learned(true);
        } else if refused {
            self.refused();
        }
        Ok(allowed)
    }

    /// After `INFO server` at connect: a server that does not draw a new replication ID at
    /// every start and every promotion never has its counts trusted (invariant 3); its
    /// grants go by script.
    pub(crate) fn learn_counting(&self, info_server: &str) {
        if !renews_replication_id(info_server) {
            tracing::debug!(
                "fenced: the server's replication ID is not known to change with its data; granting by script"
            );
            self.grants.learned(false);
        }
    }

    /// The server or the ACL refuses the transaction: grants go by script from now on.
    fn refused(&self) -> bool {
        tracing::debug!("fenced: MULTI, EXEC or INFO refused; granting by script");
        self.grants.learned(false);
        false
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

/// Whether `INFO server` comes from a server that draws a new random replication ID at every
/// start and every promotion (invariant 3): Redis, Valkey and their forks, which report the
/// process's random `run_id`. Dragonfly reports neither and keeps one replication ID for the
/// life of its process, through promotions.
fn renews_replication_id(info_server: &str) -> bool {
    let has = |field: &str| info_server.lines().any(|line| line.starts_with(field));
    has("run_id:") && !has("dragonfly_version:")
}

/// The replication ID of `INFO replication`'s reply, when the server is a master; `None`
/// for a replica or a reply without one (invariant 3). Read as bytes, line by line: this runs
/// on every grant, and the reply is a few hundred bytes.
fn master_replid(info: &Value) -> Option<&str> {
    let text: &[u8] = match info {
        Value::BulkString(bytes) => bytes,
        Value::VerbatimString { text, .. } => text.as_bytes(),
        _ => return None,
    };
    let mut master = false;
    let mut replid = None;
    for line in text.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(role) = line.strip_prefix(b"role:") {
            master = role == b"master";
        } else if let Some(id) = line.strip_prefix(b"master_replid:") {
            // Forty hex digits; anything else is not an ID this rule can rely on.
            if id.len() == 40 && id.iter().all(u8::is_ascii_hexdigit) {
                replid = std::str::from_utf8(id).ok();
            }
            // The role comes first; nothing after the ID matters.
            break;
        }
    }
    replid.filter(|_| master)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_masters_forty_digit_replication_id_counts() {
        let id = "d4f19b68cd3d6a928bb8eb46b11575e1e850e0f8";
        let reply = |text: String| Value::BulkString(text.into_bytes());
        let master = format!(
            "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_replid:{id}\r\nmaster_replid2:0000000000000000000000000000000000000000\r\n"
        );
        assert_eq!(master_replid(&reply(master.clone())), Some(id));
        let replica = master.replace("role:master", "role:slave");
        assert_eq!(master_replid(&reply(replica)), None);
        let short = master.replace(id, "d4f19b");
        assert_eq!(master_replid(&reply(short)), None);
        assert_eq!(master_replid(&reply("role:master\r\n".into())), None);
        assert_eq!(master_replid(&Value::Nil), None);
    }

    #[test]
    fn counts_are_trusted_on_redis_and_valkey_only() {
        let redis = "# Server\r\nredis_version:7.0.15\r\nrun_id:5c1e4a1b2d\r\ntcp_port:6379\r\n";
        let valkey = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\nrun_id:9a0b\r\n";
        let dragonfly = "# Server\r\nredis_version:7.4.0\r\ndragonfly_version:df-v1.30.0\r\nredis_mode:standalone\r\n";
        assert!(renews_replication_id(redis));
        assert!(renews_replication_id(valkey));
        assert!(!renews_replication_id(dragonfly));
        assert!(!renews_replication_id(&format!("{dragonfly}run_id:1\r\n")));
        assert!(!renews_replication_id(""));
    }
}
