//! [`Leadership`]: a won election, held like a lock.

use std::fmt;
use std::sync::{Arc, Mutex};

use super::record::{Seat, redlock_refusal};
use crate::core::{Held, Wake};
use crate::error::{Error, Result};
use crate::scripts::{ELECTION_PROCLAIM, ScriptCall};
use crate::token::FencingToken;
use crate::util::lock_unpoisoned;

/// A won election: this candidate leads until it resigns or its lease is lost.
///
/// It has the surface of every guard ([`LeaseGuard`](crate::LeaseGuard) and
/// [`FencedGuard`](crate::FencedGuard)): the lease is renewed in the background while it
/// lives, [`lost`](Self::lost) fires if the leadership ends, and its
/// [`term`](Self::term) is its fencing token. Dropping it steps down in the background.
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
