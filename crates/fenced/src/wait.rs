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

/// Exponential backoff with jitter for the fallback poll: each wait is drawn uniformly from
/// the upper half of the current step, so waiters of different processes spread out.
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    step: Duration,
    rng: u64,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        let mut seed = [0u8; 8];
        // Jitter needs no secrecy; if the OS source fails, a fixed odd seed still spreads waits.
        let rng = match getrandom::fill(&mut seed) {
            Ok(()) => u64::from_le_bytes(seed) | 1,
            Err(_) => 0x9e37_79b9_7f4a_7c15,
        };
        Backoff {
            min,
            max,
            step: min,
            rng,
        }
    }

    /// The next wait; the step doubles up to the maximum.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let half = self.step / 2;
        let frac = self.next_fraction();
        let wait = half + half.mul_f64(frac);
        self.step = (self.step * 2).min(self.max);
        wait
    }

    /// The next wait drawn from the whole step ("full jitter"), for retries after a conflict:
    /// spreading contenders over the whole interval resolves conflicts fastest.
    pub(crate) fn next_full_jitter(&mut self) -> Duration {
        let frac = self.next_fraction();
        let wait = self.step.mul_f64(frac);
        self.step = (self.step * 2).min(self.max);
        wait
    }

    fn next_fraction(&mut self) -> f64 {
        // xorshift64: a few cycles, plenty for jitter.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Back to the shortest step, after a notification showed the lock is moving.
    pub(crate) fn reset(&mut self) {
        self.step = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_stays_bounded() {
        let min = Duration::from_millis(20);
        let max = Duration::from_millis(400);
        let mut b = Backoff::new(min, max);
        let waits: Vec<Duration> = (0..20).map(|_| b.next_wait()).collect();
        assert!(waits[0] >= min / 2 && waits[0] <= min);
        assert!(waits.iter().all(|w| *w <= max));
        assert!(waits[10] >= max / 2);
        b.reset();
        assert!(b.next_wait() <= min);
        b.reset();
        let full: Vec<Duration> = (0..20).map(|_| b.next_full_jitter()).collect();
        assert!(full[0] <= min && full.iter().all(|w| *w <= max));
    }
}
