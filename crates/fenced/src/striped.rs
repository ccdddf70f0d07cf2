//! [`StripedLock`]: lock segments. A large key space (every product, every
//! account) is mapped onto K locks by a stable hash, so a caller can trade contention for
//! the number of lock keys: K = 1 is one global lock, K = the number of items is one lock
//! per item.

use std::fmt;

use std::sync::Arc;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::lock::Lock;

/// The most stripes a [`StripedLock`] may have.
pub const MAX_STRIPES: u32 = 1 << 20;

/// K locks covering a key space: every key maps to one of them by a stable hash (FNV-1a,
/// the same in every process and every version of this crate), so everybody locking one key
/// takes the same lock. Two keys in one stripe exclude each other too: that is the price of
/// having K lock keys instead of one per item.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// let client = fenced::Client::connect(&url).await?;
/// let products = client.striped_lock("products", 64)?;
/// let guard = products.lock_for("product:10100101").acquire().await?;
/// assert_eq!(guard.name(), products.lock_for("product:10100101").name());
/// guard.release().await?;
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct StripedLock {
    base: Lock,
    prefix: String,
    stripes: u32,
}

impl fmt::Debug for StripedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripedLock")
            .field("prefix", &self.prefix)
            .field("stripes", &self.stripes)
            .finish()
    }
}

impl StripedLock {
    pub(crate) fn new(core: &Arc<Core>, prefix: String, stripes: u32) -> Result<Self> {
        if !(1..=MAX_STRIPES).contains(&stripes) {
            return Err(Error::invalid(format!(
                "a striped lock has 1 to {MAX_STRIPES} stripes, not {stripes}"
            )));
        }
        // The longest stripe name must be a valid lock name.
        crate::check_name(&stripe_name(&prefix, stripes - 1))?;
        Ok(StripedLock {
            base: Lock::new(core, stripe_name(&prefix, 0)),
            prefix,
            stripes,
        })
    }

    /// Every stripe's lease length, as [`Lock::with_ttl`].
    pub fn with_ttl(self, ttl: std::time::Duration) -> Self {
        self.configure(|l| l.with_ttl(ttl))
    }

    /// Whether every stripe's lease is renewed, as [`Lock::with_auto_renew`].
    pub fn with_auto_renew(self, on: bool) -> Self {
        self.configure(|l| l.with_auto_renew(on))
    }

    /// How long a stripe's acquire waits, as [`Lock::with_wait`].
    pub fn with_wait(self, policy: crate::WaitPolicy) -> Self {
        self.configure(|l| l.with_wait(policy))
    }

    /// The least time every stripe is held, as [`Lock::with_min_hold`].
    pub fn with_min_hold(self, min: std::time::Duration) -> Self {
        self.configure(|l| l.with_min_hold(min))
    }

    /// The most time every stripe is held, as [`Lock::with_max_hold`].
    pub fn with_max_hold(self, max: std::time::Duration) -> Self {
        self.configure(|l| l.with_max_hold(max))
    }

    /// Every stripe's lease renewed only while its holder beats, as [`Lock::with_heartbeat`].
    pub fn with_heartbeat(self, max_silence: std::time::Duration) -> Self {
        self.configure(|l| l.with_heartbeat(max_silence))
    }

    /// Every stripe kept taken past a lost holder's lease, as [`Lock::with_lock_delay`].
    pub fn with_lock_delay(self, delay: std::time::Duration) -> Self {
        self.configure(|l| l.with_lock_delay(delay))
    }

    /// Every stripe's settings at once, from a lock configured as a template:
    /// `striped.configure(|l| l.with_ttl(ttl).with_wait(policy))`.
    pub fn configure(mut self, f: impl FnOnce(Lock) -> Lock) -> Self {
        self.base = f(self.base);
        self
    }

    /// How many stripes.
    pub fn stripes(&self) -> u32 {
        self.stripes
    }

    /// The stripe `key` falls in.
    pub fn stripe_of(&self, key: &str) -> u32 {
        (fnv1a(key.as_bytes()) % u64::from(self.stripes)) as u32
    }

    /// The lock that guards `key`: `<prefix>:stripe:<n>`.
    pub fn lock_for(&self, key: &str) -> Lock {
        self.base
            .renamed(stripe_name(&self.prefix, self.stripe_of(key)))
    }
}

fn stripe_name(prefix: &str, stripe: u32) -> String {
    format!("{prefix}:stripe:{stripe}")
}

/// FNV-1a, 64 bits: stable by definition, unlike `std`'s `DefaultHasher`, and six lines
/// rather than a dependency.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_the_published_fnv1a_so_every_process_agrees() {
        // Reference values of FNV-1a 64.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
