//! One-round-trip handover: a release by this client gives an exclusive lock straight to its
//! next local waiter, in the release's own script. Without it a handoff is a release round
//! trip, a wake-up, and the waiter's acquire round trip; with it, one script and a message
//! inside the process.
//!
//! Invariants:
//! 1. Only a plain exclusive lease is handed over, only within one client, and only to the
//!    head of the name's local queue, which posts an [`Offer`] (a fresh owner token, its ttl,
//!    and where the lease goes) after an attempt found the lock busy. A head keeps one offer
//!    at a time, so a handover in flight is never orphaned by a newer offer.
//! 2. The lock never becomes free in between: the script replaces the owner and mints a new
//!    fencing token (above the old one) in one step, and publishes nothing.
//! 3. No process keeps a contended lock to itself: the script hands over only while no other
//!    client is subscribed to the lock's releases, and a queue hands over at most
//!    [`MAX_IN_A_ROW`] times in a row before an ordinary release lets everyone try.
//! 4. The handed lease's validity counts from before the script was sent (as an acquire's).
//! 5. An offer whose waiter has gone (granted otherwise, gave up, cancelled) is not used; one
//!    that goes while the script runs gets its lease released in the background, like a
//!    dropped guard.
//! 6. A handover of unknown outcome (its reply lost) abandons the successor's owner in the
//!    background, and the holder finishes with an ordinary release, read as a retry
//!    (`cleanup.rs`, invariant 2).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::core::held::Held;
use crate::token::OwnerToken;

/// How many handovers one queue makes in a row before an ordinary release.
pub(crate) const MAX_IN_A_ROW: u32 = 16;

/// A local waiter's standing offer to take the lock straight from its holder.
pub(crate) struct Offer {
    /// The owner token the waiter will hold the lease under.
    pub(crate) owner: OwnerToken,
    /// The lease's name, for the guard.
    pub(crate) name: Arc<str>,
    /// The lease length the waiter asked for.
    pub(crate) ttl: Duration,
    /// Whether the waiter's lease is renewed in the background.
    pub(crate) auto_renew: bool,
    /// Where the lease goes.
    pub(crate) to: oneshot::Sender<Held>,
}

impl Offer {
    /// False once the waiter stopped waiting.
    pub(crate) fn is_live(&self) -> bool {
        !self.to.is_closed()
    }
}
