//! Redlock over N independent masters, with quorum fencing tokens: the lease steps (acquire,
//! extend, release, abandon, renewal batches) fanned out to every node and decided by a strict
//! majority.
//!
//! Invariants:
//! 1. A call goes to every node at once, each bounded by the node timeout, and is decided as
//!    soon as its outcome is known (a majority reached, or out of reach), without waiting for
//!    slow nodes. Calls already sent are never cancelled: they finish in the background, so a
//!    release or an abandon still reaches every node that answers.
//! 2. A grant needs a strict majority within the validity: the quorum, and the write-back of
//!    invariant 3, must complete before `ttl − drift` has passed since the request was sent
//!    (the core's validity deadline starts at the same instant). Otherwise it is no grant.
//! 3. The fencing token handed out is the largest of the granting nodes' tokens, and it is
//!    written back to a majority (`fence = max(fence, token)`) before it is handed out. Any
//!    later grant's majority shares a node with that majority, and that node's next token is
//!    larger, so the tokens of successive holders strictly increase even when Redlock's timing
//!    assumptions fail (a paused holder, a slow network). Limit: a majority of nodes losing
//!    their data (restarted without persistence, before the fence retention) while their
//!    clocks step back below the last token.
//! 4. An attempt that ends without a grant is reported "unclean" unless every node answered
//!    and none granted; the core then abandons it on every node (release where it took the
//!    lease, a tombstone where its request may still arrive).
//! 5. A renewal short of a majority never deletes anything: it fails as `NoQuorum`, the
//!    renewal loop retries, and when the validity runs out the lost signal fires.
//! 6. Delayed restart: a node whose `run_id` changed (it restarted, and without persistence
//!    forgot its locks) does not vote for the restart grace after the change is seen. Each
//!    acquire asks every node for its `run_id` alongside the attempt (no extra round trip),
//!    so a restart is seen by the first attempt after it. A node first met after its restart
//!    cannot be told apart: give it the grace by delaying its restart (the Redlock rule).

use std::sync::Mutex;
use std::time::Duration;

use redis::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backend::Node;
use crate::core::lease::ExpiryReply;
use crate::error::{Error, Result};
use crate::kind::{
    AcquireReply, LeaseKind, ReleaseReply, abandon_reply, acquire_reply, expiry_reply,
    release_reply,
};
use crate::options::drift_allowance;
use crate::scripts::ScriptCall;

/// N independent masters.
pub(crate) struct Redlock {
    nodes: Vec<Node>,
    clients: Vec<redis::Client>,
    /// Per node: its `run_id` as last seen, and when a change of it was seen (invariant 6).
    lives: Mutex<Vec<Life>>,
    restart_grace: Duration,
}

#[derive(Clone, Default)]
struct Life {
    run_id: Option<String>,
    restarted_at: Option<Instant>,
}

/// Tallies of one fanned-out call.
#[derive(Default)]
struct Tally {
    answered: usize,
    failed: usize,
    /// The first permanent error (`NOPERM`, `WRONGTYPE`, ...), which ends the wait at once
    /// in the core rather than being retried as a missing quorum.
    permanent: Option<Error>,
}

impl Tally {
    fn fail(&mut self, e: Error) {
        self.failed += 1;
        if !e.is_transient() && self.permanent.is_none() {
            self.permanent = Some(e);
        }
    }
}

impl Redlock {
    pub(crate) fn new(
        nodes: Vec<Node>,
        clients: Vec<redis::Client>,
        restart_grace: Duration,
    ) -> Self {
        let lives = Mutex::new(vec![Life::default(); nodes.len()]);
        Redlock {
            nodes,
            clients,
            lives,
            restart_grace,
        }
    }

    /// Asks every node whether it answers, and learns its `run_id`; how many answered.
    pub(crate) async fn ping(&self) -> usize {
        let asks = self.nodes.iter().map(|node| async move {
            node.query::<String>("ping", redis::cmd("INFO").arg("server"))
                .await
                .ok()
        });
        let infos = futures_util::future::join_all(asks).await;
        let answered = infos.iter().filter(|i| i.is_some()).count();
        for (i, info) in infos.into_iter().enumerate() {
            self.may_vote(i, info.as_deref());
        }
        answered
    }

    /// Records node `i`'s `run_id` from its `INFO server` text, and says whether its vote
    /// counts now (invariant 6).
    fn may_vote(&self, i: usize, info: Option<&str>) -> bool {
        let run_id = info.and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("run_id:"))
                .map(|id| id.trim().to_owned())
        });
        let mut lives = crate::util::lock_unpoisoned(&self.lives);
        let Some(life) = lives.get_mut(i) else {
            return false;
        };
        if let Some(id) = run_id {
            if life.run_id.as_ref().is_some_and(|known| *known != id) {
                tracing::warn!(
                    node = i,
                    "fenced: a Redlock master restarted; its votes wait out the restart grace"
                );
                life.restarted_at = Some(Instant::now());
            }
            life.run_id = Some(id);
        }
        life.restarted_at
            .is_none_or(|at| at.elapsed() >= self.restart_grace)
    }

    /// The client of the first node: pub/sub goes there (releases publish on every node).
    pub(crate) fn first_client(&self) -> &redis::Client {
        &self.clients[0]
    }

    fn n(&self) -> usize {
        self.nodes.len()
    }

    /// A strict majority.
    fn needed(&self) -> usize {
        self.n() / 2 + 1
    }

    fn no_quorum(&self, granted: usize) -> Error {
        Error::NoQuorum {
            granted,
            needed: self.needed(),
            nodes: self.n(),
        }
    }

    /// Sends `call` to every node at once; replies arrive in the order they come
    /// (invariant 1: the calls run to their end even if nobody reads their replies).
    fn fan_out(&self, call: &ScriptCall) -> mpsc::UnboundedReceiver<Result<Value>> {
        let (tx, rx) = mpsc::unbounded_channel();
        for node in &self.nodes {
            let (node, call, tx) = (node.clone(), call.clone(), tx.clone());
            tokio::spawn(async move {
                let _ = tx.send(node.run::<Value>(&call).await);
            });
        }
        rx
    }

    /// One acquire attempt on every node. `Ok((reply, clean))`: `clean` is false when some
    /// node may hold the lease for this owner without a grant (invariant 4). An error leaves
    /// the attempt unclean too.
    pub(crate) async fn acquire(
        &self,
        kind: &dyn LeaseKind,
        call: &ScriptCall,
        ttl: Duration,
        sent_at: Instant,
    ) -> Result<(AcquireReply, bool)> {
        let probe = kind.raise_fence(crate::token::FencingToken::new(1));
        if probe.is_none() {
            return Err(Error::invalid(format!(
                "a {} does not run on several independent masters (Redlock) yet; locks do",
                kind.primitive()
            )));
        }
        let (n, needed) = (self.n(), self.needed());
        // Each node's attempt goes with an `INFO server` on the same connection: one round
        // trip, and its run_id (invariant 6).
        let (tx, mut replies) = mpsc::unbounded_channel();
        for (i, node) in self.nodes.iter().enumerate() {
            let (node, call, tx) = (node.clone(), call.clone(), tx.clone());
            tokio::spawn(async move {
                let info = redis::cmd("INFO").arg("server").to_owned();
                let (reply, info) = tokio::join!(
                    node.run::<Value>(&call),
                    node.query::<String>("acquire", &info)
                );
                let _ = tx.send((i, reply, info.ok()));
            });
        }
        drop(tx);
        let mut tally = Tally::default();
        let mut tokens = Vec::with_capacity(n);
        let mut busy_left: Option<Duration> = None;
        let mut excluded = 0;
        while tally.answered < n {
            let Some((i, reply, info)) = replies.recv().await else {
                break;
            };
            tally.answered += 1;
            let votes = self.may_vote(i, info.as_deref());
            match reply.and_then(acquire_reply) {
                Ok(AcquireReply::Acquired(_)) if !votes => excluded += 1,
                Ok(AcquireReply::Acquired(token)) => tokens.push(token),
                Ok(AcquireReply::Busy { remaining }) => {
                    busy_left = match (busy_left, remaining) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                Ok(AcquireReply::Abandoned | AcquireReply::NotHeld) => {}
                Err(e) => tally.fail(e),
            }
            if tokens.len() >= needed || tokens.len() + (n - tally.answered) < needed {
                break;
            }
        }
        if let Some(e) = tally.permanent {
            return Err(e);
        }
        let valid = |now: Instant| now.duration_since(sent_at) + drift_allowance(ttl) < ttl;
        if tokens.len() < needed {
            if tally.failed > n - needed {
                return Err(self.no_quorum(tokens.len()));
            }
            let clean = tokens.is_empty() && excluded == 0 && tally.answered == n;
            return Ok((
                AcquireReply::Busy {
                    remaining: busy_left,
                },
                clean,
            ));
        }
        let Some(token) = tokens.iter().copied().max() else {
            return Err(self.no_quorum(0));
        };
        if !valid(Instant::now()) {
            return Ok((AcquireReply::Busy { remaining: None }, false));
        }
        // Invariant 3: the token reaches a majority before anybody may use it.
        let Some(raise) = kind.raise_fence(token) else {
            return Err(self.no_quorum(0));
        };
        let raised = self.count_ok(&raise).await?;
        if raised < needed {
            return Err(self.no_quorum(raised));
        }
        if !valid(Instant::now()) {
            return Ok((AcquireReply::Busy { remaining: None }, false));
        }
        Ok((AcquireReply::Acquired(token), true))
    }

    /// Runs `call` everywhere; how many nodes ran it, decided once a majority did.
    async fn count_ok(&self, call: &ScriptCall) -> Result<usize> {
        let (n, needed) = (self.n(), self.needed());
        let mut replies = self.fan_out(call);
        let (mut ok, mut tally) = (0, Tally::default());
        while tally.answered < n && ok < needed {
            let Some(reply) = replies.recv().await else {
                break;
            };
            tally.answered += 1;
            match reply {
                Ok(_) => ok += 1,
                Err(e) => tally.fail(e),
            }
        }
        match tally.permanent {
            Some(e) if ok < needed => Err(e),
            _ => Ok(ok),
        }
    }

    /// Renews (or re-times) one lease everywhere: applied on a majority, or not.
    pub(crate) async fn extend(&self, call: &ScriptCall) -> Result<ExpiryReply> {
        let mut replies = self.fan_out(call);
        let mut votes = Votes::default();
        while votes.tally.answered < self.n() && !votes.decided(self.needed()) {
            let Some(reply) = replies.recv().await else {
                break;
            };
            votes.count(reply.and_then(expiry_reply));
        }
        votes.verdict(self)
    }

    /// Renews a batch of leases: one pipeline per node, all nodes at once; each lease decided
    /// by its own majority.
    pub(crate) async fn renew(&self, calls: &[ScriptCall]) -> Result<Vec<Result<ExpiryReply>>> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for node in &self.nodes {
            let (node, calls, tx) = (node.clone(), calls.to_vec(), tx.clone());
            tokio::spawn(async move {
                let _ = tx.send(node.run_batch("renew", &calls).await);
            });
        }
        drop(tx);
        let mut votes: Vec<Votes> = calls.iter().map(|_| Votes::default()).collect();
        let (mut answered, mut whole_failures) = (0, None);
        while answered < self.n() {
            let Some(batch) = rx.recv().await else {
                break;
            };
            answered += 1;
            match batch {
                Ok(replies) => {
                    for (v, reply) in votes.iter_mut().zip(replies) {
                        v.count(reply.and_then(expiry_reply));
                    }
                }
                Err(e) => {
                    for v in &mut votes {
                        v.tally.answered += 1;
                        v.tally.failed += 1;
                    }
                    whole_failures = Some(e);
                }
            }
            if votes.iter().all(|v| v.decided(self.needed())) {
                break;
            }
        }
        if let Some(e) = whole_failures
            && votes.iter().all(|v| v.tally.failed == v.tally.answered)
        {
            return Err(e);
        }
        Ok(votes.into_iter().map(|v| v.verdict(self)).collect())
    }

    /// Gives a lease back everywhere.
    pub(crate) async fn release(&self, call: &ScriptCall) -> Result<ReleaseReply> {
        let (n, needed) = (self.n(), self.needed());
        let mut replies = self.fan_out(call);
        let (mut released, mut not_held, mut tally) = (0, 0, Tally::default());
        while tally.answered < n && released < needed && not_held < needed {
            let Some(reply) = replies.recv().await else {
                break;
            };
            tally.answered += 1;
            match reply.and_then(release_reply) {
                Ok(ReleaseReply::Released | ReleaseReply::AlreadyReleased) => released += 1,
                Ok(ReleaseReply::NotHeld | ReleaseReply::Retained) => not_held += 1,
                Err(e) => tally.fail(e),
            }
        }
        if not_held >= needed {
            Ok(ReleaseReply::NotHeld)
        } else if released >= 1 && released + tally.failed + (n - tally.answered) >= needed {
            Ok(ReleaseReply::Released)
        } else if let Some(e) = tally.permanent {
            Err(e)
        } else if tally.failed > 0 {
            Err(self.no_quorum(released))
        } else {
            Ok(ReleaseReply::NotHeld)
        }
    }

    /// Voids an attempt everywhere: true if it had taken the lease on some node.
    pub(crate) async fn abandon(&self, call: &ScriptCall) -> Result<bool> {
        let mut replies = self.fan_out(call);
        let (mut took, mut ok, mut tally) = (false, 0, Tally::default());
        while tally.answered < self.n() {
            let Some(reply) = replies.recv().await else {
                break;
            };
            tally.answered += 1;
            match reply.and_then(abandon_reply) {
                Ok(t) => {
                    took |= t;
                    ok += 1;
                }
                Err(e) => tally.fail(e),
            }
        }
        // A node that did not answer keeps at most a lease that expires by its ttl; retry
        // only while the majority is out of reach.
        if ok >= self.needed() {
            Ok(took)
        } else {
            Err(tally.permanent.unwrap_or_else(|| self.no_quorum(ok)))
        }
    }
}

/// The replies of one renewal, counted.
#[derive(Default)]
struct Votes {
    applied: usize,
    superseded: usize,
    not_held: usize,
    tally: Tally,
}

impl Votes {
    fn count(&mut self, reply: Result<ExpiryReply>) {
        self.tally.answered += 1;
        match reply {
            Ok(ExpiryReply::Applied) => self.applied += 1,
            Ok(ExpiryReply::Superseded) => self.superseded += 1,
            Ok(ExpiryReply::NotHeld) => self.not_held += 1,
            Err(e) => self.tally.fail(e),
        }
    }

    fn decided(&self, needed: usize) -> bool {
        self.applied >= needed || self.not_held >= needed
    }

    fn verdict(self, redlock: &Redlock) -> Result<ExpiryReply> {
        let needed = redlock.needed();
        if self.applied >= needed {
            Ok(ExpiryReply::Applied)
        } else if self.applied + self.superseded >= needed {
            Ok(ExpiryReply::Superseded)
        } else if self.not_held > redlock.n() - needed {
            // A majority can no longer hold it for us: lost.
            Ok(ExpiryReply::NotHeld)
        } else if let Some(e) = self.tally.permanent {
            Err(e)
        } else {
            // Invariant 5: short of a majority is not "lost" yet; the renewal retries.
            Err(redlock.no_quorum(self.applied + self.superseded))
        }
    }
}
