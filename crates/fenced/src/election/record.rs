//! Where an election lives (its keys), and what reading it answers: the pieces the
//! handle, the leadership and the watcher share, below all three.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::backend::reads;
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
    /// The candidates' registrations (`<leader key>:queue:ends`, the fair lock's).
    pub(crate) registrations: Arc<str>,
    /// The candidates' values (`<leader key>:queue:values`): waiter id -> `<queued since>
    /// <value>`, for the waiters of the queue.
    pub(crate) values: Arc<str>,
    /// The changes of leader (`<leader key>:transitions`), kept as long as the fence.
    pub(crate) transitions: Arc<str>,
    /// A candidate is woken on this prefix and its waiter id.
    pub(crate) channel_prefix: Arc<str>,
}

impl Seat {
    /// The read of [`Election::status`](crate::Election::status): the leader, and the
    /// candidates listed.
    pub(crate) fn status_call(&self) -> ScriptCall {
        self.read_call().arg("1")
    }

    /// The read of the leader alone, for the watcher (`observe.rs`): the candidates counted,
    /// not listed, so that a change costs the same however many candidates queue, and
    /// whatever values they advertise.
    pub(crate) fn leader_call(&self) -> ScriptCall {
        self.read_call()
    }

    /// `election_leader.lua`'s keys.
    fn read_call(&self) -> ScriptCall {
        ScriptCall::new(&ELECTION_LEADER)
            .key(&self.keys.lock)
            .key(&*self.record)
            .key(&*self.queue)
            .key(&*self.transitions)
            .key(&*self.values)
    }

    /// The reads of [`status_call`](Self::status_call), in its order, for where scripts are
    /// not sent: the queue's length, the leader key, the record, the lease left, the changes
    /// of leader, the server's clock, the queue, and every candidate's value (the script
    /// reads the values of the queue's waiters, which the transaction cannot name before it
    /// has read the queue: the whole hash is read instead).
    pub(crate) fn status_reads(&self) -> [redis::Cmd; 8] {
        [
            redis::cmd("LLEN").arg(&*self.queue).take(),
            redis::cmd("MGET").arg(&self.keys.lock).take(),
            redis::cmd("HMGET")
                .arg(&*self.record)
                .arg(&["owner", "value", "term", "since", "v"])
                .take(),
            redis::cmd("PTTL").arg(&self.keys.lock).take(),
            redis::cmd("MGET").arg(&*self.transitions).take(),
            redis::cmd("TIME"),
            redis::cmd("LRANGE").arg(&*self.queue).arg(0).arg(-1).take(),
            redis::cmd("HGETALL").arg(&*self.values).take(),
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
    /// How many times leadership changed hands in this election (Kubernetes'
    /// `leaseTransitions`): each term after the election's first counts one, whoever won it.
    /// The count is kept as long as the terms' fence
    /// ([`fence_retention`](crate::ClientBuilder::fence_retention), a day by default, after
    /// the last election): it outlives a leader that died and the time nobody led.
    pub transitions: u64,
}

/// A candidate waiting in an election's queue, as read from Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// The value it will advertise once elected (given to
    /// [`campaign`](crate::Election::campaign)); `None` when its campaign recorded none (a
    /// client that does not record candidates' values).
    pub value: Option<String>,
    /// When it joined the queue, by the Redis server's clock (for display: never compare it
    /// with another machine's clock); `None` as for `value`.
    pub queued_since: Option<SystemTime>,
    /// How long it had been queued when it was read, by the Redis server's clock; `None` as
    /// for `value`.
    pub queued_for: Option<Duration>,
}

impl Candidate {
    /// A candidate from its entry in the status read (`<queued since> <value>`, or nil when
    /// its campaign recorded none), with the server's clock at the read.
    fn read(entry: &redis::Value, now_ms: i64) -> Self {
        let recorded = match entry {
            redis::Value::BulkString(bytes) => {
                bytes.iter().position(|&b| b == b' ').and_then(|space| {
                    let (since, value) = bytes.split_at(space);
                    let since = std::str::from_utf8(since).ok()?.parse::<u64>().ok()?;
                    // `value` starts with the space.
                    let value = value.get(1..).unwrap_or_default();
                    Some((since, String::from_utf8_lossy(value).into_owned()))
                })
            }
            _ => None,
        };
        match recorded {
            Some((since, value)) => Candidate {
                value: Some(value),
                queued_since: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(since)),
                queued_for: Some(Duration::from_millis(
                    u64::try_from(now_ms).unwrap_or(0).saturating_sub(since),
                )),
            },
            None => Candidate {
                value: None,
                queued_since: None,
                queued_for: None,
            },
        }
    }
}

/// An election's state: its leader and its candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionStatus {
    /// The leader, if any.
    pub leader: Option<Leader>,
    /// Candidates waiting (including any that gave up or died but have not yet reached the
    /// head of the queue): the length of [`queue`](Self::queue).
    pub candidates: u64,
    /// The candidates waiting, in the order they will be elected: those `candidates` counts.
    pub queue: Vec<Candidate>,
}

pub(crate) fn redlock_refusal(what: &str) -> Error {
    Error::unsupported(format!(
        "{what} an election needs one server, Sentinel or a Redis Cluster: Redlock's masters keep no one record of the leader"
    ))
}

/// What `election_leader.lua` answers when it lists the candidates, from its reads
/// ([`Seat::status_reads`]).
pub(crate) fn status_from_reads(replies: &[redis::Value]) -> Option<redis::Value> {
    use redis::Value;
    let [
        Value::Int(candidates),
        Value::Array(owner),
        Value::Array(record),
        lease_left,
        Value::Array(transitions),
        time,
        Value::Array(waiters),
        values,
    ] = replies
    else {
        return None;
    };
    let owner = owner.first()?;
    let number = |v: Option<&Value>| lua_number(v).map_or(Value::Nil, Value::Int);
    // No leader: the key is gone, or held by an owner without a record (a grant between its
    // lease and its record, which the transaction, atomic as the script, never splits).
    let mut reply = if *owner == Value::Nil || record.first() != Some(owner) {
        vec![Value::Int(0), Value::Int(*candidates)]
    } else {
        let field = |i: usize| record.get(i).cloned().unwrap_or(Value::Nil);
        vec![
            Value::Int(1),
            Value::Int(*candidates),
            field(1),
            field(2),
            number(record.get(3)),
            lease_left.clone(),
            number(record.get(4)),
            Value::Int(lua_number(transitions.first()).unwrap_or(0)),
        ]
    };
    let values: HashMap<Vec<u8>, Vec<u8>> = redis::from_redis_value_ref(values).ok()?;
    // The script's `HGET` of each waiter's value: nil for a waiter without one.
    let queue = waiters
        .iter()
        .map(|waiter| match waiter {
            Value::BulkString(id) => values
                .get(id)
                .map_or(Value::Nil, |entry| Value::BulkString(entry.clone())),
            _ => Value::Nil,
        })
        .collect();
    reply.push(Value::Int(reads::server_ms(time)?));
    reply.push(Value::Array(queue));
    Some(Value::Array(reply))
}

/// Lua's `tonumber` of a stored field, truncated as a script's number reply is: `None` where
/// the script's is nil (no field, or no number).
fn lua_number(v: Option<&redis::Value>) -> Option<i64> {
    match v {
        Some(redis::Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .map(|n| n as i64),
        _ => None,
    }
}

/// Reads `election_leader.lua`'s reply, with or without the candidates listed.
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
    let (leader, listed) = if items.first().and_then(int) == Some(1) {
        let [
            _,
            _,
            value,
            term,
            since,
            left,
            proclaims,
            transitions,
            listed @ ..,
        ] = &items[..]
        else {
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
        let transitions = int(transitions).unwrap_or(0).max(0);
        let leader = Leader {
            value,
            term,
            since: SystemTime::UNIX_EPOCH + Duration::from_millis(since_ms.max(0) as u64),
            lease_left: Duration::from_millis(left_ms as u64),
            proclaims: proclaims as u64,
            transitions: transitions as u64,
        };
        (Some(leader), listed)
    } else {
        (None, items.get(2..).unwrap_or_default())
    };
    let queue = match listed {
        [] => Vec::new(),
        [now, Value::Array(entries)] => {
            let now_ms = int(now).ok_or_else(|| bad("no server clock"))?;
            entries.iter().map(|e| Candidate::read(e, now_ms)).collect()
        }
        _ => return Err(bad("a list of candidates of another shape")),
    };
    Ok(ElectionStatus {
        leader,
        candidates,
        queue,
    })
}
