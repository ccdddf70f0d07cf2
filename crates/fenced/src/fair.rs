//! [`FairLock`]: an exclusive lock granted in FIFO order across processes.

use std::fmt;
use std::sync::Arc;

use tracing::Instrument;

use crate::core::acquire::{AcquireRequest, OfferFrom};
use crate::core::{Core, Held, LeaseOptions};
use crate::error::Result;
use crate::guard::LockGuard;
use crate::keys::LockKeys;
use crate::kind::HandOverTo;
use crate::kind::exclusive::Exclusive;
use crate::kind::fair::FairLease;
use crate::options::ttl_millis;
use crate::token::OwnerToken;

/// An exclusive lock granted in the order its waiters asked, across processes.
///
/// Waiters queue in Redis; only the head of the queue may take the lock, and a release
/// wakes only the head (on a channel of its own), not every waiter. A waiter that gives up
/// (its deadline, or its future dropped) leaves the queue at once; one whose process died
/// leaves when its registration ends, measured by the Redis server's clock (`TIME`), never by
/// comparing clients' clocks (Redisson's fair lock has a long record of hangs from that).
///
/// The lock key is the plain lock's, so a `FairLock` and a [`Lock`](crate::Lock) of the same
/// name exclude each other (a plain waiter does not queue, so it may go first).
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// let client = fenced::Client::connect(&url).await?;
/// let turnstile = client.fair_lock("turnstile");
/// let guard = turnstile.acquire().await?;
/// // ... waiters of every process now queue, and get the lock in order ...
/// guard.release().await?;
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct FairLock {
    core: Arc<Core>,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    queue: Arc<str>,
    registrations: Arc<str>,
    channel_prefix: Arc<str>,
    opts: LeaseOptions,
}

impl fmt::Debug for FairLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.name)
            .field("ttl", &self.opts.ttl(&self.core))
            .field("wait", &self.opts.wait)
            .finish()
    }
}

impl FairLock {
    pub(crate) fn new(core: &Arc<Core>, name: String) -> Self {
        let namespace = core.options().namespace.clone();
        Self::in_namespace(core, &namespace, name)
    }

    /// A fair lock whose keys start with `namespace` instead of the client's (an election's
    /// queue, `election/mod.rs`).
    pub(crate) fn in_namespace(core: &Arc<Core>, namespace: &str, name: String) -> Self {
        let core = core.clone();
        let keys = LockKeys::new(namespace, &name);
        FairLock {
            queue: keys.fair_queue().into(),
            registrations: format!("{}:queue:ends", keys.lock).into(),
            channel_prefix: format!("{}:fair:", keys.lock).into(),
            keys: Arc::new(keys),
            core,
            name: name.into(),
            opts: LeaseOptions::default(),
        }
    }

    crate::core::held::lease_option_setters!();

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its name, shared.
    pub(crate) fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// Its keys.
    pub(crate) fn keys(&self) -> &Arc<LockKeys> {
        &self.keys
    }

    /// Its queue (list of waiter ids).
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    pub(crate) fn queue(&self) -> &str {
        &self.queue
    }

    /// A waiter is woken on this prefix and its id.
    pub(crate) fn channel_prefix(&self) -> &str {
        &self.channel_prefix
    }

    /// Its waiters' registrations (hash: waiter id -> end of its registration, server ms).
    pub(crate) fn registrations(&self) -> &str {
        &self.registrations
    }

    /// The kind of a lease resumed from a ticket: a holder, no longer a waiter.
    pub(crate) fn ticket_kind(&self) -> FairLease {
        self.kind(&Arc::from(""), false)
    }

    /// The lease of waiter `waiter` (`queues`: it registers in the queue while it waits).
    pub(crate) fn kind(&self, waiter: &Arc<str>, queues: bool) -> FairLease {
        let options = self.core.options();
        FairLease {
            exclusive: Exclusive {
                name: self.name.clone(),
                keys: self.keys.clone(),
                fence_retention_ms: self.core.fence_retention_ms(),
                counted: true,
            },
            queue: self.queue.clone(),
            registrations: self.registrations.clone(),
            channel_prefix: self.channel_prefix.clone(),
            waiter: waiter.clone(),
            offer_half: None,
            // A waiter retries at least every poll_max (and at every release); a few of
            // those, and the place of one that died is given up.
            registration_ms: if queues {
                ttl_millis(options.poll_max * 3 + options.timeout * 2)
            } else {
                0
            },
        }
    }

    /// Takes the lock in FIFO order, waiting by the [`WaitPolicy`](crate::WaitPolicy).
    ///
    /// # Errors
    ///
    /// As [`Lock::acquire`](crate::Lock::acquire), whose
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) comes before this waiter queues.
    ///
    /// # Cancel safety
    ///
    /// Cancelling gives up the place in the queue at once (in the background), and an attempt
    /// in flight is released if it took the lock.
    pub async fn acquire(&self) -> Result<LockGuard> {
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        self.core
            .refuse_waiting_for_itself("fair lock", &self.name, &self.keys.lock, 1, 1)
            .await?;
        let waiter: Arc<str> = OwnerToken::fresh()?.as_str()[..16].into();
        let channel = format!("{}{waiter}", self.channel_prefix);
        // A holder in this client hands the lock straight to this waiter when it is the head
        // of the queue in Redis, under an owner whose first half is this wait's.
        let offer_half: Arc<str> = OwnerToken::fresh()?.as_str()[..16].into();
        let req = AcquireRequest {
            hand_over: Some(OfferFrom {
                to: HandOverTo::FairHead(&self.channel_prefix),
                fair: Some((waiter.clone(), offer_half.clone())),
            }),
            ..self.opts.request(&self.name, &channel, ttl, 1)
        };
        // Until granted, this waiter has a place in Redis: leave it if the wait ends.
        let mut place = Place {
            lock: self,
            waiter: Some(waiter.clone()),
        };
        let span = tracing::debug_span!("fenced.acquire", fenced.name = %self.name, fenced.primitive = "fair_lock", fenced.token = tracing::field::Empty);
        let held: Held = self
            .core
            .acquire_with(&req, || {
                let kind = FairLease {
                    offer_half: Some(offer_half.clone()),
                    ..self.kind(&waiter, true)
                };
                Ok((kind, OwnerToken::fresh()?))
            })
            .instrument(span)
            .await?;
        place.waiter = None;
        Ok(LockGuard::new(held))
    }

    /// One attempt, never waits and never queues: `Some` only when the lock is free and no
    /// one is queued for it.
    ///
    /// # Errors
    ///
    /// As [`Lock::try_acquire`](crate::Lock::try_acquire).
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        let waiter: Arc<str> = OwnerToken::fresh()?.as_str()[..16].into();
        let channel = format!("{}{waiter}", self.channel_prefix);
        let req = self.opts.request(&self.name, &channel, ttl, 1);
        let next = || Ok((self.kind(&waiter, false), OwnerToken::fresh()?));
        let granted = self.core.try_with(&req, next).await?;
        Ok(granted.map(LockGuard::new))
    }
}

/// A waiter's place in the queue, given up when dropped still armed.
struct Place<'a> {
    lock: &'a FairLock,
    waiter: Option<Arc<str>>,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let Some(waiter) = self.waiter.take() else {
            return;
        };
        // A fresh owner nobody holds: the clean-up only leaves the queue (its tombstone for
        // that owner expires unused).
        if let Ok(nobody) = OwnerToken::fresh() {
            let kind = Arc::new(self.lock.kind(&waiter, true));
            let patience = self.lock.core.timeout() * 2;
            self.lock.core.abandon_in_background(kind, nobody, patience);
        }
    }
}

impl FairLock {
    /// Waiters in the queue now (including any whose registration has ended but who have not
    /// reached the head yet).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name; transport
    /// errors.
    pub async fn queued(&self) -> Result<u64> {
        crate::keys::validate_name("lock", &self.name)?;
        self.core
            .node()?
            .query("fair queue", redis::cmd("LLEN").arg(&*self.queue))
            .await
    }
}

/// Scoped runs.
impl FairLock {
    crate::guard::scoped_run!("the lock, taken in its turn", with_lock => acquire);
}
