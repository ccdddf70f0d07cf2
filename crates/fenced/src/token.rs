//! Fencing tokens (public, ordered) and owner tokens (secret, random).

use std::fmt;
use std::sync::Arc;

/// A number handed out with every grant of a lock, strictly greater than every fencing token
/// handed out before for the same lock name.
///
/// Pass it along with every write to the resource the lock protects, and have the resource
/// refuse writes carrying a token lower than the highest it has accepted. That turns a lease
/// (which a paused holder can outlive) into real mutual exclusion for the writes.
/// [`FencedResource`](crate::FencedResource) does this for data kept in Redis; the crate
/// documentation shows the same check in SQL.
///
/// Tokens are not secret: knowing one does not let anybody release or extend the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token of an unfenced lease ([`UnfencedLock`](crate::UnfencedLock)), which has none:
    /// zero, below every token a grant hands out, and refused by every fenced write.
    pub const UNFENCED: FencingToken = FencingToken(0);

    /// Wraps a raw value, for example one read back from a database column.
    pub const fn new(value: u64) -> Self {
        FencingToken(value)
    }

    /// The token as a number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> u64 {
        token.0
    }
}

/// The secret value stored in the lock key: 128 bits from the operating system's CSPRNG, new
/// for every acquisition. Whoever knows it can release or extend the lease, so it is never
/// shown by `Debug` and only logged at trace level. Shared, not copied: a lock cycle hands it
/// to the attempt, the renewal registry and the release.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct OwnerToken(Arc<str>);

impl OwnerToken {
    /// A fresh token. Fails only if the OS random source fails, which we report rather than
    /// fall back to a weaker generator.
    pub(crate) fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)?;
        let mut digits = [0u8; 32];
        for (pair, b) in digits.chunks_exact_mut(2).zip(bytes) {
            pair.copy_from_slice(&hex_pair(b));
        }
        // Hex digits are ASCII, so this never fails; if it did, no token is better than a
        // shared empty one.
        let digits = std::str::from_utf8(&digits).map_err(|_| getrandom::Error::UNEXPECTED)?;
        Ok(OwnerToken(Arc::from(digits)))
    }

    /// A token received from the holder itself (a re-entrant owner handle): 32 hex digits.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        (text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| OwnerToken(text.to_ascii_lowercase().into()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnerToken(<redacted>)")
    }
}

/// A byte's two lowercase hex digits.
fn hex_pair(b: u8) -> [u8; 2] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0xf)]]
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.extend(hex_pair(b).map(char::from));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn owner_tokens_are_128_bit_hex_and_unique() -> Result<(), getrandom::Error> {
        let mut seen = HashSet::new();
        let mut ones = [0u32; 128];
        let n = 1_000_000;
        for _ in 0..n {
            let t = OwnerToken::generate()?;
            assert_eq!(t.as_str().len(), 32);
            for (i, c) in t.as_str().chars().enumerate() {
                let v = c.to_digit(16).unwrap_or(0);
                for bit in 0..4 {
                    ones[i * 4 + bit] += (v >> (3 - bit)) & 1;
                }
            }
            assert!(seen.insert(t.0), "duplicate owner token");
        }
        for (bit, count) in ones.iter().enumerate() {
            let freq = f64::from(*count) / f64::from(n);
            assert!((freq - 0.5).abs() < 0.01, "bit {bit} is biased: {freq}");
        }
        Ok(())
    }

    #[test]
    fn owner_token_debug_is_redacted() -> Result<(), getrandom::Error> {
        let t = OwnerToken::generate()?;
        let shown = format!("{t:?}");
        assert!(!shown.contains(t.as_str()));
        Ok(())
    }

    #[test]
    fn fencing_tokens_order_and_print_as_numbers() {
        assert!(FencingToken::new(2) > FencingToken::new(1));
        assert_eq!(FencingToken::new(42).to_string(), "42");
        assert_eq!(u64::from(FencingToken::new(7)), 7);
    }
}
