//! [`Election`]: the handle candidates campaign through and observers read.

use std::fmt;
use std::sync::Arc;

use tracing::Instrument;

use super::leadership::Leadership;
use super::observe::LeaderChanges;
use super::record::{ELECTION_PREFIX, ElectionStatus, Leader, Seat, redlock_refusal};
use crate::core::acquire::AcquireRequest;
use crate::core::{Core, LeaseOptions, Wake};
use crate::error::{Error, Result};
use crate::fair::FairLock;
use crate::kind::LeaseKind;
use crate::kind::election::ElectionLease;
use crate::kind::exclusive::Exclusive;
use crate::token::OwnerToken;

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
/// - **Candidates and changes.** [`status`](Self::status) lists the candidates in the order
///   they will be elected, each with its value and how long it has queued, and the leader
///   with how many times leadership changed hands ([`Leader::transitions`]).
/// - **A chosen successor.** [`Leadership::yield_to`] steps down for the queued candidate
///   that advertises a given value, which is elected next.
/// - **Health.** [`with_heartbeat`](Self::with_heartbeat) renews a leadership only while the
///   leader's work [beats](Leadership::beat): a leader that hangs with its process alive
///   loses the leadership within that silence and a ttl, and observers see the next leader.
///
/// Runs on one server, Sentinel and Cluster. On Redlock, campaigning and stepping down work
/// (without the FIFO queue: a step down wakes every candidate); the leader's value,
/// [`leader`](Self::leader), [`status`](Self::status), [`observe`](Self::observe),
/// [`proclaim`](Leadership::proclaim) and [`yield_to`](Leadership::yield_to) answer
/// [`Error::Unsupported`] there.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// use futures_util::StreamExt;
///
/// let client = fenced::Client::connect(&url).await?;
/// let election = client.election("billing-scheduler");
/// let mut changes = election.observe()?;
///
/// let leadership = election.campaign("host-a:8080").await?;
/// // The first change may be "nobody leads", read before the campaign won.
/// let leader = loop {
///     match changes.next().await {
///         Some(Some(leader)) => break leader,
///         Some(None) => continue,
///         None => return Err("the client is gone".into()),
///     }
/// };
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
    seat: Seat,
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

impl Election {
    pub(crate) fn new(core: &Arc<Core>, name: String) -> Self {
        let namespace = format!("{}{}", core.options().namespace, ELECTION_PREFIX);
        let fair = FairLock::in_namespace(core, &namespace, name);
        let keys = fair.keys();
        Election {
            seat: Seat {
                core: core.clone(),
                name: fair.name_arc().clone(),
                keys: keys.clone(),
                record: format!("{}:leader", keys.lock).into(),
                queue: fair.queue().into(),
                registrations: fair.registrations().into(),
                values: format!("{}:queue:values", keys.lock).into(),
                transitions: format!("{}:transitions", keys.lock).into(),
                channel_prefix: fair.channel_prefix().into(),
            },
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
    /// or a value longer than [`MAX_VALUE_LEN`](crate::election::MAX_VALUE_LEN).
    ///
    /// # Cancel safety
    ///
    /// Cancelling gives up the place in the queue at once (in the background), and an attempt
    /// in flight steps down if it was elected.
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let value = self.seat.checked_value(value.into())?;
        let ttl = self
            .opts
            .checked_ttl(&self.core, "election", self.fair.name_arc())?;
        let span = tracing::debug_span!("fenced.acquire", fenced.name = %self.name(), fenced.primitive = "election", fenced.token = tracing::field::Empty);
        if self.core.backend().is_redlock() {
            let req = self
                .opts
                .request(self.fair.name_arc(), &self.fair.keys().channel, ttl, 1);
            let held = self
                .core
                .acquire_with(&req, || Ok((self.on_masters(), OwnerToken::fresh()?)))
                .instrument(span)
                .await?;
            return Ok(Leadership::new(held, self.seat.clone(), value));
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
        Ok(Leadership::new(held, self.seat.clone(), value))
    }

    /// One attempt, never waits and never queues: `Some` only when nobody leads and no
    /// candidate is queued.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    pub async fn try_campaign(&self, value: impl Into<String>) -> Result<Option<Leadership>> {
        let value = self.seat.checked_value(value.into())?;
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
        Ok(Some(Leadership::new(held, self.seat.clone(), value)))
    }

    /// The current leader, or `None` when nobody leads.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; [`Error::Unsupported`] on Redlock;
    /// transport errors.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        crate::keys::validate_name("election", self.fair.name_arc())?;
        let node = self
            .core
            .node()
            .map_err(|_| redlock_refusal("reading the leader of"))?;
        // The candidates counted, not listed: what the watcher reads.
        Ok(self.seat.reads(false).run(node).await?.leader)
    }

    /// The leader and the candidates, read in one step: the candidates in the order they
    /// will be elected, each with the value it will advertise and how long it has queued (by
    /// the server's clock). One `MULTI`/`EXEC` of reads: no script.
    ///
    /// ```
    /// # fenced_testkit::doctest(|url| async move {
    /// let client = fenced::Client::connect(&url).await?;
    /// let status = client.election("billing-scheduler").status().await?;
    /// if let Some(leader) = &status.leader {
    ///     println!("{} leads in term {}, after {} change(s) of leader", leader.value, leader.term, leader.transitions);
    /// }
    /// for candidate in &status.queue {
    ///     println!("next: {:?}, queued for {:?}", candidate.value, candidate.queued_for);
    /// }
    /// # Ok(()) });
    /// ```
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
        self.seat.reads(true).run(node).await
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
        Ok(LeaderChanges::new(&self.seat))
    }

    /// A candidate's lease kind (`queues`: it registers in the queue while it waits).
    fn kind(&self, waiter: &Arc<str>, queues: bool, value: &Arc<str>) -> ElectionLease {
        ElectionLease {
            fair: self.fair.kind(waiter, queues),
            record: self.seat.record.clone(),
            values: self.seat.values.clone(),
            transitions: self.seat.transitions.clone(),
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
