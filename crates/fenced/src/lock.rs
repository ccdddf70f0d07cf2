//! [`Lock`]: an exclusive lease on one name, and how a caller waits for it.

use std::fmt;
use std::sync::Arc;

use tracing::Instrument;

use crate::core::acquire::{AcquireRequest, OfferFrom};
use crate::core::{Core, LeaseOptions};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::guard::{Lease, LockGuard};
use crate::keys::LockKeys;
use crate::kind::HandOverTo;
use crate::kind::exclusive::Exclusive;
use crate::token::OwnerToken;

/// An exclusive, time-bounded lease on one name, with a fencing token per grant.
///
/// Made by [`Client::lock`](crate::Client::lock); a cheap handle that can be cloned and kept. Settings are chosen
/// with the `with_*` methods and checked when the lock is used, before anything is sent.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// use std::time::Duration;
/// use fenced::{Client, WaitPolicy};
///
/// let client = Client::connect(&url).await?;
/// let lock = client
///     .lock("product:10100101:shopping")
///     .with_ttl(Duration::from_secs(10))
///     .with_wait(WaitPolicy::up_to(Duration::from_secs(5)));
///
/// let guard = lock.acquire().await?;
/// // ... work; the lease is renewed in the background while the guard lives ...
/// assert!(lock.try_acquire().await?.is_none(), "held by us already");
/// guard.release().await?;
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct Lock {
    core: Arc<Core>,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    opts: LeaseOptions,
    /// Grants may count on the fence by transaction (`Exclusive::counted`).
    counted: bool,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("ttl", &self.ttl())
            .field("auto_renew", &self.opts.auto_renew)
            .field("wait", &self.opts.wait)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(core: &Arc<Core>, name: String) -> Self {
        let core = core.clone();
        let keys = Arc::new(LockKeys::new(&core.options().namespace, &name));
        Lock {
            core,
            name: name.into(),
            keys,
            opts: LeaseOptions::default(),
            counted: true,
        }
    }

    /// Grants always by script, so the fence stays the last grant's token: for a cache
    /// entry's lock, whose store compares its token with the fence.
    pub(crate) fn granted_by_script(mut self) -> Self {
        self.counted = false;
        self
    }

    crate::core::held::lease_option_setters!();

    /// The same settings on another name (a stripe of a [`StripedLock`](crate::StripedLock)).
    pub(crate) fn renamed(&self, name: String) -> Lock {
        let keys = Arc::new(LockKeys::new(&self.core.options().namespace, &name));
        Lock {
            name: name.into(),
            keys,
            ..self.clone()
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its parts, for [`unfenced`](Self::unfenced).
    pub(crate) fn into_parts(self) -> (Arc<Core>, Arc<str>, Arc<LockKeys>, LeaseOptions) {
        (self.core, self.name, self.keys, self.opts)
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    pub(crate) fn keys(&self) -> &LockKeys {
        &self.keys
    }

    /// One attempt, never waits: `Some(guard)` when the lease is ours, `None` when somebody
    /// else holds it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] before any Redis call; [`Error::Unavailable`],
    /// [`Error::Timeout`] or [`Error::Redis`] when Redis fails. After a timeout the attempt may
    /// have taken the lease; it is then released in the background.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after the request was sent releases whatever it may have taken, in
    /// the background.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        let req = self.opts.request(&self.name, &self.keys.channel, ttl, 1);
        let granted = self.core.try_with(&req, || self.next_attempt()).await?;
        Ok(granted.map(LockGuard::new))
    }

    /// Takes the lease, waiting for it by the lock's [`WaitPolicy`](crate::WaitPolicy).
    ///
    /// A waiter is woken when the holder releases (a notification published by the release),
    /// and polls with jittered backoff capped by the holder's remaining lease when no
    /// notification comes. Waiters of one process queue in FIFO order and only the first one
    /// sends commands to Redis.
    ///
    /// A lock is not re-entrant: a task that holds the name asks for it again in vain. That
    /// acquire fails at once instead of waiting for itself: see [`Error::WouldDeadlock`] for
    /// the rule (a guard counts as held by the task that acquired it). Other tasks of this
    /// client wait for the holder as usual.
    ///
    /// # Errors
    ///
    /// [`Error::WouldDeadlock`], before anything is sent, when a guard this task acquired
    /// through this client holds the name (any lock of it: plain, fair, re-entrant, unfenced,
    /// multi, or a read-write lock's writer) and is renewed until given back.
    /// [`Error::NotAcquired`] when the deadline or the attempt limit is reached, with how
    /// long it waited; [`Error::InvalidArgument`] for bad settings or a deadline that overflows
    /// the clock. Transient failures (a reset connection, a timeout, `LOADING`, a failover) are
    /// retried with jittered backoff within the deadline and the attempt limit, and the last
    /// one ([`Error::Unavailable`], [`Error::Timeout`]) is returned when they run out; with
    /// [`WaitPolicy::FOREVER`](crate::WaitPolicy::FOREVER) the wait goes on until Redis answers. Permanent ones
    /// ([`Error::WrongType`], naming a key another program wrote in another type;
    /// [`Error::Redis`]; [`Error::Permission`]) end the wait at once.
    ///
    /// # Cancel safety
    ///
    /// Cancelling gives up the place in the queue; an attempt in flight is released in the
    /// background if it took the lease.
    pub async fn acquire(&self) -> Result<LockGuard> {
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        self.core
            .refuse_waiting_for_itself("lock", &self.name, &self.keys.lock, 1, 1)
            .await?;
        let span = tracing::debug_span!("fenced.acquire", fenced.name = %self.name, fenced.primitive = "lock", fenced.token = tracing::field::Empty);
        self.core
            .acquire_with(
                &AcquireRequest {
                    hand_over: Some(OfferFrom {
                        to: HandOverTo::LocalQueue(&self.keys.channel),
                        fair: None,
                    }),
                    ..self.opts.request(&self.name, &self.keys.channel, ttl, 1)
                },
                || self.next_attempt(),
            )
            .instrument(span)
            .await
            .map(LockGuard::new)
    }

    /// The lease kind and a fresh owner for one attempt.
    fn next_attempt(&self) -> Result<(Exclusive, OwnerToken)> {
        Ok((self.exclusive_kind(), OwnerToken::fresh()?))
    }

    /// The lease kind of this name.
    pub(crate) fn exclusive_kind(&self) -> Exclusive {
        Exclusive {
            name: self.name.clone(),
            keys: self.keys.clone(),
            fence_retention_ms: self.core.fence_retention_ms(),
            counted: self.counted,
        }
    }

    /// Runs `work` while holding the lock: acquires (waiting by the policy), runs the work,
    /// cancels it if the lease is lost, and releases at the end.
    ///
    /// `work` receives the [`Lease`], whose fencing token should go with every write the work
    /// makes, and which it can check between steps.
    ///
    /// # Errors
    ///
    /// The errors of [`acquire`](Self::acquire); [`Error::LeaseLost`] when the lease ended
    /// before the work finished (the work's future is then dropped at its next await point) or
    /// when the release found the lease already gone. A release that fails only because Redis
    /// is unreachable does not hide the work's result: it is logged, and the lease expires by
    /// its ttl.
    ///
    /// # Examples
    ///
    /// ```
    /// # fenced_testkit::doctest(|test_url| async move {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// # let url = test_url;
    /// let client = fenced::Client::connect(&url).await?;
    /// let stock = client.resource("stock:10100101");
    /// let sold = client
    ///     .lock("product:10100101:shopping")
    ///     .with_lock(|lease| async move {
    ///         stock.set(lease.fencing_token(), "count", "19").await
    ///     })
    ///     .await??;
    /// assert_eq!(sold, fenced::resource::FencedWrite::Applied);
    /// # Ok(()) });
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        crate::guard::scoped(self.acquire().await?, work).await
    }
}
