//! How long a wait or a retry loop goes on, and how it backs off between tries: one policy
//! for every acquire and every optimistic transaction.

use std::time::Duration;

/// How long an acquire ([`Lock::acquire`](crate::Lock::acquire) and every other primitive's)
/// or an optimistic transaction ([`Client::transaction_with`](crate::Client::transaction_with))
/// keeps trying, and how it backs off between tries.
///
/// An acquire gives up with [`Error::NotAcquired`](crate::Error::NotAcquired), a transaction
/// with [`Error::Conflict`](crate::Error::Conflict). Set a deadline, an attempt limit, or
/// both; the first one reached ends the wait. [`FOREVER`](Self::FOREVER) (the default of an
/// acquire) has neither; a transaction's default is [`TRANSACTION`](Self::TRANSACTION).
///
/// [`with_backoff`](Self::with_backoff) bounds the jittered, doubling pause between tries that
/// found the resource busy: a transaction's retries after a conflict, or a lock waiter's polls
/// when no release notification comes (waiters are woken by releases; polling is only the
/// fallback). Unset, a transaction backs off from 1 ms to 100 ms and a lock waiter polls by
/// the client's [`poll_interval`](crate::ClientBuilder::poll_interval), whose maximum also caps
/// a waiter's backoff.
///
/// ```
/// use std::time::Duration;
/// use fenced::WaitPolicy;
///
/// let policy = WaitPolicy::up_to(Duration::from_secs(5)).with_max_attempts(100);
/// assert_eq!(policy.deadline(), Some(Duration::from_secs(5)));
/// let retries = WaitPolicy::TRANSACTION.with_backoff(Duration::from_millis(2), Duration::from_millis(50));
/// assert_eq!(retries.max_attempts(), Some(50));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitPolicy {
    deadline: Option<Duration>,
    max_attempts: Option<u32>,
    backoff: Option<(Duration, Duration)>,
}

impl WaitPolicy {
    /// A transaction's default: up to 50 attempts within 10 s, backing off from up to 1 ms,
    /// doubling, to at most 100 ms.
    pub const TRANSACTION: WaitPolicy = WaitPolicy {
        deadline: Some(Duration::from_secs(10)),
        max_attempts: Some(50),
        backoff: Some((Duration::from_millis(1), Duration::from_millis(100))),
    };

    /// Wait until the lock is free, however long that takes (the default).
    pub const FOREVER: WaitPolicy = WaitPolicy {
        deadline: None,
        max_attempts: None,
        backoff: None,
    };

    /// Give up once `deadline` has passed since the call began.
    pub const fn up_to(deadline: Duration) -> Self {
        WaitPolicy {
            deadline: Some(deadline),
            max_attempts: None,
            backoff: None,
        }
    }

    /// Give up after `attempts` attempts have been sent to Redis (at least 1).
    pub const fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// The same policy with `deadline` (`None`: no deadline).
    pub const fn with_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = deadline;
        self
    }

    /// The pause after the first busy try is drawn from `0..=min`, doubling after each
    /// further one up to `max` (with `0 < min <= max <= 60 s`).
    pub const fn with_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff = Some((min, max));
        self
    }

    /// The deadline, if any.
    pub const fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The attempt limit, if any.
    pub const fn max_attempts(&self) -> Option<u32> {
        self.max_attempts
    }

    /// The backoff bounds, if set.
    pub const fn backoff(&self) -> Option<(Duration, Duration)> {
        self.backoff
    }

    /// Refuses an attempt limit of 0 and a backoff outside `(0, 60 s]`.
    pub(crate) fn validate(&self) -> crate::Result<()> {
        if self.max_attempts == Some(0) {
            return Err(crate::Error::invalid(
                "max_attempts is 0; at least one attempt is needed",
            ));
        }
        if let Some((min, max)) = self.backoff
            && (min.is_zero() || max < min || max > Duration::from_secs(60))
        {
            return Err(crate::Error::invalid(format!(
                "backoff {min:?}..{max:?} is not a range within (0, 60s]"
            )));
        }
        Ok(())
    }
}
