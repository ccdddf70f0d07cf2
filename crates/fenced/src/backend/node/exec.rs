//! The node's one executor loop: every step of every primitive runs through [`Node::step`],
//! whichever way it goes.
//!
//! Invariants:
//! 1. One loop. A step ([`Step`]) runs one of up to four ways ([`Executor`]): a native
//!    command, the grant's transaction, its script, a `WATCH` transaction. The loop tries
//!    them in one order, reading the node's record of what its server allows (`allows.rs`),
//!    and every way answers what the script answers (`scripts/mod.rs` invariant 3,
//!    `grant.rs` invariant 4, `watched.rs` invariant 1), so the caller cannot tell them apart.
//! 2. A way answers, or cannot run the step here (`None`: the step has no such way, or the
//!    server lacks its command, which is learned), or fails. The loop moves on only after a
//!    `None` or a refusal that ran nothing: a script refused (`NOPERM`, an unknown command)
//!    is learned and the step runs its other way at once; that way refused too (a user who
//!    may run neither) allows scripts again, and the answer is the script's refusal, which
//!    names what to grant. Any other failure is the step's answer: it may have run.
//! 3. Redirects, `NOSCRIPT` and `WAIT` are handled once: every send goes through
//!    `Node::resending` (a cluster's redirect sends again), a script's reload is in
//!    [`Node::run_script`] (a batch's, which reloads every script of the batch, in
//!    `batch.rs`), and `WAIT`'s reply is read by [`Wait::read`].
//! 4. [`Node::run_as`] runs one way and nothing else, so that the differential tests hold
//!    each way to the script's answers from the same state.

use redis::{FromRedisValue, RedisError, Value};

use super::wait::{Answer, Wait};
use super::watched::{Twin, refused_before_writing};
use super::{Node, is_noscript, lacks_command, not_run};
use crate::error::{Error, Result};
use crate::kind::unexpected;
use crate::scripts::{ScriptCall, Step};

/// A way to run a step (invariant 1), in the order the loop tries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Executor {
    /// A server command that does what the script does (`scripts::Native`).
    Native,
    /// The plain lock's grant as one `MULTI`/`EXEC` (`grant.rs`).
    Transaction,
    /// The step's script, by `EVALSHA`.
    Script,
    /// The step as a `WATCH` transaction on a dedicated connection (`watched.rs`).
    Watched,
}

/// What a refused script means for its call.
pub(super) enum Refusal {
    /// Not a refusal of scripts: the error stands.
    NotOne,
    /// Remembered; the call goes again its other way.
    Learned,
    /// The call has no other way: this error ([`Error::Unsupported`]) is its answer.
    NoOtherWay(Error),
}

impl Node {
    /// Runs one call, for reads and for writes whose loss in a failover is harmless
    /// (`node.rs`, invariant 5): no `WAIT`.
    pub(crate) async fn run<T: FromRedisValue>(&self, call: &ScriptCall) -> Result<T> {
        let (value, _) = self.step(call, false).await?;
        redis::from_redis_value(value).map_err(|e| unexpected(call.operation(), e.to_string()))
    }

    /// Runs one call, then `WAIT`s on the same connection when the client asks for replica
    /// acknowledgements (`node.rs`, invariant 5). The reply comes with the shortfall, if too
    /// few replicas acknowledged in time; the caller decides whether its write needed them.
    pub(crate) async fn run_acked(&self, call: &ScriptCall) -> Result<Answer> {
        self.step(call, true).await
    }

    /// [`run_acked`](Self::run_acked) for a write that must survive a failover: too few
    /// acknowledgements is [`Error::NotReplicated`] (the master has the write; a failover
    /// could lose it).
    pub(crate) async fn run_replicated<T: FromRedisValue>(&self, call: &ScriptCall) -> Result<T> {
        let (value, short) = self.run_acked(call).await?;
        if let Some(short) = short {
            return Err(short.error(call.operation()));
        }
        redis::from_redis_value(value).map_err(|e| unexpected(call.operation(), e.to_string()))
    }

    /// The loop (invariants 1 and 2): the first way that answers. `acked`: `WAIT` after it.
    pub(crate) async fn step(&self, call: &ScriptCall, acked: bool) -> Result<Answer> {
        for way in [Executor::Native, Executor::Transaction] {
            if self.may_try(way, call)
                && let Some(answer) = self.run_as(way, call, acked).await?
            {
                return Ok(answer);
            }
        }
        if self.allows.scripts_refused() {
            match self.run_as(Executor::Watched, call, acked).await {
                Ok(Some(answer)) => return Ok(answer),
                Ok(None) => return Err(self.needs_scripts(call)),
                // Refused before it wrote, where scripts were learned refused (not chosen):
                // scripts again. An ACL may allow them by now; refused, the script's refusal
                // names what to grant.
                Err(e) if refused_before_writing(&e) && self.allows.scripts_again() => {
                    tracing::debug!(error = %e, "fenced: a step without scripts was refused; trying scripts again");
                }
                Err(e) => return Err(e),
            }
        }
        match self.run_as(Executor::Script, call, acked).await {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(self.needs_scripts(call)),
            Err(e) => self.after_script_error(call, e, acked).await,
        }
    }

    /// Runs `call` exactly one way (invariant 4): `Ok(None)` when that way cannot run it
    /// here.
    pub(crate) async fn run_as(
        &self,
        way: Executor,
        call: &ScriptCall,
        acked: bool,
    ) -> Result<Option<Answer>> {
        let wait = if acked { self.wait() } else { None };
        let wait = wait.as_ref();
        match way {
            Executor::Native => self.run_native(call, wait).await,
            Executor::Transaction => self.grant(call, wait).await,
            Executor::Script => self.run_script(call, wait).await.map(Some),
            Executor::Watched => self.run_watched(call, wait).await,
        }
    }

    /// Whether the loop tries `way` for `call` before its script (invariant 1).
    fn may_try(&self, way: Executor, call: &ScriptCall) -> bool {
        match way {
            Executor::Native => call
                .lua
                .native
                .is_some_and(|n| n.everywhere() || self.allows.native.worth_trying()),
            // By transaction where the client counts grants so, or where scripts are refused;
            // never on a cluster (its connection does not route a transaction).
            Executor::Transaction => {
                call.step() == Step::Grant
                    && !self.is_cluster()
                    && self.allows.transactions.worth_trying()
                    && ((self.counted && !call.prefers_script()) || self.allows.scripts_refused())
            }
            Executor::Script | Executor::Watched => true,
        }
    }

    /// Whether `call` has a way that needs no script on this node.
    fn has_other_way(&self, call: &ScriptCall) -> bool {
        self.pool.is_some()
            && (Twin::of(call).is_some() || (call.step() == Step::Grant && !self.is_cluster()))
    }

    /// The error of a step that needs a script on a node that sends none.
    fn needs_scripts(&self, call: &ScriptCall) -> Error {
        let what = if self.pool.is_none() {
            "a lock on a Redis Cluster or Redlock"
        } else {
            call.lua.primitive()
        };
        Error::unsupported(format!(
            "{what} needs Lua scripts, and {}",
            self.allows.why_no_scripts()
        ))
    }

    /// After `e`, an error of `call`'s script: whether it was the server refusing scripts.
    /// A refusal ran nothing. For a call with another way it is remembered (invariant 2); for
    /// one without, the answer is [`Error::Unsupported`] quoting it, and nothing is
    /// remembered: the next call tries its script again.
    pub(super) fn after_refusal(&self, e: &Error, call: &ScriptCall) -> Refusal {
        // Without a pool (a cluster's or Redlock's node) no call has another way.
        if self.pool.is_none() || !e.refuses_scripts() {
            return Refusal::NotOne;
        }
        if !self.has_other_way(call) {
            return Refusal::NoOtherWay(Error::unsupported(format!(
                "{} needs Lua scripts, and {}",
                call.lua.primitive(),
                e.script_refusal()
            )));
        }
        tracing::debug!(error = %e, "fenced: the server refuses scripts; the lock goes on without them");
        self.allows.refuse_scripts(e.script_refusal());
        Refusal::Learned
    }

    /// After `e`, an error of `call`'s script: its other way's answer if the server refuses
    /// scripts, [`Error::Unsupported`] for a call without one, else the error as it is
    /// (invariant 2).
    async fn after_script_error(&self, call: &ScriptCall, e: Error, acked: bool) -> Result<Answer> {
        match self.after_refusal(&e, call) {
            Refusal::Learned => {
                let other = match call.step() {
                    Step::Grant => Executor::Transaction,
                    _ => Executor::Watched,
                };
                match self.run_as(other, call, acked).await {
                    Ok(Some(answer)) => Ok(answer),
                    Err(again) if !refused_before_writing(&again) => Err(again),
                    // Refused too: scripts again, and the script's refusal names what to grant.
                    _ => {
                        self.allows.scripts_again();
                        Err(e)
                    }
                }
            }
            Refusal::NoOtherWay(unsupported) => Err(unsupported),
            Refusal::NotOne => Err(e),
        }
    }

    /// The script executor: `EVALSHA` (with `WAIT` after it in the same pipeline when `wait`
    /// is given), loading the script first where this node has no hash for it, and once more
    /// on `NOSCRIPT` (invariant 3). A lone call goes out as one command, not a pipeline: it
    /// is a lock cycle's hot path.
    pub(super) async fn run_script(
        &self,
        call: &ScriptCall,
        wait: Option<&Wait>,
    ) -> Result<Answer> {
        let operation = call.operation();
        let body = call.lua.body(self.sharded);
        let key = call.first_key();
        let cluster = self.is_cluster();
        let sent = self
            .bounded(
                operation,
                self.resending(|mut conn| async move {
                    let hash = self.hash_of(conn.clone(), body, key).await?;
                    let (mut reply, mut acked) = evalsha(&mut conn, call, &hash, wait).await?;
                    if matches!(&reply, Err(e) if is_noscript(e)) {
                        // The script cache was emptied (a restart, a failover, `SCRIPT FLUSH`).
                        let hash = self.load(conn.clone(), body, key).await?;
                        (reply, acked) = evalsha(&mut conn, call, &hash, wait).await?;
                    }
                    // A redirect, or a `NOSCRIPT` that outlived the reload: sent again where
                    // the slot is now (`node.rs`, invariant 4).
                    if let Err(e) = &reply
                        && cluster
                        && not_run(e)
                    {
                        return Err(e.clone());
                    }
                    Ok((reply?, acked))
                }),
            )
            .await;
        // An error inside the script named as the script's own: the command its line calls,
        // the key of another type (a refusal of scripts stays as it is).
        let (value, acked) = match sent {
            Ok(sent) => sent,
            Err(e) => {
                let source = body.source();
                return Err(self.named(e.in_script(operation, source), call).await);
            }
        };
        let short = Wait::read_if(wait, || acked, self.timeout)?;
        Ok((value, short))
    }

    /// The native executor: the call's native twin (its command, and its announcement after
    /// it), with `WAIT` after them when `wait` is given. `Ok(None)` when the call has no twin
    /// or the server does not run it: that is remembered (`allows.rs`).
    async fn run_native(&self, call: &ScriptCall, wait: Option<&Wait>) -> Result<Option<Answer>> {
        let operation = call.operation();
        let (Some(native), Some((cmd, announce))) = (call.lua.native, call.native(self.sharded))
        else {
            return Ok(None);
        };
        let everywhere = native.everywhere();
        if everywhere && announce.is_none() && wait.is_none() {
            // Only twins every server runs go alone (a probed one may be unknown to the
            // server, which the pipeline below tells apart), so an error here is the
            // command's own: mapped as any other. The hot path of an unfenced acquire.
            let cmd = &cmd;
            let reply = self
                .bounded(
                    operation,
                    self.resending(
                        |mut conn| async move { cmd.query_async::<Value>(&mut conn).await },
                    ),
                )
                .await?;
            return Ok(Some((reply, None)));
        }
        // While the server's support is unknown, the command goes without its announcement:
        // a server without the command would still publish it, and wake the waiters before
        // the script that stands in for it has released anything.
        let probing = !everywhere && self.allows.native.unknown();
        let (announce, later) = if probing {
            (None, announce)
        } else {
            (announce, None)
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors().add_command(cmd);
        let announces = announce.is_some();
        if let Some(announce) = announce {
            pipe.add_command(announce);
        }
        if let Some(wait) = wait {
            pipe.add_command(wait.cmd.clone());
        }
        let mut replies = self.send(operation, &pipe).await?.into_iter();
        let Some(first) = replies.next() else {
            return Err(unexpected(
                operation,
                "a native command had no reply".into(),
            ));
        };
        let value = match first {
            Ok(value) => value,
            Err(e) if !everywhere && lacks_command(&e) => {
                tracing::debug!(error = %e, "fenced: no native twin on this server; using its script");
                self.allows.native.learned(false);
                return Ok(None);
            }
            Err(e) => {
                let e = Error::from_redis(operation, self.timeout, e);
                // A key of another type, named as the script names it: the twin's one key.
                return Err(match call.key_at(1) {
                    Some(key) if e.is_raw_wrong_type() => Error::WrongType { key, operation },
                    _ => e,
                });
            }
        };
        if probing {
            self.allows.native.learned(true);
        }
        if let Some(later) = later {
            let mut pipe = redis::pipe();
            pipe.ignore_errors().add_command(later);
            if let Some(Err(e)) = self.send(operation, &pipe).await?.into_iter().next() {
                return Err(Error::from_redis(operation, self.timeout, e));
            }
        }
        // The announcement's reply: a subscriber count, or the refusal a script would have
        // raised (a channel outside the user's ACL patterns), once the command itself ran.
        if announces && let Some(Err(e)) = replies.next() {
            return Err(Error::from_redis(operation, self.timeout, e));
        }
        let short = Wait::read_if(wait, || replies.next(), self.timeout)?;
        Ok(Some((value, short)))
    }

    /// Sends a pipeline whose replies are read one by one (`ignore_errors`), bounded by the
    /// timeout; on a cluster, sent again while a reply says it did not run (`node.rs`,
    /// invariant 4).
    pub(super) async fn send(
        &self,
        operation: &'static str,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<Result<Value, RedisError>>> {
        let cluster = self.is_cluster();
        self.bounded(
            operation,
            self.resending(|mut conn| async move {
                let replies: Vec<Result<Value, RedisError>> = pipe.query_async(&mut conn).await?;
                super::raise_not_run(cluster, &replies)?;
                Ok(replies)
            }),
        )
        .await
    }
}

/// One command's reply in a pipeline: its value, or its own error.
type Reply = Result<Value, RedisError>;

/// `EVALSHA` of `call` under `hash`, alone or with `WAIT` after it: the call's reply, and
/// `WAIT`'s. The outer error is the round trip's (a lone command's error is its reply).
async fn evalsha(
    conn: &mut super::Conn,
    call: &ScriptCall,
    hash: &str,
    wait: Option<&Wait>,
) -> Result<(Reply, Option<Reply>), RedisError> {
    let Some(wait) = wait else {
        return Ok((call.evalsha(hash).query_async(conn).await, None));
    };
    let mut pipe = redis::pipe();
    pipe.ignore_errors()
        .add_command(call.evalsha(hash))
        .add_command(wait.cmd.clone());
    let replies: Vec<Reply> = pipe.query_async(conn).await?;
    let mut replies = replies.into_iter();
    match (replies.next(), replies.next()) {
        (Some(reply), Some(acked)) => Ok((reply, Some(acked))),
        _ => Err(RedisError::from((
            redis::ErrorKind::Client,
            "a reply of the script and WAIT pipeline is missing",
        ))),
    }
}
