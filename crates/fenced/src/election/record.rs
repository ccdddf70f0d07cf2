//! Where an election lives (its keys), and what reading it answers: the pieces the
//! handle, the leadership and the watcher share, below all three.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::core::Core;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::scripts::{ELECTION_LEADER, ScriptCall};
use crate::token::FencingToken;

/// The prefix, after the namespace, of an election's keys.
pub(crate) const ELECTION_PREFIX: &str = "election:";

/// The longest value a candidate may advertise, in bytes.
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// An election's place: its client's core, its name and its keys.
#[derive(Clone)]
pub(crate) struct Seat {
    pub(crate) core: Arc<Core>,
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    /// The leader record (`<leader key>:leader`).
    pub(crate) record: Arc<str>,
    /// The candidates' queue.
    pub(crate) queue: Arc<str>,
}

impl Seat {
    /// The read of [`Election::status`](crate::Election::status).
    pub(crate) fn status_call(&self) -> ScriptCall {
        ScriptCall::new(&ELECTION_LEADER)
            .key(&self.keys.lock)
            .key(&*self.record)
            .key(&*self.queue)
    }

    /// The reads of [`status_call`](Self::status_call), in its order, for where scripts are
    /// not sent: the queue's length, the leader key, the record, the lease left.
    pub(crate) fn status_reads(&self) -> [redis::Cmd; 4] {
        [
            redis::cmd("LLEN").arg(&*self.queue).take(),
            redis::cmd("MGET").arg(&self.keys.lock).take(),
            redis::cmd("HMGET")
                .arg(&*self.record)
                .arg(&["owner", "value", "term", "since", "v"])
                .take(),
            redis::cmd("PTTL").arg(&self.keys.lock).take(),
        ]
    }

    /// A candidate's value, checked with the election's name.
    pub(crate) fn checked_value(&self, value: String) -> Result<Arc<str>> {
        crate::keys::validate_name("election", &self.name)?;
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::invalid(format!(
                "the value is {} bytes long; the limit is {MAX_VALUE_LEN}",
                value.len()
            )));
        }
        Ok(value.into())
    }
}

/// The leader of an election, as read from Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader advertises (its address, say): given to
    /// [`campaign`](crate::Election::campaign), changed by [`proclaim`](crate::Leadership::proclaim).
    pub value: String,
    /// The leader's term: the fencing token of its grant.
    pub term: FencingToken,
    /// When it was elected, by the Redis server's clock (for display: never compare it with
    /// another machine's clock).
    pub since: SystemTime,
    /// How much of its lease was left when it was read (it is renewed while the leader lives).
    pub lease_left: Duration,
    /// How many times it changed its value in this term.
    pub proclaims: u64,
}

/// An election's state: its leader and its candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionStatus {
    /// The leader, if any.
    pub leader: Option<Leader>,
    /// Candidates waiting (including any that gave up or died but have not yet reached the
    /// head of the queue).
    pub candidates: u64,
}

pub(crate) fn redlock_refusal(what: &str) -> Error {
    Error::unsupported(format!(
        "{what} an election needs one server, Sentinel or a Redis Cluster: Redlock's masters keep no one record of the leader"
    ))
}

/// What `election_leader.lua` answers, from its reads ([`Seat::status_reads`]).
pub(crate) fn status_from_reads(replies: &[redis::Value]) -> Option<redis::Value> {
    use redis::Value;
    let [
        Value::Int(candidates),
        Value::Array(owner),
        Value::Array(record),
        lease_left,
    ] = replies
    else {
        return None;
    };
    let owner = owner.first()?;
    // No leader: the key is gone, or held by an owner without a record (a grant between its
    // lease and its record, which the transaction, atomic as the script, never splits).
    if *owner == Value::Nil || record.first() != Some(owner) {
        return Some(Value::Array(vec![Value::Int(0), Value::Int(*candidates)]));
    }
    let field = |i: usize| record.get(i).cloned().unwrap_or(Value::Nil);
    // Lua's `tonumber` of a field: its number, truncated as a script's reply is, or nil.
    let number = |i: usize| match record.get(i) {
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|t| t.trim().parse::<f64>().ok())
            .map_or(Value::Nil, |n| Value::Int(n as i64)),
        _ => Value::Nil,
    };
    Some(Value::Array(vec![
        Value::Int(1),
        Value::Int(*candidates),
        field(1),
        field(2),
        number(3),
        lease_left.clone(),
        number(4),
    ]))
}

/// Reads `election_leader.lua`'s reply.
pub(crate) fn parse_status(reply: redis::Value) -> Result<ElectionStatus> {
    use redis::Value;
    let bad = |what: &str| crate::kind::unexpected("leader", what.to_owned());
    let Value::Array(items) = reply else {
        return Err(bad("not an array"));
    };
    let int = |v: &Value| match v {
        Value::Int(n) => Some(*n),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let candidates = items
        .get(1)
        .and_then(int)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| bad("no candidate count"))?;
    if items.first().and_then(int) != Some(1) {
        return Ok(ElectionStatus {
            leader: None,
            candidates,
        });
    }
    let [_, _, value, term, since, left, proclaims] = &items[..] else {
        return Err(bad("a leader reply of another length"));
    };
    let value = text(value).ok_or_else(|| bad("no value"))?;
    let term = text(term)
        .and_then(|t| t.parse::<u64>().ok())
        .map(FencingToken::new)
        .ok_or_else(|| bad("a term that is not a u64"))?;
    let since_ms = int(since).ok_or_else(|| bad("no start"))?;
    let left_ms = int(left).unwrap_or(0).max(0);
    let proclaims = int(proclaims).unwrap_or(0).max(0);
    Ok(ElectionStatus {
        leader: Some(Leader {
            value,
            term,
            since: SystemTime::UNIX_EPOCH + Duration::from_millis(since_ms.max(0) as u64),
            lease_left: Duration::from_millis(left_ms as u64),
            proclaims: proclaims as u64,
        }),
        candidates,
    })
}
