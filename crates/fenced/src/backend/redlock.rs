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
//! 3. The fencing token handed out is the largest of the granting nodes' tokens, and a
//!    majority of nodes holds it as its fence before it is handed out: either a majority of
//!    the granting nodes already answered that very token (the attempt proposes one, a little
//!    ahead of the client's clock, which each node takes if it is above its own next token
//!    and at most 1 s ahead of its clock: one round trip in the common case), or it is
//!    written back (`fence = max(fence, token)`) to a majority of nodes that still hold the
//!    lease when the write-back runs there. Any later grant's majority shares a node with
//!    that majority; on that node the later grant needed the lock key free, so it came after
//!    the fence held the token, and its own token is larger. So the tokens of
//!    successive holders strictly increase even when Redlock's timing assumptions fail (a
//!    paused holder, a slow network, skewed clocks). Limit: nodes of that majority losing
//!    their data (a restart without persistence within the fence retention) while their
//!    clocks are behind the token (at most 1 s with a proposal); the restart rule (invariant 6) and persistence guard it.
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
//! 7. A grant is handed out once a majority granted; its attempts on the other masters run
//!    on, and one may run after the lease's release (a master slow to answer, a script it had
//!    to load first). So a release voids the lease where it did not release it, as an abandon
//!    does: deleted if the late attempt ran already, a tombstone it refuses itself on if not.
//!    So does the expiry change of a lease given back before its minimum hold, where the
//!    lease was not held. An unfenced lock's grant (`SET NX PX`) reads no tombstone: its void
//!    is a release again.

use std::sync::Mutex;
use std::time::Duration;

use redis::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::backend::Node;
use crate::error::{Error, Result};
use crate::kind::ExpiryReply;
use crate::kind::{
    AcquireReply, LeaseKind, ReleaseReply, abandon_reply, acquire_reply, expiry_reply,
    release_reply,
};
use crate::notes::ServerNote;
use crate::options::drift_allowance;
use crate::scripts::ScriptCall;
use crate::token::OwnerToken;

/// N independent masters.
pub(crate) struct Redlock {
    nodes: Vec<Node>,
    clients: Vec<redis::Client>,
    /// Per node: its `run_id` as last seen, and when a change of it was seen (invariant 6).
    lives: Mutex<Vec<Life>>,
    restart_grace: Duration,
    /// Every call sent to a node, and every background tail (late replies, announcements):
    /// a step decided by a majority leaves the others running (invariant 1), and
    /// [`settle`](Redlock::settle) waits for them before a process exits.
    tails: TaskTracker,
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
            tails: TaskTracker::new(),
        }
    }

    /// Asks every node whether it answers (`PING`), learns its `run_id` (`INFO server`,
    /// which an ACL may deny: restarts of that node then go unseen, and a warning says so),
    /// and reads whether it may evict lock keys (`notes.rs`; only a node that answered is
    /// asked, so a master that is down adds no wait); how many answered, and the notes.
    pub(crate) async fn ping(&self) -> (usize, Vec<ServerNote>) {
        let asks = self
            .nodes
            .iter()
            .zip(&self.clients)
            .map(|(node, client)| async move {
                let pinged = node
                    .query::<String>("ping", &redis::cmd("PING"))
                    .await
                    .is_ok();
                let info = node
                    .query::<String>("ping", redis::cmd("INFO").arg("server"))
                    .await;
                let note = if pinged {
                    let label = client.get_connection_info().addr().to_string();
                    crate::notes::eviction(node, &label).await
                } else {
                    None
                };
                (pinged, info, note)
            });
        let answers = futures_util::future::join_all(asks).await;
        let mut answered = 0;
        let mut notes = Vec::new();
        for (i, (pinged, info, note)) in answers.into_iter().enumerate() {
            answered += usize::from(pinged);
            notes.extend(note);
            match info {
                Ok(text) => {
                    self.may_vote(i, Some(&text));
                }
                Err(e) if pinged => {
                    tracing::warn!(node = i, error = %e, "fenced: cannot read a Redlock master's INFO (an ACL?); its restarts will not be detected");
                }
                Err(_) => {}
            }
        }
        (answered, notes)
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

    /// Waits until every call and background tail started so far has ended (each is bounded
    /// by the timeout): a process about to exit then leaves no release half done on a
    /// minority of the masters, where it would stand in the next holder's way until its ttl.
    pub(crate) async fn settle(&self) {
        self.tails.close();
        self.tails.wait().await;
        self.tails.reopen();
    }

    /// The nodes, in order, each with its client (for its address).
    pub(crate) fn each_node(&self) -> impl Iterator<Item = (&Node, &redis::Client)> {
        self.nodes.iter().zip(&self.clients)
    }

    /// The clients of the nodes, in order: pub/sub goes to the first that answers (every
    /// release is announced on every node), transactions' connections to the first.
    pub(crate) fn clients(&self) -> &[redis::Client] {
        &self.clients
    }

    /// The per-call timeout, the client's, which every master keeps.
    pub(crate) fn timeout(&self) -> Duration {
        self.nodes.first().map_or(Duration::ZERO, Node::timeout)
    }

    /// How many masters there are.
    pub(crate) fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// A strict majority.
    fn needed(&self) -> usize {
        self.nodes() / 2 + 1
    }

    fn no_quorum(&self, granted: usize) -> Error {
        self.short_of(granted, self.needed())
    }

    fn short_of(&self, granted: usize, needed: usize) -> Error {
        Error::NoQuorum {
            granted,
            needed,
            nodes: self.nodes(),
        }
    }

    /// Sends `call` to every node at once; replies arrive in the order they come
    /// (invariant 1: the calls run to their end even if nobody reads their replies).
    fn fan_out(&self, call: &ScriptCall) -> mpsc::UnboundedReceiver<(usize, Result<Value>)> {
        fan_out(&self.tails, &self.nodes, call)
    }

    /// Whether `kind` runs here: checked before anything is sent, so a refused primitive
    /// leaves nothing to clean up.
    pub(crate) fn supports(&self, kind: &dyn LeaseKind) -> Result<()> {
        match kind.redlock() {
            Some(_) => Ok(()),
            None => Err(Error::unsupported(format!(
                "{} does not run on Redlock (only locks and semaphores do): use one server, Sentinel or a Redis Cluster",
                kind.primitive().with_article()
            ))),
        }
    }

    /// One acquire attempt on every node. `Ok((reply, clean))`: `clean` is false when some
    /// node may hold the lease for this owner without a grant (invariant 4); the core then
    /// abandons the attempt everywhere. An error leaves the attempt unclean too. A busy
    /// attempt decided before every node answered stays clean: the late replies are read in
    /// the background, and `abandon` is sent everywhere should one of them be a grant (or
    /// unknown).
    pub(crate) async fn acquire(
        &self,
        kind: &dyn LeaseKind,
        owner: &OwnerToken,
        call: &ScriptCall,
        abandon: &(dyn Fn() -> ScriptCall + Sync),
        ttl: Duration,
        sent_at: Instant,
    ) -> Result<(AcquireReply, bool)> {
        self.supports(kind)?;
        let (n, needed) = (self.nodes(), crate::kind::quorum(kind, self.nodes()));
        // Propose a token, so that a quorum may agree on it without a write-back
        // (invariant 3).
        let proposed = kind
            .redlock()
            .and_then(|r| r.propose_token(call, proposal()));
        let call = proposed.as_ref().unwrap_or(call);
        // Each node's attempt goes with an `INFO server` on the same connection: one round
        // trip, and its run_id (invariant 6).
        let (tx, mut replies) = mpsc::unbounded_channel();
        for (i, node) in self.nodes.iter().enumerate() {
            let (node, call, tx) = (node.clone(), call.clone(), tx.clone());
            self.tails.spawn(async move {
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
            let mut reply = reply.and_then(acquire_reply);
            if matches!(reply, Ok(AcquireReply::Busy { remaining: None }))
                && kind.checks_type_of_refusal()
            {
                reply = self.nodes[i].refusal_type(call).await;
            }
            match reply {
                Ok(AcquireReply::Acquired(_)) if !votes => excluded += 1,
                Ok(AcquireReply::Acquired(token)) => tokens.push(token),
                Ok(AcquireReply::Busy { remaining }) => {
                    busy_left = match (busy_left, remaining) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                Ok(AcquireReply::Abandoned | AcquireReply::NotHeld) => {}
                // A key of another type on this master: a permanent refusal, which ends the
                // wait once it keeps the majority out of reach.
                Ok(AcquireReply::WrongType { key }) => {
                    tally.fail(crate::kind::wrong_type(call, key));
                }
                Err(e) => tally.fail(e),
            }
            if tokens.len() >= needed || tokens.len() + (n - tally.answered) < needed {
                break;
            }
        }
        let valid = |now: Instant| now.duration_since(sent_at) + drift_allowance(ttl) < ttl;
        if tokens.len() < needed {
            // A node's own failure (OOM, NOPERM on one master) is a missing vote; it ends the
            // wait only when it is what keeps the majority out of reach.
            if tally.failed > n - needed {
                return Err(tally
                    .permanent
                    .unwrap_or_else(|| self.short_of(tokens.len(), needed)));
            }
            let clean = tokens.is_empty() && excluded == 0 && tally.failed == 0;
            if clean && tally.answered < n {
                drain_late_replies(&self.tails, replies, self.nodes.clone(), abandon());
            }
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
        // Invariant 3: the token is on a majority before anybody may use it. Where a majority
        // of the granting nodes took the proposal, their fences hold it already.
        if tokens.iter().filter(|t| **t == token).count() >= self.needed() {
            return Ok((AcquireReply::Acquired(token), true));
        }
        // Otherwise it is written back.
        let Some(raise) = kind.redlock().and_then(|r| r.raise_fence(owner, token)) else {
            return Err(self.no_quorum(0));
        };
        // A majority of write-backs is enough for the tokens: every later grant's quorum is
        // at least a majority too, so the two meet.
        let raised = self.count_raised(&raise).await?;
        if raised < self.needed() {
            return Err(self.no_quorum(raised));
        }
        if !valid(Instant::now()) {
            return Ok((AcquireReply::Busy { remaining: None }, false));
        }
        Ok((AcquireReply::Acquired(token), true))
    }

    /// Runs a fence write-back everywhere; how many nodes raised their fence while they
    /// still held this lease (`fence_raise.lua` answers 1), decided once a majority did. Only
    /// those count: a later grant on such a node comes after the raise (invariant 3).
    async fn count_raised(&self, call: &ScriptCall) -> Result<usize> {
        let (n, needed) = (self.nodes(), self.needed());
        let mut replies = self.fan_out(call);
        let (mut ok, mut tally) = (0, Tally::default());
        while tally.answered < n && ok < needed {
            let Some((_, reply)) = replies.recv().await else {
                break;
            };
            tally.answered += 1;
            match reply {
                Ok(Value::Int(1)) => ok += 1,
                Ok(_) => {}
                Err(e) => tally.fail(e),
            }
        }
        match tally.permanent {
            Some(e) if ok < needed => Err(e),
            _ => Ok(ok),
        }
    }

    /// Renews (or re-times) one lease everywhere: applied on a majority, or not. With `void`
    /// (a lease given back before its minimum hold, set to expire then), once applied, every
    /// master that answered it did not hold the lease gets `void`, as after a release
    /// (invariant 7), in the background.
    pub(crate) async fn extend(
        &self,
        call: &ScriptCall,
        needed: usize,
        void: Option<ScriptCall>,
    ) -> Result<ExpiryReply> {
        let mut replies = self.fan_out(call);
        let mut votes = Votes::default();
        let mut not_held = vec![false; self.nodes()];
        while votes.tally.answered < self.nodes() && !votes.decided(needed) {
            let Some((i, reply)) = replies.recv().await else {
                break;
            };
            let reply = reply.and_then(expiry_reply);
            not_held[i] = matches!(reply, Ok(ExpiryReply::NotHeld));
            votes.count(reply);
        }
        let verdict = votes.verdict(self, needed);
        if let (Some(void), Ok(ExpiryReply::Applied)) = (void, &verdict) {
            let (nodes, tails) = (self.nodes.clone(), self.tails.clone());
            self.tails.spawn(async move {
                while let Some((i, reply)) = replies.recv().await {
                    not_held[i] = matches!(reply.and_then(expiry_reply), Ok(ExpiryReply::NotHeld));
                }
                for (node, _) in nodes.into_iter().zip(not_held).filter(|(_, n)| *n) {
                    let void = void.clone();
                    tails.spawn(async move {
                        let _ = node.run::<Value>(&void).await;
                    });
                }
            });
        }
        verdict
    }

    /// Renews a batch of leases: one pipeline per node, all nodes at once; each lease decided
    /// by its own majority.
    pub(crate) async fn renew(
        &self,
        calls: &[ScriptCall],
        quorums: &[usize],
    ) -> Result<Vec<Result<ExpiryReply>>> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for node in &self.nodes {
            let (node, calls, tx) = (node.clone(), calls.to_vec(), tx.clone());
            self.tails.spawn(async move {
                let _ = tx.send(node.run_batch("renew", &calls).await);
            });
        }
        drop(tx);
        let mut votes: Vec<Votes> = calls.iter().map(|_| Votes::default()).collect();
        let (mut answered, mut whole_failures) = (0, None);
        while answered < self.nodes() {
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
            if votes.iter().zip(quorums).all(|(v, q)| v.decided(*q)) {
                break;
            }
        }
        if let Some(e) = whole_failures
            && votes.iter().all(|v| v.tally.failed == v.tally.answered)
        {
            return Err(e);
        }
        Ok(votes
            .into_iter()
            .zip(quorums)
            .map(|(v, q)| v.verdict(self, *q))
            .collect())
    }

    /// Gives a lease back everywhere. `Released` needs a majority that released it (a retry
    /// reads "not held" by the core's rule). Then, in the background, as the last replies come
    /// in, every master that did not release it gets `void` (the lease's abandon, invariant 7):
    /// the grant was handed out once a majority granted, and its attempt on a slower master
    /// may run there after this release, where it would hold the name for a ttl; the void
    /// frees it, or leaves the tombstone the late attempt refuses itself on. Waiters subscribe
    /// on any one master (the first that answers), so every master hears the release once:
    /// from the script where it released the lease, from an explicit `PUBLISH` elsewhere
    /// (`announce`: the channel and message) where the void did not release it either.
    pub(crate) async fn release(
        &self,
        call: &ScriptCall,
        announce: (&str, &str),
        needed: usize,
        void: ScriptCall,
    ) -> Result<ReleaseReply> {
        let n = self.nodes();
        let mut replies = self.fan_out(call);
        let (mut released, mut not_held, mut tally) = (0, 0, Tally::default());
        let mut freed = vec![false; n];
        while tally.answered < n && released < needed && not_held < needed {
            let Some((i, reply)) = replies.recv().await else {
                break;
            };
            tally.answered += 1;
            match reply.and_then(release_reply) {
                Ok(ReleaseReply::Released | ReleaseReply::AlreadyReleased) => {
                    released += 1;
                    freed[i] = true;
                }
                Ok(ReleaseReply::NotHeld | ReleaseReply::Retained) => not_held += 1,
                Err(e) => tally.fail(e),
            }
        }
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(announce.0).arg(announce.1);
        let publish = (released >= needed).then_some(publish);
        let (nodes, tails) = (self.nodes.clone(), self.tails.clone());
        self.tails.spawn(async move {
            // Each reply is bounded by the timeout.
            while let Some((i, reply)) = replies.recv().await {
                if matches!(reply.and_then(release_reply), Ok(ReleaseReply::Released)) {
                    freed[i] = true;
                }
            }
            for (node, _) in nodes.into_iter().zip(freed).filter(|(_, freed)| !freed) {
                let (void, publish) = (void.clone(), publish.clone());
                tails.spawn(async move {
                    let voided = node.run::<Value>(&void).await.and_then(abandon_reply);
                    if let (Some(publish), false) = (publish, matches!(voided, Ok(true))) {
                        let _ = node.query::<i64>("release", &publish).await;
                    }
                });
            }
        });
        if released >= needed {
            Ok(ReleaseReply::Released)
        } else if not_held >= needed || (tally.failed == 0 && tally.answered == n) {
            Ok(ReleaseReply::NotHeld)
        } else {
            Err(tally.permanent.unwrap_or_else(|| self.no_quorum(released)))
        }
    }

    /// Voids an attempt everywhere: true if it had taken the lease on some node.
    pub(crate) async fn abandon(&self, call: &ScriptCall) -> Result<bool> {
        let mut replies = self.fan_out(call);
        let (mut took, mut ok, mut tally) = (false, 0, Tally::default());
        while tally.answered < self.nodes() {
            let Some((_, reply)) = replies.recv().await else {
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

/// How far ahead of this client's clock a proposed token is, so that it is above the masters'
/// `TIME` floor despite a small clock difference (fence.lua takes it up to 1 s ahead of its
/// own clock).
const PROPOSAL_LEAD: Duration = Duration::from_millis(100);

/// The token to propose: this client's clock in µs since the epoch, a little ahead. Only a
/// proposal: the masters bound it by their own clocks, the token is whatever a majority
/// agrees on or is written back, and a wrong clock costs the write-back's round trip, never
/// the order of tokens (invariant 3).
fn proposal() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        + PROPOSAL_LEAD;
    u64::try_from(now.as_micros()).unwrap_or(0)
}

/// Sends `call` to every node at once; replies (with the node's index) arrive in the order
/// they come (invariant 1: the calls run to their end even if nobody reads their replies).
fn fan_out(
    tails: &TaskTracker,
    nodes: &[Node],
    call: &ScriptCall,
) -> mpsc::UnboundedReceiver<(usize, Result<Value>)> {
    let (tx, rx) = mpsc::unbounded_channel();
    for (i, node) in nodes.iter().enumerate() {
        let (node, call, tx) = (node.clone(), call.clone(), tx.clone());
        tails.spawn(async move {
            let _ = tx.send((i, node.run::<Value>(&call).await));
        });
    }
    rx
}

/// Reads the replies of a busy attempt that was decided early; should a late one be a grant
/// (or unknown), the attempt is abandoned on every node (invariant 4).
fn drain_late_replies(
    tails: &TaskTracker,
    mut replies: mpsc::UnboundedReceiver<(usize, Result<Value>, Option<String>)>,
    nodes: Vec<Node>,
    abandon: ScriptCall,
) {
    let inner = tails.clone();
    tails.spawn(async move {
        let tails = inner;
        while let Some((_, reply, _)) = replies.recv().await {
            let harmless = matches!(
                reply.and_then(acquire_reply),
                Ok(AcquireReply::Busy { .. }
                    | AcquireReply::Abandoned
                    | AcquireReply::NotHeld
                    | AcquireReply::WrongType { .. })
            );
            if !harmless {
                let mut answers = fan_out(&tails, &nodes, &abandon);
                while answers.recv().await.is_some() {}
                return;
            }
        }
    });
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

    fn verdict(self, redlock: &Redlock, needed: usize) -> Result<ExpiryReply> {
        if self.applied >= needed {
            Ok(ExpiryReply::Applied)
        } else if self.applied + self.superseded >= needed {
            Ok(ExpiryReply::Superseded)
        } else if self.not_held > redlock.nodes() - needed {
            // A majority can no longer hold it for us: lost.
            Ok(ExpiryReply::NotHeld)
        } else if let Some(e) = self.tally.permanent {
            Err(e)
        } else {
            // Invariant 5: short of a majority is not "lost" yet; the renewal retries.
            Err(redlock.short_of(self.applied + self.superseded, needed))
        }
    }
}
