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

/// The largest ms of a fence's stream ID whose tokens stay below 2^53 (`scripts/fence.lua`):
/// `9_007_199_254_739 × 1000 + 999 < 2^53`, the year 2255.
pub(crate) const FENCE_MAX_MS: u64 = 9_007_199_254_739;

/// What the ID of a fence's stream (`ms-seq`, as `XADD` answers it) gives as a token
/// (`scripts/fence.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FenceId {
    /// The token `ms × 1000 + seq`.
    Token(u64),
    /// A sequence past 999: the next token comes from the ID `(ms + 1)-0`, this one's ms.
    Carry(u64),
    /// Not an ID this protocol counts on: out of range, or not an ID at all.
    Foreign,
}

impl FenceId {
    /// Reads an ID as `XADD` answers it.
    pub(crate) fn parse(id: &[u8]) -> FenceId {
        let text = std::str::from_utf8(id).unwrap_or_default();
        let Some((ms, seq)) = text.split_once('-') else {
            return FenceId::Foreign;
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(ms) || !digits(seq) {
            return FenceId::Foreign;
        }
        let (Ok(ms), Ok(seq)) = (ms.parse::<u64>(), seq.parse::<u64>()) else {
            return FenceId::Foreign;
        };
        match (ms, seq) {
            (0, _) => FenceId::Foreign,
            (ms, _) if ms > FENCE_MAX_MS => FenceId::Foreign,
            (ms, seq) if seq < 1000 => FenceId::Token(ms * 1000 + seq),
            (ms, _) if ms < FENCE_MAX_MS => FenceId::Carry(ms + 1),
            _ => FenceId::Foreign,
        }
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
    fn a_fence_id_is_a_token_below_two_to_the_53_or_a_carry_or_foreign() {
        assert_eq!(
            FenceId::parse(b"1795834681614-0"),
            FenceId::Token(1_795_834_681_614_000)
        );
        assert_eq!(
            FenceId::parse(b"1795834681614-7"),
            FenceId::Token(1_795_834_681_614_007)
        );
        assert_eq!(
            FenceId::parse(b"1795834681614-999"),
            FenceId::Token(1_795_834_681_614_999)
        );
        assert_eq!(
            FenceId::parse(b"1795834681614-1000"),
            FenceId::Carry(1_795_834_681_615)
        );
        let max = FenceId::parse(format!("{FENCE_MAX_MS}-999").as_bytes());
        assert_eq!(max, FenceId::Token(9_007_199_254_739_999));
        assert!(matches!(max, FenceId::Token(t) if t < 1 << 53), "{max:?}");
        for foreign in [
            format!("{}-0", FENCE_MAX_MS + 1),
            format!("{FENCE_MAX_MS}-1000"),
            "0-1".into(),
            "18446744073709551615-0".into(),
            "99999999999999999999-0".into(),
            "-1".into(),
            "1-".into(),
            "1795834681614".into(),
            "a-1".into(),
            "1-+1".into(),
            String::new(),
        ] {
            assert_eq!(
                FenceId::parse(foreign.as_bytes()),
                FenceId::Foreign,
                "{foreign}"
            );
        }
        // Strictly increasing with the ID, across a carry.
        let ids = [
            "1700000000000-0",
            "1700000000000-998",
            "1700000000000-999",
            "1700000000001-0",
        ];
        let tokens: Vec<u64> = ids
            .iter()
            .filter_map(|id| match FenceId::parse(id.as_bytes()) {
                FenceId::Token(t) => Some(t),
                _ => None,
            })
            .collect();
        assert_eq!(tokens.len(), ids.len());
        assert!(tokens.windows(2).all(|w| w[0] < w[1]));
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
