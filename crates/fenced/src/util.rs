//! Small tools the engines share: one backoff, optional timers, poison-tolerant locks, and
//! retrying idempotent calls.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Result;

/// Exponential backoff with jitter, the one used everywhere: the waiters' fallback poll,
/// retries of renewals and background releases, the pub/sub reconnect, and transaction
/// retries. Each wait is drawn uniformly from the upper half of the current step (or the
/// whole step, [`next_full_jitter`](Self::next_full_jitter)), so clients spread out.
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    step: Duration,
    rng: u64,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max,
            step: min,
            rng: jitter_seed(),
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

/// A seed for a backoff's jitter: one OS-random seed per process, stirred with a counter
/// (splitmix64), so creating a backoff costs no system call (every acquire creates one).
/// Jitter needs no secrecy; if the OS source fails, a fixed seed still spreads waits.
fn jitter_seed() -> u64 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static BASE: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(|| {
        let mut seed = [0u8; 8];
        match getrandom::fill(&mut seed) {
            Ok(()) => u64::from_le_bytes(seed),
            Err(_) => 0x9e37_79b9_7f4a_7c15,
        }
    });
    let mut z = base.wrapping_add(
        COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15),
    );
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

/// A uniform draw from (0, 1]: never 0, so its logarithm is finite (early cache refresh,
/// cache ttl jitter).
pub(crate) fn random_fraction() -> f64 {
    ((jitter_seed() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
}

/// Sleeps until `at`, or forever when there is nothing to wait for (a `select!` arm).
pub(crate) async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked (every change under
/// it is one insert, remove or field update), so a poisoned lock is still usable.
pub(crate) fn lock_unpoisoned<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs an idempotent call again, with backoff, while it fails with a transient error and
/// `give_up_at` has not passed.
pub(crate) async fn retry_transient<T, F, Fut>(give_up_at: Instant, mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        match call().await {
            Err(e) if e.is_transient() => {
                let pause = backoff.next_wait();
                if Instant::now() + pause >= give_up_at {
                    return Err(e);
                }
                tracing::debug!(error = %e, "fenced: call failed; retrying");
                tokio::time::sleep(pause).await;
            }
            other => return other,
        }
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
