//! What the scripts answer, read into types the core, the kinds and the backends share: a
//! leaf of the lease core, importing none of them.
//!
//! Invariant: every reply shape a script can send has an arm here, and any other shape is
//! [`Error::UnexpectedReply`] (through [`unexpected`]), never a panic or a guess.

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::token::FencingToken;

/// Whom a release wakes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// One head: an exclusive lease came back.
    One,
    /// Up to N heads: N permits came back.
    N(u32),
    /// Every head: a latch opened, or a writer left and every reader may enter.
    All,
}

impl Wake {
    /// The message a release publishes: `<client id> <wake>`.
    pub(crate) fn message(self, client_id: &str) -> String {
        match self {
            Wake::One => format!("{client_id} 1"),
            Wake::N(n) => format!("{client_id} {n}"),
            Wake::All => format!("{client_id} all"),
        }
    }

    /// Reads a message: who sent it, and whom it wakes.
    pub(crate) fn parse(payload: &[u8]) -> (&[u8], Wake) {
        let Some(space) = payload.iter().position(|&b| b == b' ') else {
            return (payload, Wake::One);
        };
        let (sender, wake) = (&payload[..space], &payload[space + 1..]);
        let wake = match wake {
            b"all" => Wake::All,
            digits => std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse::<u32>().ok())
                .map_or(Wake::One, |n| if n == 1 { Wake::One } else { Wake::N(n) }),
        };
        (sender, wake)
    }
}

/// How Redis answered an expiry change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpiryReply {
    /// Applied: the lease now lasts the request's ttl from when Redis ran it.
    Applied,
    /// Refused without change: a request of a newer epoch was applied before it.
    Superseded,
    /// The lease is not ours any more.
    NotHeld,
}

/// What a hand-over found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandOverReply {
    /// The successor holds the lease now, with this fencing token.
    Handed(FencingToken),
    /// The lease was not ours any more; nothing changed.
    NotHeld,
    /// Another client waits too; nothing changed (release as usual).
    OthersWait,
    /// Released as usual in the same step (a fair lock whose head is not the successor).
    Released,
}

pub(crate) fn hand_over_reply(value: Value) -> Result<HandOverReply> {
    let Value::Array(pair) = value else {
        return Err(unexpected("hand over", format!("{value:?}")));
    };
    match pair.as_slice() {
        [Value::Int(1), Value::BulkString(token)] => {
            parse_token("hand over", token).map(HandOverReply::Handed)
        }
        [Value::Int(0), Value::Int(0)] => Ok(HandOverReply::NotHeld),
        [Value::Int(0), Value::Int(1)] => Ok(HandOverReply::OthersWait),
        [Value::Int(0), Value::Int(2)] => Ok(HandOverReply::Released),
        other => Err(unexpected("hand over", format!("{other:?}"))),
    }
}

/// What an acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The lease is ours, with this fencing token.
    Acquired(FencingToken),
    /// Somebody holds it; the blocking lease has this much left (`None`: unknown).
    Busy { remaining: Option<Duration> },
    /// This attempt had been abandoned by the client before it reached Redis; nothing changed.
    Abandoned,
    /// A re-entry whose lease is no longer held by its owner: refused, nothing changed.
    NotHeld,
    /// The key at this KEYS index (1-based) holds another type of data than a lease's
    /// string: another program wrote it. Refused, nothing changed; no release will free it.
    WrongType { key: usize },
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// Given back now; waiters were notified.
    Released,
    /// An earlier attempt of this same release already did it (its reply was lost).
    AlreadyReleased,
    /// Not ours any more; nothing changed.
    NotHeld,
    /// This hold is given back, but the lease stays: other holds of the same owner remain.
    Retained,
}

impl ReleaseReply {
    /// True when the lease itself was given back by this call, so waiters may proceed.
    pub(crate) fn freed(self) -> bool {
        matches!(self, ReleaseReply::Released | ReleaseReply::AlreadyReleased)
    }
}

pub(crate) fn acquire_reply(value: Value) -> Result<AcquireReply> {
    let mut pair = match value {
        // A bare token is a grant's (the exclusive lock's cheapest reply): a decimal string.
        // Scripts are compiled in and called by their hash, so no older script answers.
        Value::BulkString(token) => {
            return parse_token("acquire", &token).map(AcquireReply::Acquired);
        }
        Value::Array(pair) => pair,
        // An unfenced lease's `SET NX PX`: granted, with no token to carry (it is never shown:
        // an unfenced guard has no `fencing_token`), or refused, with no ttl read.
        Value::Okay => return Ok(AcquireReply::Acquired(FencingToken::UNFENCED)),
        Value::Nil => return Ok(AcquireReply::Busy { remaining: None }),
        other => return Err(unexpected("acquire", format!("{other:?}"))),
    };
    if let [Value::Int(0), Value::Int(-5), Value::Int(key)] = pair[..] {
        return match usize::try_from(key) {
            Ok(key) if key >= 1 => Ok(AcquireReply::WrongType { key }),
            _ => Err(unexpected("acquire", format!("wrong type at KEYS[{key}]"))),
        };
    }
    let (Some(detail), Some(Value::Int(granted)), None) = (pair.pop(), pair.pop(), pair.pop())
    else {
        return Err(unexpected("acquire", format!("{pair:?}")));
    };
    match (granted, detail) {
        (1, Value::BulkString(bytes)) => parse_token("acquire", &bytes).map(AcquireReply::Acquired),
        (0, Value::Int(-3)) => Ok(AcquireReply::Abandoned),
        (0, Value::Int(-4)) => Ok(AcquireReply::NotHeld),
        (0, Value::Int(ms)) => Ok(AcquireReply::Busy {
            remaining: u64::try_from(ms).ok().map(Duration::from_millis),
        }),
        (g, v) => Err(unexpected("acquire", format!("{g}, {v:?}"))),
    }
}

pub(crate) fn expiry_reply(value: Value) -> Result<ExpiryReply> {
    match value {
        Value::Int(1) => Ok(ExpiryReply::Applied),
        Value::Int(2) => Ok(ExpiryReply::Superseded),
        Value::Int(0) => Ok(ExpiryReply::NotHeld),
        other => Err(unexpected("extend", format!("{other:?}"))),
    }
}

pub(crate) fn release_reply(value: Value) -> Result<ReleaseReply> {
    match value {
        Value::Int(1) => Ok(ReleaseReply::Released),
        Value::Int(0) => Ok(ReleaseReply::NotHeld),
        Value::Int(3) => Ok(ReleaseReply::Retained),
        other => Err(unexpected("release", format!("{other:?}"))),
    }
}

/// True when an abandon found the attempt had taken the lease (and released it).
pub(crate) fn abandon_reply(value: Value) -> Result<bool> {
    match value {
        Value::Int(n) => Ok(n == 1),
        other => Err(unexpected("abandon", format!("{other:?}"))),
    }
}

/// A fencing token as the scripts send it: a decimal string.
pub(crate) fn parse_token(script: &'static str, bytes: &[u8]) -> Result<FencingToken> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(FencingToken::new)
        .ok_or_else(|| {
            unexpected(
                script,
                format!(
                    "fencing token {:?} is not a u64",
                    String::from_utf8_lossy(bytes)
                ),
            )
        })
}

/// The one constructor of [`Error::UnexpectedReply`].
/// The error of an acquire refused for a key of another type: KEYS[`key`] of `call`.
pub(crate) fn wrong_type(call: &crate::scripts::ScriptCall, key: usize) -> Error {
    match call.key_at(key) {
        Some(key) => Error::WrongType {
            key,
            operation: "acquire",
        },
        None => unexpected("acquire", format!("wrong type at KEYS[{key}]")),
    }
}

pub(crate) fn unexpected(script: &'static str, detail: String) -> Error {
    Error::UnexpectedReply { script, detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(values: &[i64]) -> Value {
        Value::Array(values.iter().map(|&n| Value::Int(n)).collect())
    }

    #[test]
    fn a_key_of_another_type_is_read_with_its_index() {
        assert_eq!(
            acquire_reply(ints(&[0, -5, 1])).ok(),
            Some(AcquireReply::WrongType { key: 1 })
        );
        assert_eq!(
            acquire_reply(ints(&[0, -5, 3])).ok(),
            Some(AcquireReply::WrongType { key: 3 })
        );
        // No key 0 in Lua, nor a negative one: not understood, never a guess.
        for bad in [[0, -5, 0], [0, -5, -1], [1, -5, 1]] {
            assert!(
                matches!(
                    acquire_reply(ints(&bad)),
                    Err(Error::UnexpectedReply { .. })
                ),
                "{bad:?}"
            );
        }
        // The other replies read as before.
        assert_eq!(
            acquire_reply(ints(&[0, -4])).ok(),
            Some(AcquireReply::NotHeld)
        );
        assert_eq!(
            acquire_reply(ints(&[0, -5])).ok(),
            Some(AcquireReply::Busy { remaining: None })
        );
    }
}
