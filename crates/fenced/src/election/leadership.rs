//! [`Leadership`]: a won election, held like a lock.

use std::fmt;
use std::sync::{Arc, Mutex};

use super::record::{Seat, redlock_refusal};
use crate::core::{Held, Wake};
use crate::error::{Error, Result};
use crate::kind::unexpected;
use crate::scripts::{ELECTION_PROCLAIM, ELECTION_RESIGN, ScriptCall};
use crate::token::FencingToken;
use crate::util::lock_unpoisoned;

/// A won election: this candidate leads until it resigns, yields or its lease is lost.
///
/// It has the surface of every guard ([`LeaseGuard`](crate::LeaseGuard) and
/// [`FencedGuard`](crate::FencedGuard)): the lease is renewed in the background while it
/// lives, [`lost`](Self::lost) fires if the leadership ends, and its
/// [`term`](Self::term) is its fencing token. Dropping it steps down in the background.
///
/// **Health.** Taken from an election [`with_heartbeat(max_silence)`](crate::Election::with_heartbeat),
/// the leadership is renewed only while the leader's work calls [`beat`](Self::beat) (or
/// [`Lease::beat`](crate::Lease::beat) on a clone of its lease): a leader that goes silent
/// for longer, hung while its process runs on, loses the leadership
/// ([`LostCause::Silent`](crate::LostCause::Silent)), the next candidate is elected once its
/// lease runs out (within `max_silence` and a ttl of its last beat), and observers see the
/// new leader.
///
/// ```
/// # fenced_testkit::doctest(|url| async move {
/// use std::time::Duration;
///
/// let client = fenced::Client::connect(&url).await?;
/// let leadership = client
///     .election("billing-scheduler")
///     .with_heartbeat(Duration::from_secs(30)) // a leader stuck for 30 s gives way
///     .campaign("host-a:8080")
///     .await?;
/// for _round in 0..3 {
///     leadership.lease().check()?;
///     // ... a round of the leader's work, sent with leadership.term() ...
///     leadership.beat();
/// }
/// leadership.resign().await?;
/// # Ok(()) });
/// ```
#[must_use = "dropping the leadership steps down at once"]
pub struct Leadership {
    held: Held,
    election: Seat,
    value: Mutex<Arc<str>>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.name())
            .field("term", &self.term())
            .field("value", &self.value())
            .finish()
    }
}

crate::guard::lease_accessors!(Leadership);

impl Leadership {
    pub(super) fn new(held: Held, election: Seat, value: Arc<str>) -> Self {
        Leadership {
            held,
            election,
            value: Mutex::new(value),
        }
    }

    /// This leadership's term: its fencing token, greater than every earlier leader's.
    pub fn term(&self) -> FencingToken {
        self.fencing_token()
    }

    /// The value this leader advertises.
    pub fn value(&self) -> String {
        lock_unpoisoned(&self.value).to_string()
    }

    /// Changes the value this leader advertises, keeping its term and its lease; observers
    /// see the change.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] at once when the leadership is known lost;
    /// [`Error::NotHeld`] when Redis found it ended; [`Error::InvalidArgument`] for a value
    /// longer than [`MAX_VALUE_LEN`](crate::election::MAX_VALUE_LEN);
    /// [`Error::Unsupported`] on Redlock; transport errors (with replica acknowledgements,
    /// [`Error::NotReplicated`] when too few replicas confirmed it).
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<()> {
        let value = self.election.checked_value(value.into())?;
        let lease = self.held.lease();
        lease.check()?;
        let core = &self.election.core;
        let node = core
            .node()
            .map_err(|_| redlock_refusal("proclaiming a value in"))?;
        let call = ScriptCall::new(&ELECTION_PROCLAIM)
            .key(&self.election.keys.lock)
            .key(&*self.election.record)
            .arg(self.held.owner().as_str())
            .arg(&*value)
            .arg(&self.election.keys.channel)
            .arg(&*core.release_message(Wake::One));
        let applied: u64 = node.run_replicated(&call).await?;
        if applied == 0 {
            return Err(Error::NotHeld {
                name: self.name().to_owned(),
            });
        }
        *lock_unpoisoned(&self.value) = value;
        core.wake_local(&self.election.keys.channel, Wake::One);
        Ok(())
    }

    /// Steps down for the candidate that advertises `value` (Kubernetes' preferred holder):
    /// `true` when one is queued, and then it is the next leader; `false` when none is, and
    /// this leader leads on, unchanged.
    ///
    /// The first candidate of the queue still waiting whose [`campaign`](crate::Election::campaign)
    /// advertised `value` moves to the head of the queue, and the leader steps down in the same
    /// atomic step: that candidate is woken and elected at once, before any other, with a
    /// term greater than this one; observers see nobody lead until then, as after a
    /// [`resign`](Self::resign). Once it answers `true`, this leadership is over: its lost
    /// signal fires, its lease reads as given back, and dropping it sends nothing more. The
    /// candidates' values are those [`Election::status`](crate::Election::status) lists.
    ///
    /// A yield steps down at once, even before a
    /// [`with_min_hold`](crate::Election::with_min_hold) minimum ends: the minimum keeps other
    /// candidates out, and the chosen one is let in on purpose.
    ///
    /// ```
    /// # fenced_testkit::doctest(|url| async move {
    /// let client = fenced::Client::connect(&url).await?;
    /// let election = client.election("billing-scheduler");
    /// let leadership = election.campaign("v1:host-a").await?;
    /// // A rolling upgrade: hand over to the new version's candidate, if it is queued.
    /// if !leadership.yield_to("v2:host-b").await? {
    ///     // Nobody advertises that value yet: still the leader.
    ///     assert!(!leadership.is_lost());
    /// }
    /// leadership.resign().await?;
    /// # Ok(()) });
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] or [`Error::LeaseEnded`] at once when the leadership is known
    /// over; [`Error::NotHeld`] when Redis found it ended; [`Error::InvalidArgument`] for a
    /// value longer than [`MAX_VALUE_LEN`](crate::election::MAX_VALUE_LEN);
    /// [`Error::Unsupported`] on Redlock; transport errors (with replica acknowledgements,
    /// [`Error::NotReplicated`] when too few replicas confirmed it). After a transport error
    /// the outcome is unknown: if the leader did step down, its next renewal finds the
    /// leadership gone and its lost signal fires.
    ///
    /// # Cancel safety
    ///
    /// If cancelled after the request was sent, the outcome is unknown, as after a transport
    /// error.
    pub async fn yield_to(&self, value: impl Into<String>) -> Result<bool> {
        let value = self.election.checked_value(value.into())?;
        let lease = self.held.lease();
        lease.check()?;
        let core = &self.election.core;
        let node = core
            .node()
            .map_err(|_| redlock_refusal("yielding the leadership of"))?;
        let seat = &self.election;
        let call = ScriptCall::new(&ELECTION_RESIGN)
            .key(&seat.keys.lock)
            .key(&*seat.queue)
            .key(&*seat.values)
            .key(&*seat.registrations)
            .arg(self.held.owner().as_str())
            .arg(&*seat.channel_prefix)
            .arg(&seat.keys.channel)
            .arg(&*core.release_message(Wake::One))
            .arg(&*value);
        let reply: i64 = node.run_replicated(&call).await?;
        match reply {
            1 => {
                self.held.given_up();
                // The script's announcement is this client's, skipped here as an echo: its
                // own observers are woken directly. The chosen candidate, woken on its own
                // channel by a message of no client's, hears it here too if it is ours.
                core.wake_local(&seat.keys.channel, Wake::One);
                Ok(true)
            }
            2 => Ok(false),
            0 => Err(Error::NotHeld {
                name: self.name().to_owned(),
            }),
            other => Err(unexpected("resign", format!("{other}"))),
        }
    }

    /// Steps down at once: the next candidate is woken and elected without waiting for a
    /// ttl, and observers see nobody lead until then. (With
    /// [`with_min_hold`](crate::Election::with_min_hold), a step down before the minimum
    /// leaves the leadership to end at the minimum instead, as every primitive's release
    /// does; candidates and observers then learn of it when that lease ends.)
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`](crate::LockGuard::release).
    pub async fn resign(self) -> Result<()> {
        self.release().await
    }

    /// The same as [`resign`](Self::resign): the surface every guard shares.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`](crate::LockGuard::release).
    pub async fn release(self) -> Result<()> {
        self.held.release().await.map(|_| ())
    }
}
