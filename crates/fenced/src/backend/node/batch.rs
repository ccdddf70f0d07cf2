//! Renewal batches: idempotent calls in one round trip per node (`node.rs`, invariants 2 and
//! 3), by script; or, where the node sends no scripts, as `WATCH` transactions in parts
//! (`watched.rs`, invariant 8).

use std::sync::Arc;

#[cfg(feature = "cluster")]
use redis::cluster_routing::Slot;
use redis::{Cmd, Pipeline, RedisError, Value};

use super::exec::Refusal;
use super::watched::{Twin, refused_before_writing};
use super::{Conn, Node, is_noscript, raise_not_run};
use crate::error::{Error, Result};
use crate::scripts::ScriptCall;

impl Node {
    /// Runs idempotent script calls in one round trip per node (invariant 3): on a cluster,
    /// one pipeline per hash slot, all sent at once.
    pub(crate) async fn run_batch_routed(
        &self,
        operation: &'static str,
        calls: &[ScriptCall],
    ) -> Result<Vec<Result<Value>>> {
        #[cfg(feature = "cluster")]
        if self.is_cluster() && calls.len() >= 2 {
            return self.run_batch_by_slot(operation, calls).await;
        }
        self.run_batch(operation, calls).await
    }

    /// [`run_batch_routed`](Self::run_batch_routed) on a cluster.
    #[cfg(feature = "cluster")]
    async fn run_batch_by_slot(
        &self,
        operation: &'static str,
        calls: &[ScriptCall],
    ) -> Result<Vec<Result<Value>>> {
        let mut groups: Vec<(Option<Slot>, Vec<usize>)> = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let route = call.first_key().map(Slot::for_key);
            match groups.iter_mut().find(|(r, _)| *r == route) {
                Some((_, members)) => members.push(i),
                None => groups.push((route, vec![i])),
            }
        }
        let parts = groups.iter().map(|(_, members)| {
            let part: Vec<ScriptCall> = members.iter().map(|&i| calls[i].clone()).collect();
            async move { self.run_batch(operation, &part).await }
        });
        let answers = futures_util::future::join_all(parts).await;
        let mut out: Vec<Option<Result<Value>>> = (0..calls.len()).map(|_| None).collect();
        for ((_, members), answer) in groups.iter().zip(answers) {
            match answer {
                Ok(replies) => {
                    for (&i, reply) in members.iter().zip(replies) {
                        out[i] = Some(reply);
                    }
                }
                // One node's round trip failed: its calls' outcomes are unknown, the others'
                // stand.
                Err(e) => {
                    for &i in members {
                        out[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(crate::kind::unexpected(
                        "renew",
                        "a call had no reply".into(),
                    ))
                })
            })
            .collect())
    }

    /// The pipeline of a batch: every call by `EVALSHA`, then `wait`. Each script is loaded
    /// first where this node has no hash for it yet, or with `reload`, every script of the
    /// batch once (invariants 2 and 7).
    async fn batch_pipe(
        &self,
        conn: &Conn,
        calls: &[ScriptCall],
        wait: Option<&Cmd>,
        key: Option<&[u8]>,
        reload: bool,
    ) -> Result<Pipeline, RedisError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut loaded: Vec<(&str, Arc<str>)> = Vec::new();
        for call in calls {
            let body = call.lua.body(self.sharded);
            let hash = match loaded.iter().find(|(s, _)| std::ptr::eq(*s, body.source())) {
                Some((_, hash)) => Arc::clone(hash),
                None if reload => {
                    let hash = self.load(conn.clone(), body, key).await?;
                    loaded.push((body.source(), Arc::clone(&hash)));
                    hash
                }
                None => self.hash_of(conn.clone(), body, key).await?,
            };
            pipe.add_command(call.evalsha(&hash));
        }
        if let Some(wait) = wait {
            pipe.add_command(wait.clone());
        }
        Ok(pipe)
    }

    /// Runs idempotent calls (renewals) as one batch (on a cluster, all in one slot): the
    /// executor loop for many calls (`exec.rs`, invariants 1 and 2). Where scripts are
    /// refused, the calls' `WATCH` transactions in parts (`watched.rs`, invariant 8); else one
    /// pipeline of scripts, whose refusal is learned and the batch runs its other way; that
    /// refused too, scripts again, and the script's refusal answers. The outer error means
    /// the round trip failed as a whole (nothing is known); the inner results are per call.
    pub(crate) async fn run_batch(
        &self,
        operation: &'static str,
        calls: &[ScriptCall],
    ) -> Result<Vec<Result<Value>>> {
        if self.allows.scripts_refused() {
            let results = self.run_batch_watched(operation, calls).await?;
            // Refused before writing, where scripts were learned refused (not chosen):
            // scripts again (renewals are idempotent: a twin that applied may apply again).
            if !(refused_any(&results) && self.allows.scripts_again()) {
                return Ok(results);
            }
        }
        let (refusal, answer) = match self.batch_by_script(operation, calls).await {
            // Every call refused as a script (`EVALSHA` outside the ACL, `SCRIPT LOAD`
            // allowed): none ran.
            Ok(results) => match uniform_refusal(&results) {
                Some(e) => (e, Ok(results)),
                None => return Ok(results),
            },
            // Refused before anything ran, or a round trip that failed.
            Err(e) => (e.clone(), Err(e)),
        };
        // A renewal batch mixes the kinds of every lease on the node: learned when any call
        // has another way; the calls without one then answer `Unsupported`, each.
        let probe = calls
            .iter()
            .find(|call| Twin::of(call).is_some())
            .or(calls.first());
        match probe.map(|call| self.after_refusal(&refusal, call)) {
            None | Some(Refusal::NotOne) => answer,
            Some(Refusal::NoOtherWay(unsupported)) => {
                Ok(calls.iter().map(|_| Err(unsupported.clone())).collect())
            }
            Some(Refusal::Learned) => {
                let results = self.run_batch_watched(operation, calls).await?;
                if !refused_any(&results) {
                    return Ok(results);
                }
                // Refused too: scripts again; each call refused before writing answers the
                // script's refusal, which names what to grant, the others what they did.
                self.allows.scripts_again();
                Ok(results
                    .into_iter()
                    .map(|r| match r {
                        Err(e) if refused_before_writing(&e) => Err(refusal.clone()),
                        other => other,
                    })
                    .collect())
            }
        }
    }

    /// The script way of a batch: every call by `EVALSHA` in ONE pipelined round trip, with
    /// one `WAIT` after them (`node.rs`, invariant 5: renewals count only once replicated),
    /// the scripts reloaded once on `NOSCRIPT` (invariant 2).
    async fn batch_by_script(
        &self,
        operation: &'static str,
        calls: &[ScriptCall],
    ) -> Result<Vec<Result<Value>>> {
        let wait = self.wait();
        let wait_cmd = wait.as_ref().map(|wait| &wait.cmd);
        let key = calls.first().and_then(ScriptCall::first_key);
        let cluster = self.is_cluster();
        let mut replies: Vec<Result<Value, RedisError>> = self
            .bounded(
                operation,
                self.resending(|mut conn| async move {
                    let pipe = self.batch_pipe(&conn, calls, wait_cmd, key, false).await?;
                    let mut replies: Vec<Result<Value, RedisError>> =
                        pipe.query_async(&mut conn).await?;
                    if replies
                        .iter()
                        .any(|r| matches!(r, Err(e) if is_noscript(e)))
                    {
                        // The script cache was emptied (restart, failover, SCRIPT FLUSH): a
                        // pipeline cannot fall back by itself, so load its scripts and resend.
                        let pipe = self.batch_pipe(&conn, calls, wait_cmd, key, true).await?;
                        replies = pipe.query_async(&mut conn).await?;
                    }
                    // A slot that moved answers every call with a redirect: the calls did not
                    // run, and renewals may be sent again (invariant 4).
                    raise_not_run(cluster, &replies)?;
                    Ok(replies)
                }),
            )
            .await?;
        if let Some(wait) = &wait
            && let Some(short) = wait.read(replies.pop(), self.timeout)?
        {
            return Err(short.error(operation));
        }
        let timeout = self.timeout;
        Ok(replies
            .into_iter()
            .zip(calls)
            .map(|(r, call)| {
                r.map_err(|e| {
                    let source = call.lua.body(self.sharded).source();
                    let e = Error::from_redis(operation, timeout, e).in_script(operation, source);
                    match e.wrong_type_in_script(source, |i| call.key_at(i)) {
                        Some(key) => Error::WrongType { key, operation },
                        None => e,
                    }
                })
            })
            .collect())
    }
}

/// Whether any call of a batch was refused before it wrote (`watched.rs`).
fn refused_any(results: &[Result<Value>]) -> bool {
    results
        .iter()
        .any(|r| matches!(r, Err(e) if refused_before_writing(e)))
}

/// The refusal of scripts that every call of a batch answered, if they all did.
fn uniform_refusal(results: &[Result<Value>]) -> Option<Error> {
    let Some(Err(first)) = results.first() else {
        return None;
    };
    results
        .iter()
        .all(|r| matches!(r, Err(e) if e.refuses_scripts()))
        .then(|| first.clone())
}
