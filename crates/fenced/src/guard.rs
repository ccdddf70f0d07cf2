//! [`LockGuard`] (the held lease, released on drop) and [`Lease`] (what the work needs to know).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::options::{ttl_millis, validate_ttl};
use crate::protocol::ReleaseReply;
use crate::renew::{LeaseState, release_with_retry};
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
    /// # Errors
    ///
    /// [`Error::NotHeld`] if the lease is already gone (it is not re-created);
    /// [`Error::LeaseLost`] if it was declared lost before;
    /// [`Error::InvalidArgument`] for a bad ttl; transport errors as usual.
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
        let requested_at = Instant::now();
        let extended = self
            .client
            .inner
            .protocol
            .extend(&self.keys.lock, owner, ttl_millis(ttl))
            .await?;
        if extended {
            self.lease.state.renewed(requested_at, ttl);
            self.lease.state.set_ttl(ttl);
            self.client
                .inner
                .renewer
                .extended(self.id, requested_at, ttl);
            Ok(())
        } else {
            self.lease.state.lost.cancel();
            Err(self.not_held())
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
        // Stop renewing first, so the renewal of a lease being released is not mistaken for loss.
        inner.renewer.untrack(self.id);
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

    /// True once the lease is lost, or its validity deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    /// `Err(LeaseLost)` once the lease is lost: a checkpoint for long work.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when [`is_lost`](Self::is_lost) is true.
    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            return Err(Error::LeaseLost {
                name: self.name.to_string(),
                fencing_token: self.fencing_token,
            });
        }
        Ok(())
    }

    /// Completes when the lease is lost: a renewal was refused, or the validity deadline
    /// passed without a successful renewal (also when Redis is unreachable). Completes at
    /// once if that already happened. It does not complete on a normal release.
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.state.lost.clone().cancelled_owned()
    }

    /// A token cancelled when the lease is lost, to hand to code that takes a
    /// `CancellationToken`. Cancelling it yourself does not affect the lease.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.state.lost.child_token()
    }

    /// The moment (monotonic clock) until which the lease is certainly ours, as of the last
    /// successful grant or renewal.
    pub fn valid_until(&self) -> Instant {
        self.state.valid_until()
    }

    /// How much of the lease is certainly left (zero once past the deadline).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }
}
