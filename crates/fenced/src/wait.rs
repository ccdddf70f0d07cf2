//! How long `acquire` waits, and how often a waiter polls when no notification comes.

use std::time::Duration;

/// How long [`Lock::acquire`](crate::Lock::acquire) keeps trying before it returns
/// [`Error::NotAcquired`](crate::Error::NotAcquired).
///
/// The default waits without limit. Set a deadline, an attempt limit, or both; the first one
/// reached ends the wait.
///
/// ```
/// use std::time::Duration;
/// use fenced::WaitPolicy;
///
/// let policy = WaitPolicy::up_to(Duration::from_secs(5)).with_max_attempts(100);
/// assert_eq!(policy.deadline(), Some(Duration::from_secs(5)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitPolicy {
    deadline: Option<Duration>,
    max_attempts: Option<u32>,
}

impl WaitPolicy {
    /// Wait until the lock is free, however long that takes.
    pub const fn forever() -> Self {
        WaitPolicy {
            deadline: None,
            max_attempts: None,
        }
    }

    /// Give up once `deadline` has passed since `acquire` was called.
    pub const fn up_to(deadline: Duration) -> Self {
        WaitPolicy {
            deadline: Some(deadline),
            max_attempts: None,
        }
    }

    /// Give up after `attempts` acquire attempts have been sent to Redis (at least 1).
    pub const fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
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
}
