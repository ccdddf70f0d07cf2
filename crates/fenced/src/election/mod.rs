//! [`Election`]: leader election with terms, on the fair lock's FIFO queue.
//!
//! Keys, all under the hash tag `{name}` with the prefix `<ns>election:`:
//!
//! | key | type | what it holds |
//! |---|---|---|
//! | `<ns>election:{<name>}` | string | the leader's owner token, with `PX` = its lease |
//! | `<ns>election:{<name>}:fence` | string | the last term handed out (a fencing token) |
//! | `<ns>election:{<name>}:queue`, `:queue:ends` | list, hash | the candidates, oldest first, as a fair lock's waiters |
//! | `<ns>election:{<name>}:leader` | hash | the leader record: `owner`, `value`, `term`, `since` (server ms), `v` (proclaims) |
//! | `<ns>election:{<name>}:released` | pub/sub channel | one message per change: a grant, a proclaim, a step down |
//!
//! Invariants:
//! 1. A term is the fencing token of its leader's grant: terms strictly increase, and a
//!    deposed leader's fenced writes are refused wherever a newer term was seen.
//! 2. The leader record counts only while its `owner` holds the leader key: it is written in
//!    the grant's own script, so a reader never sees a leader without its value, and a record
//!    left by a lease that ended names nobody.
//! 3. Observers never go backwards: a change is reported only when its (term, proclaims) is
//!    past the last one reported, and "no leader" only after a leader (`observe.rs`).
//! 4. One watcher per client and election serves every observer; it reads on a change's
//!    announcement, after the pub/sub connection came back, and when the leader's lease is due
//!    to end (an expiry announces nothing), never on a timer while nothing changes.

mod leadership;
mod observe;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tracing::Instrument;

use crate::core::acquire::AcquireRequest;
use crate::core::{Core, LeaseOptions, Wake};
use crate::error::{Error, Result};
use crate::fair::FairLock;
use crate::keys::LockKeys;
use crate::kind::LeaseKind;
use crate::kind::election::ElectionLease;
use crate::kind::exclusive::Exclusive;
use crate::scripts::{ELECTION_LEADER, ScriptCall};
use crate::token::{FencingToken, OwnerToken};

pub use leadership::Leadership;
pub use observe::LeaderChanges;

/// The longest value a candidate may advertise, in bytes.
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// An election: candidates campaign, one leads at a time with a term, others observe.
///
/// - **Terms are fencing tokens.** Each leadership's term is greater than every earlier
///   one's, so a [`FencedResource`](crate::FencedResource) (or a database that checks the
///   token) refuses the writes of a leader that was deposed but does not know it yet.
/// - **FIFO.** Candidates queue in Redis and are elected in the order they campaigned; a
///   step down wakes only the next candidate, not every one.
/// - **Leases.** A leader's lease is renewed while its [`Leadership`] lives, and its lost
///   signal fires if it ends. A leader that dies is replaced within a ttl.
/// - **Observers.** [`observe`](Self::observe) follows the leader as a stream, woken by
///   announcements, in term order, never backwards.
///
/// Runs on one server, Sentinel and Cluster. On Redlock, campaigning and stepping down work
/// (without the FIFO queue: a step down wakes every candidate); the leader's value,
/// [`leader`](Self::leader), [`observe`](Self::observe) and
/// [`proclaim`](Leadership::proclaim) answer [`Error::Unsupported`] there.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|url| async move {
/// use futures_util::StreamExt;
///
/// let client = fenced::Client::connect(&url).await?;
/// let election = client.election("billing-scheduler");
/// let mut changes = election.observe()?;
///
/// let leadership = election.campaign("host-a:8080").await?;
/// let leader = changes.next().await.flatten().expect("elected");
/// assert_eq!((leader.value.as_str(), leader.term), ("host-a:8080", leadership.term()));
///
/// // ... lead: send leadership.term() with every write the leader makes ...
/// leadership.resign().await?;
/// assert_eq!(changes.next().await, Some(None), "nobody leads");
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct Election {
    core: Arc<Core>,
    /// The candidates' queue and the leader key: a fair lock under the election's prefix.
    fair: FairLock,
    record: Arc<str>,
    observers: Arc<[String]>,
    opts: LeaseOptions,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", self.fair.name_arc())
            .field("ttl", &self.opts.ttl(&self.core))
            .field("wait", &self.opts.wait)
            .finish()
    }
}

/// The leader of an election, as read from Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader advertises (its address, say): given to
    /// [`campaign`](Election::campaign), changed by [`proclaim`](Leadership::proclaim).
    pub value: String,
    /// The leader's term: the fencing token of its grant.
    pub term: FencingToken,
    /// When it was elected, by the Redis server's clock (for display: never compare it with
    /// another machine's clock).
    pub since: SystemTime,
    /// How much of its lease was left when it was read (it is renewed while the leader lives).
    pub lease_left: Duration,
    /// How many times it changed its value in this term.
    pub proclaims: u64,
}

/// An election's state: its leader and its candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionStatus {
    /// The leader, if any.
    pub leader: Option<Leader>,
    /// Candidates waiting (including any that gave up or died but have not yet reached the
    /// head of the queue).
    pub candidates: u64,
}

impl Election {
    pub(crate) fn new(core: &Arc<Core>, name: String) -> Self {
        let namespace = format!(
            "{}{}",
            core.options().namespace,
            crate::inspect::ELECTION_PREFIX
        );
        let fair = FairLock::in_namespace(core, &namespace, name);
        let keys = fair.keys();
        Election {
            record: format!("{}:leader", keys.lock).into(),
            observers: Arc::from([keys.channel.clone()]),
            core: core.clone(),
            fair,
            opts: LeaseOptions::default(),
        }
    }

    crate::core::held::lease_option_setters!();

    /// The election's name.
    pub fn name(&self) -> &str {
        self.fair.name()
    }

    /// Campaigns until elected, waiting by the [`WaitPolicy`](crate::WaitPolicy) (by
    /// default without limit), and leads with `value` advertised.
    ///
    /// # Errors
    ///
    /// As [`Lock::acquire`](crate::Lock::acquire); [`Error::InvalidArgument`] for a bad name
    /// or a value longer than [`MAX_VALUE_LEN`].
    ///
    /// # Cancel safety
    ///
    /// Cancelling gives up the place in the queue at once (in the background), and an attempt
    /// in flight steps down if it was elected.
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let value = self.checked_value(value.into())?;
        let ttl = self
            .opts
            .checked_ttl(&self.core, "election", self.fair.name_arc())?;
        let span = tracing::debug_span!("fenced.election.campaign", election = %self.name());
        if self.core.backend().is_redlock() {
            let req = self
                .opts
                .request(self.fair.name_arc(), &self.fair.keys().channel, ttl, 1);
            let held = self
                .core
                .acquire_with(&req, || Ok((self.on_masters(), OwnerToken::fresh()?)))
                .instrument(span)
                .await?;
            return Ok(Leadership::new(held, self.clone(), value));
        }
        let waiter: Arc<str> = OwnerToken::fresh()?.as_str()[..16].into();
        let channel = format!("{}{waiter}", self.fair.channel_prefix());
        let req: AcquireRequest = self.opts.request(self.fair.name_arc(), &channel, ttl, 1);
        // Until elected, this candidate has a place in Redis: leave it if the wait ends.
        let mut place = Place {
            core: &self.core,
            kind: Some(Arc::new(self.kind(&waiter, true, &value))),
        };
        let held = self
            .core
            .acquire_with(&req, || {
                Ok((self.kind(&waiter, true, &value), OwnerToken::fresh()?))
            })
            .instrument(span)
            .await?;
        place.kind = None;
        self.core.wake_local(&self.fair.keys().channel, Wake::One);
        Ok(Leadership::new(held, self.clone(), value))
    }

    /// One attempt, never waits and never queues: `Some` only when nobody leads and no
    /// candidate is queued.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    pub async fn try_campaign(&self, value: impl Into<String>) -> Result<Option<Leadership>> {
        let value = self.checked_value(value.into())?;
        let ttl = self
            .opts
            .checked_ttl(&self.core, "election", self.fair.name_arc())?;
        let owner = OwnerToken::fresh()?;
        let granted = if self.core.backend().is_redlock() {
            let req = self
                .opts
                .request(self.fair.name_arc(), &self.fair.keys().channel, ttl, 1);
            self.core.try_once(&req, self.on_masters(), owner).await?
        } else {
            let waiter: Arc<str> = OwnerToken::fresh()?.as_str()[..16].into();
            let channel = format!("{}{waiter}", self.fair.channel_prefix());
            let req = self.opts.request(self.fair.name_arc(), &channel, ttl, 1);
            let kind = self.kind(&waiter, false, &value);
            self.core.try_once(&req, kind, owner).await?
        };
        let Some(held) = granted.ok() else {
            return Ok(None);
        };
        self.core.wake_local(&self.fair.keys().channel, Wake::One);
        Ok(Some(Leadership::new(held, self.clone(), value)))
    }

    /// The current leader, or `None` when nobody leads.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; [`Error::Unsupported`] on Redlock;
    /// transport errors.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.status().await?.leader)
    }

    /// The leader and the candidates, read in one step.
    ///
    /// # Errors
    ///
    /// As [`leader`](Self::leader).
    pub async fn status(&self) -> Result<ElectionStatus> {
        crate::keys::validate_name("election", self.fair.name_arc())?;
        let node = self
            .core
            .node()
            .map_err(|_| redlock_refusal("reading the leader of"))?;
        parse_status(node.run(&self.status_call()).await?)
    }

    /// The read of [`status`](Self::status).
    fn status_call(&self) -> ScriptCall {
        ScriptCall::new(&ELECTION_LEADER)
            .key(&self.fair.keys().lock)
            .key(&*self.record)
            .key(self.fair.queue())
    }

    /// A stream of leader changes: `Some(leader)` for each new term or value, `None` when
    /// nobody leads any more. The first item is the leader as of the first read.
    ///
    /// - Items come in term order and never go backwards; a stream that was slow (or whose
    ///   connection was lost) may skip terms, never report an older leader after a newer one.
    /// - Every observer of one election in this client shares one watcher (one subscription
    ///   and one read per change); while nothing changes, it reads only when the leader's
    ///   lease is due to end.
    /// - The stream ends when every handle of its client is dropped.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, or when called outside a Tokio runtime (the
    /// watcher is a task of it); [`Error::Unsupported`] on Redlock.
    pub fn observe(&self) -> Result<LeaderChanges> {
        crate::keys::validate_name("election", self.fair.name_arc())?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::invalid(
                "observe() runs a watcher task: call it within a Tokio runtime",
            ));
        }
        self.core.node().map_err(|_| redlock_refusal("observing"))?;
        Ok(observe::LeaderChanges::new(self))
    }

    fn checked_value(&self, value: String) -> Result<Arc<str>> {
        crate::keys::validate_name("election", self.fair.name_arc())?;
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::invalid(format!(
                "the value is {} bytes long; the limit is {MAX_VALUE_LEN}",
                value.len()
            )));
        }
        Ok(value.into())
    }

    /// A candidate's lease kind (`queues`: it registers in the queue while it waits).
    fn kind(&self, waiter: &Arc<str>, queues: bool, value: &Arc<str>) -> ElectionLease {
        ElectionLease {
            fair: self.fair.kind(waiter, queues),
            record: self.record.clone(),
            value: value.clone(),
            observers: self.observers.clone(),
            announcement: self.core.release_message(Wake::One).into(),
        }
    }

    /// On Redlock: the plain lock's lease on the leader key, on every master.
    fn on_masters(&self) -> Exclusive {
        Exclusive {
            name: self.fair.name_arc().clone(),
            keys: self.fair.keys().clone(),
            fence_retention_ms: self.core.fence_retention_ms(),
            counted: false,
        }
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    pub(crate) fn keys(&self) -> &LockKeys {
        self.fair.keys()
    }

    pub(crate) fn record(&self) -> &str {
        &self.record
    }
}

fn redlock_refusal(what: &str) -> Error {
    Error::unsupported(format!(
        "{what} an election needs one Redis server, Sentinel or a Cluster: on several independent masters (Redlock) there is no one record of the leader"
    ))
}

/// A candidate's place in the queue, given up when dropped still armed.
struct Place<'a> {
    core: &'a Core,
    kind: Option<Arc<dyn LeaseKind>>,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let Some(kind) = self.kind.take() else {
            return;
        };
        // A fresh owner nobody holds: the clean-up only leaves the queue.
        if let Ok(nobody) = OwnerToken::fresh() {
            let patience = self.core.timeout() * 2;
            self.core.abandon_in_background(kind, nobody, patience);
        }
    }
}

/// Reads `election_leader.lua`'s reply.
fn parse_status(reply: redis::Value) -> Result<ElectionStatus> {
    use redis::Value;
    let bad = |what: &str| crate::kind::unexpected("leader", what.to_owned());
    let Value::Array(items) = reply else {
        return Err(bad("not an array"));
    };
    let int = |v: &Value| match v {
        Value::Int(n) => Some(*n),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let candidates = items
        .get(1)
        .and_then(int)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| bad("no candidate count"))?;
    if items.first().and_then(int) != Some(1) {
        return Ok(ElectionStatus {
            leader: None,
            candidates,
        });
    }
    let [_, _, value, term, since, left, proclaims] = &items[..] else {
        return Err(bad("a leader reply of another length"));
    };
    let value = text(value).ok_or_else(|| bad("no value"))?;
    let term = text(term)
        .and_then(|t| t.parse::<u64>().ok())
        .map(FencingToken::new)
        .ok_or_else(|| bad("a term that is not a u64"))?;
    let since_ms = int(since).ok_or_else(|| bad("no start"))?;
    let left_ms = int(left).unwrap_or(0).max(0);
    let proclaims = int(proclaims).unwrap_or(0).max(0);
    Ok(ElectionStatus {
        leader: Some(Leader {
            value,
            term,
            since: SystemTime::UNIX_EPOCH + Duration::from_millis(since_ms.max(0) as u64),
            lease_left: Duration::from_millis(left_ms as u64),
            proclaims: proclaims as u64,
        }),
        candidates,
    })
}
