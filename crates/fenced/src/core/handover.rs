//! One-round-trip handover: a release by this client gives an exclusive lock straight to its
//! next local waiter, in the release's own script. Without it a handoff is a release round
//! trip, a wake-up, and the waiter's acquire round trip; with it, one script and a message
//! inside the process.
//!
//! Invariants:
//! 1. Only an exclusive lease is handed over, and only within one client: a plain lock to
//!    the head of the name's local queue, a fair lock to the head of its queue in Redis when
//!    that head is a waiter of this client (the script checks; otherwise it releases as
//!    usual in the same step). The waiter's [`Offer`] (an owner token, its ttl, and where
//!    the lease goes) stands while it waits. A waiter keeps one offer at a time, so a
//!    handover in flight is never orphaned by a newer offer.
//! 2. The lock never becomes free in between: the script replaces the owner and mints a new
//!    fencing token (above the old one) in one step, and publishes nothing.
//! 3. No process keeps a contended lock to itself: the plain lock's script hands over only
//!    while no other client is subscribed to the lock's releases and no fair waiter is
//!    queued, and a name is handed over at most [`MAX_IN_A_ROW`] times in a row (counted per
//!    client and name, across queues) before an ordinary release lets everyone try. A fair
//!    lock follows its queue in Redis, so it needs no such limit.
//! 4. The handed lease's validity counts from before the script was sent (as an acquire's).
//!    Its renewal starts when the waiter takes it ([`Handed::take`]) and the core adopts it:
//!    a waiter that is never polled again does not keep the lease alive past its ttl.
//! 5. Nothing handed over is left without an owner: a [`Handed`] lease nobody takes (its waiter
//!    went away) is released in the background, and a handover of unknown outcome (its reply
//!    lost, or the releasing future dropped mid-call) abandons the successor's owner in the
//!    background; the script refuses a successor whose tombstone exists.
//! 6. After a handover of unknown outcome the holder finishes with an ordinary release, read as
//!    a retry (`cleanup.rs`, invariant 2). A fair waiter that the lost handover took off the
//!    queue finds the lock held by its own offer until the clean-up frees it, and polls (at
//!    most the poll interval); it then queues again at the back.
//! 7. With replica acknowledgements (`ClientBuilder::replica_acks`) nothing is handed over:
//!    a handed grant reaches its waiter in the same step, before a `WAIT` could say whether a
//!    failover would keep it, and it could not be taken back. Every grant then goes through
//!    an acquire, which gives back what the replicas did not acknowledge.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::core::lease::Holds;
use crate::kind::LeaseKind;
use crate::token::{FencingToken, OwnerToken};

/// How many handovers of one name a client makes in a row before an ordinary release.
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
    /// The waiter's least and most hold.
    pub(crate) holds: Holds,
    /// The waiter's id in a fair queue (`None` for a plain lock's waiter).
    pub(crate) waiter: Option<Arc<str>>,
    /// Where the lease goes.
    pub(crate) to: oneshot::Sender<Handed>,
}

impl Offer {
    /// False once the waiter stopped waiting.
    pub(crate) fn is_live(&self) -> bool {
        !self.to.is_closed()
    }
}

/// What a handover grants its waiter: the lease, before the core adopts it.
#[derive(Clone)]
pub(crate) struct Grant {
    pub(crate) kind: Arc<dyn LeaseKind>,
    pub(crate) owner: OwnerToken,
    pub(crate) name: Arc<str>,
    pub(crate) token: FencingToken,
    pub(crate) requested_at: Instant,
    pub(crate) ttl: Duration,
    pub(crate) auto_renew: bool,
    pub(crate) holds: Holds,
}

/// What gives back a handed lease nobody took.
type GiveBack = Box<dyn FnOnce(&Grant) + Send>;

/// A lease handed over, on its way to its waiter (invariants 4 and 5).
pub(crate) struct Handed {
    grant: Grant,
    /// Gives the lease back in the background should nobody take it (its waiter went away).
    unclaimed: Option<GiveBack>,
}

impl Handed {
    /// A lease handed over; `unclaimed` gives it back if it is dropped untaken.
    pub(crate) fn new(grant: Grant, unclaimed: impl FnOnce(&Grant) + Send + 'static) -> Self {
        Handed {
            grant,
            unclaimed: Some(Box::new(unclaimed)),
        }
    }

    /// The waiter takes the lease; its holder adopts it, and from then on it is renewed and
    /// guarded like any other.
    pub(crate) fn take(mut self) -> Grant {
        self.unclaimed = None;
        self.grant.clone()
    }
}

impl Drop for Handed {
    fn drop(&mut self) {
        if let Some(give_back) = self.unclaimed.take() {
            give_back(&self.grant);
        }
    }
}
