//! [`LockGuard`]: a held [`Lock`](crate::Lock), released on drop. [`Lease`] is the view of it
//! the work gets (shared by every primitive, defined in the core).

use std::fmt;
use std::time::Duration;

use crate::core::Held;
pub use crate::core::Lease;
use crate::error::Result;

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
    held: Held,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("fencing_token", &self.fencing_token())
            .field("owner", &"<redacted>")
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(held: Held) -> Self {
        LockGuard { held }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.held.lease().name()
    }

    crate::core::held::lease_accessors!();

    /// Sets the lease to `ttl` from now (longer or shorter), and uses `ttl` for later renewals.
    ///
    /// The guard never claims more than Redis grants: from the moment the request is sent, a
    /// shorter ttl counts (Redis may apply it even if the reply is lost), and a longer one
    /// counts only once Redis confirms it. Renewals and extends reach Redis in epoch order,
    /// so a late renewal for the old ttl can never undo this one.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) if the lease is already gone (it is not
    /// re-created); [`Error::LeaseLost`](crate::Error::LeaseLost) if it was declared lost
    /// before; [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad ttl;
    /// transport errors as usual (the outcome is then unknown, and the deadline stays at the
    /// earlier of the old and the new one).
    ///
    /// # Cancel safety
    ///
    /// If cancelled after the request was sent, the outcome is unknown and is treated as the
    /// error case above.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        self.held.extend(ttl).await
    }

    /// Gives the lease back and wakes the next waiter.
    ///
    /// A release whose reply was lost is retried; the retry recognises the first attempt's
    /// effect and does not report a false "not held".
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the lease had already expired or been
    /// taken over: nothing was deleted (another holder's lock is never touched), and your
    /// exclusive access had ended before this call. Transport errors when Redis cannot be
    /// reached; the lease then expires by its ttl.
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the release may or may not have happened; the lease is no longer renewed
    /// and expires by its ttl at the latest.
    pub async fn release(self) -> Result<()> {
        self.held.release().await.map(|_| ())
    }
}
