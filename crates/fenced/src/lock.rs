//! [`Lock`]: an exclusive lease on one name, and how a caller waits for it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::{Lease, LockGuard};
use crate::keys::{LockKeys, validate_name};
use crate::lease::LeaseState;
use crate::options::{ttl_millis, validate_ttl};
use crate::protocol::AcquireReply;
use crate::renew::Tracked;
use crate::token::OwnerToken;
use crate::wait::{Backoff, WaitPolicy};

/// An exclusive, time-bounded lease on one name, with a fencing token per grant.
///
/// Made by [`Client::lock`]; a cheap handle that can be cloned and kept. Settings are chosen
/// with the `with_*` methods and checked when the lock is used, before anything is sent.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|url| async move {
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
    client: Client,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    ttl: Option<Duration>,
    auto_renew: bool,
    wait: WaitPolicy,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("ttl", &self.ttl())
            .field("auto_renew", &self.auto_renew)
            .field("wait", &self.wait)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(client: Client, name: String) -> Self {
        let keys = Arc::new(LockKeys::new(&client.inner.options.namespace, &name));
        Lock {
            client,
            name: name.into(),
            keys,
            ttl: None,
            auto_renew: true,
            wait: WaitPolicy::forever(),
        }
    }

    /// Lease length (default: the client's, 30s unless configured). At least
    /// [`MIN_TTL`](crate::MIN_TTL), at most [`MAX_TTL`](crate::MAX_TTL).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Whether held leases are renewed automatically (default `true`). Without renewal the
    /// lease ends after its ttl and the guard's lost signal fires at its validity deadline.
    pub fn with_auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = on;
        self
    }

    /// How long [`acquire`](Self::acquire) waits (default: no limit).
    pub fn with_wait(mut self, policy: WaitPolicy) -> Self {
        self.wait = policy;
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn keys(&self) -> &LockKeys {
        &self.keys
    }

    /// The lease length this lock asks for.
    pub fn ttl(&self) -> Duration {
        self.ttl.unwrap_or(self.client.inner.options.default_ttl)
    }

    fn checked_ttl(&self) -> Result<Duration> {
        validate_name("lock", &self.name)?;
        let ttl = self.ttl();
        validate_ttl(ttl)?;
        Ok(ttl)
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
        let ttl = self.checked_ttl()?;
        let span = tracing::debug_span!("fenced.try_acquire", lock = %self.name);
        async move { Ok(self.attempt(ttl).await?.ok()) }
            .instrument(span)
            .await
    }

    /// Takes the lease, waiting for it by the lock's [`WaitPolicy`].
    ///
    /// A waiter is woken when the holder releases (a notification published by the release),
    /// and polls with jittered backoff capped by the holder's remaining lease when no
    /// notification comes. Waiters of one process queue in FIFO order and only the first one
    /// sends commands to Redis.
    ///
    /// # Errors
    ///
    /// [`Error::NotAcquired`] when the deadline or the attempt limit is reached, with how long
    /// it waited; [`Error::InvalidArgument`] for bad settings or a deadline that overflows the
    /// clock. Transient failures (a reset connection, a timeout, `LOADING`, a failover) are
    /// retried with jittered backoff within the deadline and the attempt limit, and the last
    /// one ([`Error::Unavailable`], [`Error::Timeout`]) is returned when they run out; with
    /// [`WaitPolicy::forever`] the wait goes on until Redis answers. Permanent ones
    /// ([`Error::Redis`]: `NOPERM`, `WRONGTYPE`, …) end the wait at once.
    ///
    /// # Cancel safety
    ///
    /// Cancelling gives up the place in the queue; an attempt in flight is released in the
    /// background if it took the lease.
    pub async fn acquire(&self) -> Result<LockGuard> {
        let ttl = self.checked_ttl()?;
        let started = Instant::now();
        let deadline = match self.wait.deadline() {
            Some(d) => Some(started.checked_add(d).ok_or_else(|| {
                Error::invalid(format!("wait deadline {d:?} overflows the clock; use WaitPolicy::forever() to wait without limit"))
            })?),
            None => None,
        };
        if self.wait.max_attempts() == Some(0) {
            return Err(Error::invalid(
                "max_attempts is 0; at least one attempt is needed",
            ));
        }
        let span = tracing::debug_span!("fenced.acquire", lock = %self.name);
        self.acquire_waiting(ttl, started, deadline)
            .instrument(span)
            .await
    }

    async fn acquire_waiting(
        &self,
        ttl: Duration,
        started: Instant,
        deadline: Option<Instant>,
    ) -> Result<LockGuard> {
        let inner = &self.client.inner;
        let channel = &self.keys.channel;
        let mut attempts = 0u32;
        let give_up = |attempts: u32| Error::NotAcquired {
            name: self.name.to_string(),
            waited: started.elapsed(),
            attempts,
        };
        let out_of_attempts =
            |attempts: u32| self.wait.max_attempts().is_some_and(|max| attempts >= max);

        // A transient failure (reset, timeout, LOADING, failover) is retried within the wait;
        // it ends the wait only when the deadline or the attempt limit is reached, and then
        // it is the error returned. Permanent ones (auth, wrong type) end it at once.
        let retry_or_fail = |e: Error, attempts: u32| {
            if e.is_transient()
                && !out_of_attempts(attempts)
                && deadline.is_none_or(|d| Instant::now() < d)
            {
                tracing::debug!(error = %e, "fenced: acquire attempt failed; retrying within the wait");
                Ok(())
            } else {
                Err(e)
            }
        };
        let mut failures = Backoff::new(inner.options.poll_min, inner.options.poll_max);

        // Fast path: nobody in this process is queued, so try straight away.
        if !inner.waiters.has_waiters(channel) {
            attempts = attempts.saturating_add(1);
            match self.attempt(ttl).await {
                Ok(Ok(guard)) => return Ok(guard),
                Ok(Err(_)) => {
                    if out_of_attempts(attempts) || deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(give_up(attempts));
                    }
                }
                Err(e) => retry_or_fail(e, attempts)?,
            }
        }

        // Queue behind this process's other waiters; only the head talks to Redis.
        let ticket = inner.waiters.join(channel);
        let head = match deadline {
            Some(d) => match tokio::time::timeout_at(d, ticket.head()).await {
                Ok(permit) => permit,
                Err(_) => return Err(give_up(attempts)),
            },
            None => ticket.head().await,
        };
        let _head = head.ok_or_else(|| give_up(attempts))?;
        let subscribed = inner
            .waiters
            .subscribe(channel, inner.options.timeout)
            .await;
        tracing::debug!(subscribed, "fenced: waiting");
        let mut backoff = Backoff::new(inner.options.poll_min, inner.options.poll_max);
        loop {
            let notified = ticket.wake().notified();
            tokio::pin!(notified);
            notified.as_mut().enable(); // register before the attempt: no release is missed
            attempts = attempts.saturating_add(1);
            let pause = match self.attempt(ttl).await {
                Ok(Ok(guard)) => {
                    tracing::debug!(attempts, waited = ?started.elapsed(), "fenced: acquired after waiting");
                    return Ok(guard);
                }
                Ok(Err(remaining)) => {
                    if out_of_attempts(attempts) || deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(give_up(attempts));
                    }
                    failures.reset();
                    let pause = backoff.next_wait();
                    // Retry right when the holder's lease runs out, in case it never releases.
                    remaining.map_or(pause, |left| pause.min(left + Duration::from_millis(1)))
                }
                Err(e) => {
                    retry_or_fail(e, attempts)?;
                    failures.next_wait()
                }
            };
            let now = Instant::now();
            let mut wake_at = now + pause;
            if let Some(d) = deadline {
                wake_at = wake_at.min(d);
            }
            tokio::select! {
                _ = &mut notified => backoff.reset(),
                _ = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    /// One acquire round trip. `Ok(Err(remaining))` when held by somebody else.
    async fn attempt(&self, ttl: Duration) -> Result<Result<LockGuard, Option<Duration>>> {
        let inner = &self.client.inner;
        let owner = OwnerToken::generate()
            .map_err(|e| Error::invalid(format!("the OS random source failed: {e}")))?;
        // Until Redis answers, the outcome is unknown: if this future is dropped or the call
        // fails, the lease may exist without a guard, so release it in the background.
        let mut pending = PendingAcquire {
            client: &self.client,
            keys: &self.keys,
            owner: Some(owner.clone()),
            // Long enough to outlast a typical outage; should the attempt run later still,
            // it holds the lock for one ttl at most, like a crashed holder.
            patience: ttl.max(inner.options.timeout * 10),
        };
        let requested_at = Instant::now();
        let reply = inner
            .protocol
            .try_acquire(&self.keys, &owner, ttl_millis(ttl))
            .await;
        let reply = match reply {
            Ok(r) => {
                pending.owner = None;
                r
            }
            Err(e) => return Err(e),
        };
        match reply {
            AcquireReply::Acquired(fencing_token) => {
                tracing::debug!(%fencing_token, "fenced: acquired");
                tracing::trace!(owner = owner.as_str(), "fenced: owner token");
                let state = Arc::new(LeaseState::new(requested_at, ttl));
                let id = inner.renewer.track(Tracked {
                    name: self.name.clone(),
                    keys: self.keys.clone(),
                    owner: owner.clone(),
                    fencing_token,
                    renew: self.auto_renew,
                    state: state.clone(),
                });
                let lease = Lease::new(self.name.clone(), fencing_token, state);
                Ok(Ok(LockGuard::new(
                    self.client.clone(),
                    self.keys.clone(),
                    owner,
                    id,
                    lease,
                )))
            }
            AcquireReply::Held { remaining } => Ok(Err(remaining)),
            // Only an attempt this client gave up on is answered so, and its reply is never
            // awaited; should one arrive anyway, nothing was taken.
            AcquireReply::Abandoned => Ok(Err(None)),
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
    /// # fenced_testkit::doctest(|url| async move {
    /// let client = fenced::Client::connect(&url).await?;
    /// let stock = client.resource("stock:10100101");
    /// let sold = client
    ///     .lock("product:10100101:shopping")
    ///     .with_lock(|lease| async move {
    ///         stock.set(lease.fencing_token(), "count", "19").await
    ///     })
    ///     .await??;
    /// assert_eq!(sold, fenced::FencedWrite::Applied);
    /// # Ok(()) });
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire().await?;
        let lease = guard.lease();
        let outcome = tokio::select! {
            biased;
            _ = lease.lost() => None,
            out = work(lease.clone()) => Some(out),
        };
        let lost = || Error::LeaseLost {
            name: self.name.to_string(),
            fencing_token: lease.fencing_token(),
        };
        let Some(out) = outcome else {
            drop(guard);
            return Err(lost());
        };
        match guard.release().await {
            Ok(()) => Ok(out),
            Err(Error::NotHeld { .. }) => Err(lost()),
            Err(e) => {
                tracing::warn!(lock = %self.name, error = %e, "fenced: release after the work failed; the lease will expire by its ttl");
                Ok(out)
            }
        }
    }
}

/// Releases an acquire whose outcome is unknown when dropped still armed.
struct PendingAcquire<'a> {
    client: &'a Client,
    keys: &'a Arc<LockKeys>,
    owner: Option<OwnerToken>,
    patience: Duration,
}

impl Drop for PendingAcquire<'_> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            self.client.inner.renewer.abandon_in_background(
                self.keys.clone(),
                owner,
                self.patience,
            );
        }
    }
}
