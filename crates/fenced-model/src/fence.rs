//! The fencing token rule (`docs/protocol.md`, section 3), as pure functions over a stream ID
//! and the server clock, and the two rules it replaced, kept as mutants.
//!
//! The model hands out tokens with [`next_id`] at a small `seq_limit` (so that the carry into
//! the next millisecond happens within a few steps); the conformance test predicts the real
//! server's tokens with the same function at [`SEQ_LIMIT`].

/// Sequences per millisecond the protocol hands out (`seq` 0 to 999).
pub const SEQ_LIMIT: u32 = 1000;

/// A stream ID: the fence's last entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id {
    /// Milliseconds.
    pub ms: i64,
    /// The sequence within the millisecond.
    pub seq: u32,
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// The ID a grant appends and hands out, given the fence's last ID (`None`: no fence, which
/// `XADD … NOMKSTREAM` reports as nil) and the server clock in ms.
///
/// - A fence that exists: what `XADD … *` answers, `max(clock, last.ms)` and the next
///   sequence within it; a sequence at `seq_limit` or past it is carried to `(ms + 1)-0`.
/// - No fence: `(clock + 1)-0`, one ms past the clock, because a grant earlier in this same
///   ms may have handed out `clock-0` from a fence lost since.
pub fn next_id(last: Option<Id>, clock_ms: i64, seq_limit: u32) -> Id {
    let Some(last) = last else {
        return Id {
            ms: clock_ms + 1,
            seq: 0,
        };
    };
    let auto = if clock_ms > last.ms {
        Id {
            ms: clock_ms,
            seq: 0,
        }
    } else {
        Id {
            ms: last.ms,
            seq: last.seq + 1,
        }
    };
    if auto.seq >= seq_limit {
        Id {
            ms: auto.ms + 1,
            seq: 0,
        }
    } else {
        auto
    }
}

/// The token of an ID: `ms × seq_limit + seq` (`ms * 1000 + seq` on the wire).
pub fn token(id: Id, seq_limit: u32) -> u64 {
    (id.ms.max(0) as u64) * u64::from(seq_limit) + u64::from(id.seq)
}

/// The ID of a token: the inverse of [`token`].
pub fn id_of(token: u64, seq_limit: u32) -> Id {
    Id {
        ms: (token / u64::from(seq_limit)) as i64,
        seq: (token % u64::from(seq_limit)) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_clock_and_carry_past_the_sequence_limit() {
        let id = |ms, seq| Id { ms, seq };
        assert_eq!(next_id(None, 10, 2), id(11, 0));
        assert_eq!(next_id(Some(id(9, 1)), 10, 2), id(10, 0));
        assert_eq!(next_id(Some(id(10, 0)), 10, 2), id(10, 1));
        assert_eq!(next_id(Some(id(10, 1)), 10, 2), id(11, 0));
        // A clock behind the fence counts on from the fence.
        assert_eq!(next_id(Some(id(12, 0)), 10, 2), id(12, 1));
        assert_eq!(token(id(12, 1), 1000), 12_001);
        assert_eq!(id_of(12_001, 1000), id(12, 1));
    }
}
