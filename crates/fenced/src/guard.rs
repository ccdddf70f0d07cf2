//! [`LockGuard`] (the held lease, released on drop) and [`Lease`] (what the work needs to know).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lease::{ExpiryReply, LeaseState};
use crate::options::{ttl_millis, validate_ttl};
use crate::protocol::{ReleaseReply, RenewItem};
use crate::renew::release_with_retry;
use crate::token::{FencingToken, OwnerToken};

/// A held lock. Owned, `Send + 'static`: move it into a task, keep it in a struct.
///
/// While the guard lives, its lease is renewed in the background (unless renewal was turned
/// off). Call [`release`](Self::release) to give it back and learn whether it was still held;
/// dropping the guard releases it in the background instead.
///
/// Watch [`lost`](Self::lost) (or check [`is_lost`](Self::is_lost)): it fires when a renewal
/// is refused or the validity deadline passes without one. From then on somebody else may
/// hold the lock, and only writes fenced with [`fencing_token`](Self::fencing_token) stay safe.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    client: Client,
    keys: Arc<LockKeys>,
    owner: Option<OwnerToken>,
    id: u64,
    lease: Lease,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.lease.name)
            .field("fencing_token", &self.lease.fencing_token)
            .field("owner", &"<redacted>")
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(
        client: Client,
        keys: Arc<LockKeys>,
        owner: OwnerToken,
        id: u64,
        lease: Lease,
    ) -> Self {
        LockGuard {
            client,
            keys,
            owner: Some(owner),
            id,
            lease,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lease.name
    }

    /// This grant's fencing token: send it with every write to the protected resource.
    pub fn fencing_token(&self) -> FencingToken {
        self.lease.fencing_token
    }

    /// A cheap handle on this lease (token, deadline, lost signal) to pass to the work.
    pub fn lease(&self) -> Lease {
        self.lease.clone()
    }

    /// True once the lease is lost, or its validity deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Completes when the lease is lost. See [`Lease::lost`].
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.lease.lost()
    }

    /// The moment (monotonic clock) until which this lease is certainly ours, as of the last
    /// successful grant or renewal.
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// Sets the lease to `ttl` from now (longer or shorter), and uses `ttl` for later renewals.
    ///
    /// The guard never claims more than Redis grants: from the moment the request is sent, a
    /// shorter ttl counts (Redis may apply it even if the reply is lost), and a longer one
    /// counts only once Redis confirms it. Renewals and extends reach Redis in epoch order,
    /// so a late renewal for the old ttl can never undo this one.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] if the lease is already gone (it is not re-created);
    /// [`Error::LeaseLost`] if it was declared lost before;
    /// [`Error::InvalidArgument`] for a bad ttl; transport errors as usual (the outcome is
    /// then unknown, and the deadline stays at the earlier of the old and the new one).
    ///
    /// # Cancel safety
    ///
    /// If cancelled after the request was sent, the outcome is unknown and is treated as the
    /// error case above.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        let Some(owner) = &self.owner else {
            return Err(self.not_held());
        };
        if self.lease.state.lost.is_cancelled() {
            // Declared lost already (and no longer renewed): extending now would make a
            // lease nobody watches. Acquire again instead.
            return Err(Error::LeaseLost {
                name: self.lease.name.to_string(),
                fencing_token: self.lease.fencing_token,
            });
        }
        let inner = &self.client.inner;
        let change = self.lease.state.begin(Some(ttl));
        inner.renewer.reschedule(self.id);
        let reply = inner
            .protocol
            .extend(&RenewItem {
                keys: &self.keys,
                owner,
                ttl_ms: ttl_millis(ttl),
                epoch: change.epoch,
            })
            .await?;
        self.lease.state.settle(&change, reply);
        match reply {
            // Superseded: a newer extend (from another task) was applied after this one.
            ExpiryReply::Applied | ExpiryReply::Superseded => {
                inner.renewer.reschedule(self.id);
                Ok(())
            }
            ExpiryReply::NotHeld => Err(self.not_held()),
        }
    }

    /// Gives the lease back and wakes the next waiter.
    ///
    /// A release whose reply was lost is retried; the retry recognises the first attempt's
    /// effect and does not report a false "not held".
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the lease had already expired or been taken over: nothing was
    /// deleted (another holder's lock is never touched), and your exclusive access had ended
    /// before this call. Transport errors when Redis cannot be reached; the lease then expires
    /// by its ttl.
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the release may or may not have happened; the lease is no longer renewed
    /// and expires by its ttl at the latest.
    pub async fn release(mut self) -> Result<()> {
        let Some(owner) = self.owner.take() else {
            return Err(self.not_held());
        };
        let inner = &self.client.inner;
        // Stop renewing first, so the renewal of a lease being released is not mistaken for
        // loss; and end the lease for every clone before it is given back.
        inner.renewer.untrack(self.id);
        self.lease.state.end();
        let reply = match release_with_retry(&inner.protocol, &self.keys, &owner).await {
            Ok(reply) => reply,
            Err(e) => {
                if e.is_transient() {
                    // Keep trying in the background, so the lock is freed once Redis answers.
                    let ttl = self.lease.state.ttl();
                    inner
                        .renewer
                        .release_in_background(self.id, self.keys.clone(), owner, ttl);
                }
                return Err(e);
            }
        };
        tracing::debug!(lock = %self.lease.name, ?reply, "fenced: released");
        match reply {
            ReleaseReply::Released | ReleaseReply::AlreadyReleased => {
                inner.waiters.released(&self.keys.channel);
                Ok(())
            }
            ReleaseReply::NotHeld => {
                self.lease.state.lost.cancel();
                Err(self.not_held())
            }
        }
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.lease.name.to_string(),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            self.lease.state.end();
            self.client.inner.renewer.release_in_background(
                self.id,
                self.keys.clone(),
                owner,
                self.lease.state.ttl(),
            );
        }
    }
}

/// What the protected work needs to know about its lease: a cheap, cloneable, `Send + 'static`
/// view of a held lock.
///
/// Use it cooperatively, as the seeds' "if interrupted, break" loop does:
///
/// ```
/// # fenced_testkit::doctest(|url| async move {
/// let client = fenced::Client::connect(&url).await?;
/// let guard = client.lock("nightly-report").acquire().await?;
/// let lease = guard.lease();
/// for step in 0..3 {
///     lease.check()?; // stop as soon as the lease is gone
///     println!("step {step} with token {}", lease.fencing_token());
/// }
/// guard.release().await?;
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct Lease {
    name: Arc<str>,
    fencing_token: FencingToken,
    state: Arc<LeaseState>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.name)
            .field("fencing_token", &self.fencing_token)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Lease {
    pub(crate) fn new(name: Arc<str>, fencing_token: FencingToken, state: Arc<LeaseState>) -> Self {
        Lease {
            name,
            fencing_token,
            state,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This grant's fencing token.
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing_token
    }

    /// True once the lease is over: lost, past its validity deadline, or given back by its
    /// guard (released or dropped).
    pub fn is_lost(&self) -> bool {
        self.state.is_over()
    }

    /// True once the guard gave the lease back ([`LockGuard::release`] or drop), as opposed to
    /// losing it.
    pub fn is_released(&self) -> bool {
        self.state.is_released()
    }

    /// `Err` once the lease is over: a checkpoint for long work.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseEnded`] when the guard released the lease (or was dropped) while this
    /// clone was still in use; [`Error::LeaseLost`] when the lease was lost or its deadline
    /// passed.
    pub fn check(&self) -> Result<()> {
        if self.state.is_released() {
            return Err(Error::LeaseEnded {
                name: self.name.to_string(),
                fencing_token: self.fencing_token,
            });
        }
        if self.is_lost() {
            return Err(Error::LeaseLost {
                name: self.name.to_string(),
                fencing_token: self.fencing_token,
            });
        }
        Ok(())
    }

    /// Completes when the lease is over: a renewal was refused, the validity deadline passed
    /// without a successful renewal (also when Redis is unreachable), or the guard released
    /// the lease or was dropped. Completes at once if that already happened, so work holding
    /// a clone never runs on past its guard.
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.state.lost.clone().cancelled_owned()
    }

    /// A token cancelled when the lease is over (see [`lost`](Self::lost)), to hand to code
    /// that takes a `CancellationToken`. Cancelling it yourself does not affect the lease.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.state.lost.child_token()
    }

    /// The moment (monotonic clock) until which the lease is certainly ours: as of the last
    /// grant or renewal Redis confirmed, never later than a shorter `extend` of unknown
    /// outcome, and never later than the moment the guard gave it back.
    pub fn valid_until(&self) -> Instant {
        self.state.valid_until()
    }

    /// How much of the lease is certainly left (zero once past the deadline or given back).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }
}
