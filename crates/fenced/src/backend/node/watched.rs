//! Locks where scripts are forbidden: the lock's steps as `WATCH`/`MULTI`/`EXEC` transactions,
//! for servers and users that refuse `EVAL`/`EVALSHA` (an ACL without `@scripting`, a proxy
//! without scripts, a server built without Lua).
//!
//! Invariants:
//! 1. Same keys, same values, same replies. Each twin reads what its script reads and writes
//!    what it writes, and answers what the script answers, so the engine cannot tell them
//!    apart, and clients with and without scripts share a name safely.
//! 2. Read under `WATCH`, then `MULTI`/`EXEC`: the writes, or nothing for a step that only
//!    answers. Any change to a watched key between the read and `EXEC` (another client's
//!    script, transaction or command, an expiry on Redis 7) makes `EXEC` answer nil: nothing
//!    was written, and the step reads again, within the call's timeout. So a step acts on
//!    reads that were still true when it acted, as the script's are; an answer without
//!    writes too (an empty `EXEC` vouches for its reads, several commands read apart).
//! 3. No twin hands out a token: without scripts, grants go by transaction (`grant.rs`),
//!    which appends to the same fence as the scripts, so tokens strictly increase across
//!    every grant of a name, by script or not.
//! 4. `WATCH` belongs to a connection: each step runs on a dedicated connection of a pool
//!    of the lock's own (the user's transactions cannot starve renewals), given back only
//!    once clean (`EXEC` answered), closed otherwise (a timeout mid-step). A closed
//!    connection may still deliver a step already written to it; its `WATCH` still guards
//!    it. Behind Sentinel, a connection is used only while its master is the master, and
//!    its errors tell the client to ask Sentinel again, as the main connection's do.
//! 5. Only the lock's steps have a twin: renewal, release, abandon and force release (the
//!    grant is a transaction of its own, `grant.rs`; reads are no script, `reads.rs`). Every
//!    other call is refused with [`Error::Unsupported`] before anything is sent, saying why.
//!    One server or Sentinel only: a Redis Cluster's and Redlock's nodes have no pool here.
//! 6. Chosen by the client (`ClientBuilder::without_scripts`) or learned from the first
//!    refusal of a script of a call that has a twin: the executor loop decides (`exec.rs`,
//!    invariant 2), and the node's record keeps it (`allows.rs`).
//! 7. A lock key of another type: the twins answer as their scripts do, a refusal where the
//!    script reads it by `MGET`, `WrongType` where by `GET` (release, abandon, force
//!    release).
//! 8. A renewal batch goes in parts: each a `WATCH` transaction of up to 128 steps (every
//!    step's keys watched, every step's reads in one round trip, every step's writes in one
//!    `EXEC`), the parts at once on the pool's connections, each part's leases settled as its
//!    `EXEC` answers. So a batch costs two round trips however many leases it renews, and a
//!    part held up (a key changed under it, a slow connection) holds up no other. A key that
//!    changes voids its part's `EXEC`, and the part reads again: in one `EXEC` either every
//!    step of a part acted on reads still true, or none wrote.

use std::ops::Range;
use std::sync::Arc;

use redis::{Cmd, RedisError, Value};

use super::super::pool::TxPool;
use super::wait::{Answer, Wait};
use super::{Node, Shortfall};
use crate::error::{Error, Result};
use crate::kind::unexpected;
use crate::scripts::{ScriptCall, Step};

/// The most calls of a renewal batch one `WATCH` transaction carries (invariant 8): enough
/// that ten thousand leases renew in a few round trips over the pool's connections, few
/// enough that a key changing under one part makes it read little again.
const PART: usize = 128;

/// One step of the lock, as the script it stands for (invariant 1).
pub(super) enum Twin<'a> {
    /// `extend.lua` without a take-over: lock, epoch key; owner, ttl, epoch.
    Extend([&'a [u8]; 5]),
    /// `release.lua`: lock; owner, channel, message.
    Release([&'a [u8]; 4]),
    /// `abandon.lua`: lock, tombstone; owner, channel, message, patience.
    Abandon([&'a [u8]; 6]),
    /// `force_release.lua`: lock, holds; channel, message.
    ForceRelease([&'a [u8]; 4]),
}

/// What a twin decided from its reads: these writes (none for a step that only answers) in
/// one `MULTI`/`EXEC`, whose results the reply reads.
type Decision = (Vec<Cmd>, Reply);

/// What one `WATCH` round answered ([`Node::watch_round`]).
pub(super) enum Round {
    /// Nothing was written: a watched key changed between the reads and `EXEC`, or the
    /// connection failed before the round wrote anything. Read again.
    Again,
    /// `EXEC`'s results, and the replicas' shortfall when `WAIT` went after it.
    Done(Vec<Value>, Option<Shortfall>),
}

/// How a twin's `EXEC` results become its script's reply.
enum Reply {
    /// 1 when the first write's integer is 1, else 0 (`DEL`, `PEXPIRE`).
    FirstIsOne,
    /// This value.
    Fixed(Value),
    /// The lock key holds another type, which the script's `GET` fails on (invariant 7).
    WrongType,
}

impl<'a> Twin<'a> {
    /// The lock key: every twin's first.
    fn lock_key(&self) -> &'a [u8] {
        match *self {
            Twin::Extend([lock, ..])
            | Twin::Release([lock, ..])
            | Twin::Abandon([lock, ..])
            | Twin::ForceRelease([lock, ..]) => lock,
        }
    }

    /// The twin of `call`'s step, if it has one and the call's shape fits it.
    pub(super) fn of(call: &'a ScriptCall) -> Option<Self> {
        let keys = call.key_count();
        match call.step() {
            // Two keys: a take-over from a ticket (a third) has no twin.
            Step::Extend if keys == 2 => call.exact_parts().map(Twin::Extend),
            Step::Release if keys == 1 => call.exact_parts().map(Twin::Release),
            Step::Abandon if keys == 2 => call.exact_parts().map(Twin::Abandon),
            Step::ForceRelease if keys == 2 => call.exact_parts().map(Twin::ForceRelease),
            _ => None,
        }
    }

    /// The keys to watch, and the reads to send after `WATCH`, in one round trip. Reads go by
    /// `MGET`, which answers nil for a key of another type where `GET` would fail.
    fn reads(&self) -> (Vec<&'a [u8]>, Vec<Cmd>) {
        match *self {
            Twin::Extend([lock, epoch, ..]) => (vec![lock, epoch], vec![mget(&[lock, epoch])]),
            // `PTTL` tells a free key from one of another type (invariant 7).
            Twin::Release([lock, ..])
            | Twin::Abandon([lock, ..])
            | Twin::ForceRelease([lock, ..]) => {
                (vec![lock], vec![mget(&[lock]), cmd("PTTL", &[lock])])
            }
        }
    }

    /// What the script would do, given what it would read.
    fn decide(&self, reads: &[Value], publish: &'static str) -> Option<Decision> {
        let answer = |v: Value| Some((Vec::new(), Reply::Fixed(v)));
        match *self {
            Twin::Extend([lock, epoch_key, owner, ttl, epoch]) => {
                let [held, newest] = strings::<2>(reads.first()?)?;
                if held.as_deref() != Some(owner) {
                    return answer(Value::Int(0));
                }
                let epoch_n = parse(epoch)?;
                let newest = newest.as_deref().and_then(parse).unwrap_or(0);
                if epoch_n < newest {
                    return answer(Value::Int(2));
                }
                let mut writes = vec![cmd("PEXPIRE", &[lock, ttl])];
                if epoch_n > 0 {
                    writes.push(cmd("SET", &[epoch_key, epoch, b"PX", ttl]));
                }
                Some((writes, Reply::FirstIsOne))
            }
            Twin::Release([lock, owner, channel, message]) => {
                let held = match string_key(reads)? {
                    Ok(held) => held,
                    Err(wrong) => return Some(wrong),
                };
                if held.as_deref() != Some(owner) {
                    return answer(Value::Int(0));
                }
                let mut writes = vec![cmd("DEL", &[lock])];
                if !message.is_empty() {
                    writes.push(cmd(publish, &[channel, message]));
                }
                Some((writes, Reply::FirstIsOne))
            }
            Twin::Abandon([lock, tomb, owner, channel, message, patience]) => {
                let held = match string_key(reads)? {
                    Ok(held) => held,
                    Err(wrong) => return Some(wrong),
                };
                if held.as_deref() != Some(owner) {
                    let writes = vec![cmd("SET", &[tomb, b"1", b"PX", patience])];
                    return Some((writes, Reply::Fixed(Value::Int(0))));
                }
                let mut writes = vec![cmd("DEL", &[lock])];
                if !message.is_empty() {
                    writes.push(cmd(publish, &[channel, message]));
                }
                Some((writes, Reply::Fixed(Value::Int(1))))
            }
            Twin::ForceRelease([lock, holds, channel, message]) => {
                let held = match string_key(reads)? {
                    Ok(held) => held,
                    Err(wrong) => return Some(wrong),
                };
                let Some(owner) = held else {
                    return answer(Value::Nil);
                };
                let writes = vec![
                    cmd("DEL", &[lock, holds]),
                    cmd(publish, &[channel, message]),
                ];
                Some((writes, Reply::Fixed(Value::BulkString(owner))))
            }
        }
    }
}

impl Reply {
    fn read(self, results: &[Value]) -> Option<Value> {
        match self {
            Reply::FirstIsOne => match results.first()? {
                Value::Int(1) => Some(Value::Int(1)),
                Value::Int(_) => Some(Value::Int(0)),
                _ => None,
            },
            Reply::Fixed(value) => Some(value),
            Reply::WrongType => None,
        }
    }
}

/// A twin refused before it wrote anything: any refusal but `WAIT`'s, which comes after
/// `EXEC` (a refused write is queued in `MULTI`, and `EXEC` then runs nothing).
pub(super) fn refused_before_writing(e: &Error) -> bool {
    matches!(e, Error::Permission { command, .. } if command != "wait")
}

pub(super) fn cmd(name: &str, args: &[&[u8]]) -> Cmd {
    let mut cmd = redis::cmd(name);
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

fn mget(keys: &[&[u8]]) -> Cmd {
    cmd("MGET", keys)
}

/// An `MGET` reply of `N` keys: each a string, or `None`.
pub(super) fn strings<const N: usize>(reply: &Value) -> Option<[Option<Vec<u8>>; N]> {
    let Value::Array(items) = reply else {
        return None;
    };
    let items: Vec<Option<Vec<u8>>> = items
        .iter()
        .map(|v| match v {
            Value::BulkString(b) => Some(Some(b.clone())),
            Value::Nil => Some(None),
            _ => None,
        })
        .collect::<Option<_>>()?;
    items.try_into().ok()
}

/// The lock key as `MGET` and `PTTL` read it: its string (or none, when free), or
/// [`Reply::WrongType`] for a key of another type.
fn string_key(reads: &[Value]) -> Option<Result<Option<Vec<u8>>, Decision>> {
    let [seen, Value::Int(pttl)] = reads else {
        return None;
    };
    let [held] = strings::<1>(seen)?;
    Some(match held {
        None if *pttl != -2 => Err((Vec::new(), Reply::WrongType)),
        held => Ok(held),
    })
}

fn parse(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

impl Node {
    /// After a dedicated connection failed: on a lost connection the pool's other idle ones
    /// go too, and behind Sentinel the client asks for the master again (invariant 4).
    pub(super) fn dedicated_failed(
        &self,
        pool: &TxPool,
        at: Option<&(String, u16)>,
        e: &RedisError,
    ) {
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
            pool.clear_idle();
        }
        #[cfg(feature = "sentinel")]
        if let (super::Conn::Sentinel(failover), Some(at)) = (&self.conn, at) {
            failover.saw(at, e);
        }
        #[cfg(not(feature = "sentinel"))]
        let _ = at;
    }

    /// With the pool whose dedicated connections carry the twins' `WATCH` (invariant 4).
    pub(crate) fn with_pool(mut self, pool: Arc<TxPool>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The calls of a batch as their twins: in parts of at most [`PART`] calls, one `WATCH`
    /// transaction each on a dedicated connection of its own, all at once (invariant 8). Too
    /// few replica acknowledgements for any part fails the batch, as one `WAIT` after a
    /// pipeline would; a part whose round trip failed answers its error for each call.
    pub(crate) async fn run_batch_watched(
        &self,
        operation: &'static str,
        calls: &[ScriptCall],
    ) -> Result<Vec<Result<Value>>> {
        let wait = self.wait();
        let wait = wait.as_ref();
        let parts = futures_util::future::join_all(calls.chunks(PART).map(|part| async move {
            match self.watched_steps(part, wait).await {
                Ok((_, Some(short))) => Err(short.error(operation)),
                Ok((replies, None)) => Ok(replies),
                Err(e) => Ok(part.iter().map(|_| Err(e.clone())).collect()),
            }
        }))
        .await;
        let mut out = Vec::with_capacity(calls.len());
        for part in parts {
            out.extend(part?);
        }
        Ok(out)
    }

    /// How a renewal batch of `calls` calls is cut into parts that each answer as soon as
    /// their own round trip does (invariant 8): without scripts, as few as fill the
    /// dedicated connections, none longer than [`PART`]; with scripts, one pipeline.
    pub(crate) fn renewal_parts(&self, calls: usize) -> Vec<Range<usize>> {
        let len = match &self.pool {
            Some(pool) if self.allows.scripts_refused() => {
                calls.div_ceil(pool.size().max(1)).clamp(1, PART)
            }
            _ => calls.max(1),
        };
        (0..calls)
            .step_by(len)
            .map(|start| start..(start + len).min(calls))
            .collect()
    }

    /// The `WATCH` executor: `call` as its twin (invariants 1 and 2), with `WAIT` after it
    /// on the same connection when `wait` is given and it wrote: the script's reply, with the
    /// shortfall. `Ok(None)` when the call has no twin or the node no pool.
    ///
    /// Boxed: the callers' futures stay as large as they are with scripts.
    pub(super) fn run_watched<'a>(
        &'a self,
        call: &'a ScriptCall,
        wait: Option<&'a Wait>,
    ) -> futures_util::future::BoxFuture<'a, Result<Option<Answer>>> {
        Box::pin(async move {
            if self.pool.is_none() || Twin::of(call).is_none() {
                return Ok(None);
            }
            let (mut replies, short) = self.watched_steps(std::slice::from_ref(call), wait).await?;
            match replies.pop() {
                Some(reply) => Ok(Some((reply?, short))),
                None => Err(unexpected(call.operation(), "no reply".into())),
            }
        })
    }

    /// Runs `calls` as their twins in ONE `WATCH` transaction on one dedicated connection
    /// (invariants 1, 2 and 8). Each call answers as its script would, or its own error (no
    /// twin, a key of another type); the outer error is the round trip's.
    async fn watched_steps(
        &self,
        calls: &[ScriptCall],
        wait: Option<&Wait>,
    ) -> Result<(Vec<Result<Value>>, Option<Shortfall>)> {
        let operation = calls.first().map_or("renew", ScriptCall::operation);
        let refused = |what: &str| {
            Error::unsupported(format!(
                "{what} needs Lua scripts, and {}",
                self.allows.why_no_scripts()
            ))
        };
        let Some(pool) = &self.pool else {
            return Err(refused("a lock on a Redis Cluster or Redlock"));
        };
        // The calls without a twin answer so, and take no part in the transaction.
        let mut answers: Vec<Option<Result<Value>>> = Vec::with_capacity(calls.len());
        let mut twins: Vec<(usize, Twin<'_>)> = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            match Twin::of(call) {
                Some(twin) => {
                    twins.push((i, twin));
                    answers.push(None);
                }
                None => answers.push(Some(Err(refused(call.lua.primitive())))),
            }
        }
        let publish = if self.sharded { "SPUBLISH" } else { "PUBLISH" };
        let step = async {
            let mut fresh = false;
            loop {
                if twins.is_empty() {
                    return Ok(None);
                }
                let reads: Vec<_> = twins.iter().map(|(_, twin)| twin.reads()).collect();
                let watched: Vec<&[u8]> = reads
                    .iter()
                    .flat_map(|(keys, _)| keys.iter().copied())
                    .collect();
                let commands = reads
                    .iter()
                    .flat_map(|(_, commands)| commands.iter().cloned());
                // Each twin decides on its own reads; the writes of all go in one EXEC.
                let mut decided = Vec::with_capacity(twins.len());
                let decide = |replies: &[Value]| {
                    let mut read = replies;
                    let mut writes = Vec::new();
                    for ((i, twin), (_, commands)) in twins.iter().zip(&reads) {
                        let (own, rest) = read.split_at(commands.len().min(read.len()));
                        read = rest;
                        match twin.decide(own, publish) {
                            Some((own_writes, reply)) => {
                                decided.push((*i, twin.lock_key(), own_writes.len(), Some(reply)));
                                writes.extend(own_writes);
                            }
                            None => decided.push((*i, twin.lock_key(), 0, None)),
                        }
                    }
                    Ok(writes)
                };
                let round = self
                    .watch_round(
                        pool, operation, &mut fresh, &watched, commands, decide, wait,
                    )
                    .await?;
                let Round::Done(results, short) = round else {
                    continue;
                };
                let mut results = results.as_slice();
                for (i, key, count, reply) in decided {
                    let (own, rest) = results.split_at(count.min(results.len()));
                    results = rest;
                    answers[i] = Some(match reply {
                        Some(Reply::WrongType) => Err(Error::WrongType {
                            key: String::from_utf8_lossy(key).into_owned(),
                            operation,
                        }),
                        Some(reply) => reply
                            .read(own)
                            .ok_or_else(|| unexpected(operation, format!("{own:?}"))),
                        None => Err(unexpected(
                            operation,
                            "reads a twin cannot decide on".into(),
                        )),
                    });
                }
                return Ok(short);
            }
        };
        let short = self.within_timeout(pool, operation, step).await?;
        let replies = answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(unexpected(operation, "no reply".into()))))
            .collect();
        Ok((replies, short))
    }

    /// One `WATCH` round on a dedicated connection of `pool` (invariants 2 and 4): `WATCH`
    /// `keys` and send `reads` in one round trip, then the writes `decide` makes of their
    /// replies in one `MULTI`/`EXEC`, with `WAIT` after it when `wait` is given and anything
    /// was written. `fresh`: a connection that failed before the round wrote anything (an
    /// idle one the server closed, say, after a restart) is replaced once, by a fresh one.
    /// The twins' steps and the grant's mint (`grant.rs`) both run in such rounds.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn watch_round(
        &self,
        pool: &Arc<TxPool>,
        operation: &'static str,
        fresh: &mut bool,
        keys: &[&[u8]],
        reads: impl IntoIterator<Item = Cmd>,
        decide: impl FnOnce(&[Value]) -> Result<Vec<Cmd>>,
        wait: Option<&Wait>,
    ) -> Result<Round> {
        let mut pooled = pool.checkout(*fresh, None).await.inspect_err(|e| {
            if e.is_transient() {
                pool.clear_idle();
            }
        })?;
        let at = pooled.at().cloned();
        let failed = |e: RedisError| {
            self.dedicated_failed(pool, at.as_ref(), &e);
            Error::from_redis(operation, self.timeout, e)
        };
        let mut conn = pooled.conn();
        let mut pipe = redis::pipe();
        pipe.add_command(cmd("WATCH", keys)).ignore();
        for read in reads {
            pipe.add_command(read);
        }
        pooled.dirty();
        let replies: Vec<Value> = match pipe.query_async(&mut conn).await {
            Ok(replies) => replies,
            Err(e) if !*fresh && (e.is_io_error() || e.is_connection_dropped()) => {
                self.dedicated_failed(pool, at.as_ref(), &e);
                *fresh = true;
                return Ok(Round::Again);
            }
            Err(e) => return Err(failed(e)),
        };
        let writes = decide(&replies)?;
        #[cfg(test)]
        interlope(keys);
        // Only writes wait for replicas; an answer's empty EXEC vouches for its reads.
        let wait = wait.filter(|_| !writes.is_empty());
        let mut pipe = redis::pipe();
        pipe.cmd("MULTI").ignore();
        for write in writes {
            pipe.add_command(write).ignore();
        }
        pipe.cmd("EXEC");
        if let Some(wait) = wait {
            pipe.add_command(wait.cmd.clone());
        }
        let mut replies: Vec<Value> = pipe.query_async(&mut conn).await.map_err(failed)?;
        pooled.cleaned();
        let short = Wait::read_if(wait, || replies.pop().map(Ok), self.timeout)?;
        match replies.pop() {
            // A watched key changed since it was read: nothing was written.
            Some(Value::Nil) => {
                tokio::task::yield_now().await;
                Ok(Round::Again)
            }
            Some(Value::Array(results)) => Ok(Round::Done(results, short)),
            other => Err(unexpected(operation, format!("{other:?}"))),
        }
    }

    /// `step` (rounds on `pool`'s connections) bounded by the call's timeout. The
    /// connection's own timeout is the same, so this fires first: the idle connections, made
    /// at the same time, may be as stuck, and go.
    pub(super) async fn within_timeout<T>(
        &self,
        pool: &TxPool,
        operation: &'static str,
        step: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.timeout, step).await {
            Ok(answer) => answer,
            Err(_) => {
                pool.clear_idle();
                Err(Error::Timeout {
                    operation,
                    after: self.timeout,
                })
            }
        }
    }
}

/// A test's write between a round's reads and its `EXEC`, as another client's would come:
/// the round's first watched key, and the write, run (blocking) before each `EXEC` of a round
/// watching that key.
#[cfg(test)]
pub(super) type Interloper = (Vec<u8>, Box<dyn FnMut() + Send>);

/// The interloper of a test, if any (each test that sets one watches keys of its own).
#[cfg(test)]
pub(super) static INTERLOPER: std::sync::Mutex<Option<Interloper>> = std::sync::Mutex::new(None);

#[cfg(test)]
fn interlope(keys: &[&[u8]]) {
    if let Ok(mut interloper) = INTERLOPER.lock()
        && let Some((key, write)) = interloper.as_mut()
        && keys.first() == Some(&key.as_slice())
    {
        write();
    }
}
