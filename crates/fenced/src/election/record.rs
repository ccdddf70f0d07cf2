//! Where an election lives (its keys), and what reading it answers: the pieces the
//! handle, the leadership and the watcher share, below all three.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::backend::Node;
use crate::backend::reads;
use crate::core::Core;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
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
    /// What reading the election asks: the leader, and with `list` the candidates listed.
    pub(crate) fn reads(&self, list: bool) -> ElectionReads {
        ElectionReads {
            lock: self.keys.lock.clone(),
            record: Arc::clone(&self.record),
            queue: Arc::clone(&self.queue),
            transitions: Arc::clone(&self.transitions),
            values: Arc::clone(&self.values),
            list,
        }
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

/// An election's read (the leader, and its candidates when `list`), as one `MULTI`/`EXEC`
/// (`backend/node/reads.rs`): it holds the keys only, so the watcher that keeps it holds no
/// client.
#[derive(Clone)]
pub(crate) struct ElectionReads {
    lock: String,
    record: Arc<str>,
    queue: Arc<str>,
    transitions: Arc<str>,
    values: Arc<str>,
    list: bool,
}

impl ElectionReads {
    /// The read of these keys (the tests' own states).
    #[cfg(test)]
    pub(crate) fn of(
        lock: &str,
        record: &str,
        queue: &str,
        transitions: &str,
        values: &str,
        list: bool,
    ) -> Self {
        ElectionReads {
            lock: lock.to_owned(),
            record: record.into(),
            queue: queue.into(),
            transitions: transitions.into(),
            values: values.into(),
            list,
        }
    }

    /// Reads the election on `node`. Counting the candidates costs the same however many
    /// queue; listing them also reads the server's clock, the queue and every candidate's
    /// value (the whole hash: the transaction cannot name the queue's waiters before it has
    /// read the queue).
    pub(crate) async fn run(&self, node: &Node) -> Result<ElectionStatus> {
        let mut reads = vec![
            redis::cmd("LLEN").arg(&*self.queue).take(),
            redis::cmd("MGET").arg(&self.lock).take(),
            redis::cmd("HMGET")
                .arg(&*self.record)
                .arg(&["owner", "value", "term", "since", "v"])
                .take(),
            redis::cmd("PTTL").arg(&self.lock).take(),
            redis::cmd("MGET").arg(&*self.transitions).take(),
        ];
        if self.list {
            reads.extend([
                redis::cmd("TIME"),
                redis::cmd("LRANGE").arg(&*self.queue).arg(0).arg(-1).take(),
                redis::cmd("HGETALL").arg(&*self.values).take(),
            ]);
        }
        node.read("leader", &reads, status_from_reads).await
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
    /// A candidate from its entry in the values' hash (`<queued since> <value>`, or none when
    /// its campaign recorded none), with the server's clock at the read.
    fn read(entry: Option<&[u8]>, now_ms: i64) -> Self {
        let recorded = entry.and_then(|bytes| {
            bytes.iter().position(|&b| b == b' ').and_then(|space| {
                let (since, value) = bytes.split_at(space);
                let since = std::str::from_utf8(since).ok()?.parse::<u64>().ok()?;
                // `value` starts with the space.
                let value = value.get(1..).unwrap_or_default();
                Some((since, String::from_utf8_lossy(value).into_owned()))
            })
        });
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

/// An election's status from its reads ([`ElectionReads::run`], in that order); `None` for a
/// reply of another shape, or a leader record whose term or start is no number.
fn status_from_reads(replies: &[redis::Value]) -> Option<ElectionStatus> {
    use redis::Value;
    let (
        [
            Value::Int(candidates),
            Value::Array(owner),
            Value::Array(record),
            Value::Int(lease_left),
            Value::Array(transitions),
        ],
        listed,
    ) = replies.split_first_chunk::<5>()?
    else {
        return None;
    };
    let text = |v: Option<&Value>| match v {
        Some(Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    let owner = owner.first()?;
    // No leader: the key is gone, or held by an owner without a record (a grant between its
    // lease and its record, which the transaction, atomic as the grant's script, never
    // splits).
    let leader = if *owner == Value::Nil || record.first() != Some(owner) {
        None
    } else {
        let count = |v: Option<&Value>| lua_number(v).unwrap_or(0).max(0).unsigned_abs();
        Some(Leader {
            value: text(record.get(1))?,
            term: FencingToken::new(text(record.get(2))?.parse().ok()?),
            since: SystemTime::UNIX_EPOCH
                + Duration::from_millis(lua_number(record.get(3))?.max(0).unsigned_abs()),
            lease_left: Duration::from_millis((*lease_left).max(0).unsigned_abs()),
            proclaims: count(record.get(4)),
            transitions: count(transitions.first()),
        })
    };
    let queue = match listed {
        [] => Vec::new(),
        [time, Value::Array(waiters), values] => {
            let now = reads::server_ms(time)?;
            let values: HashMap<Vec<u8>, Vec<u8>> = redis::from_redis_value_ref(values).ok()?;
            waiters
                .iter()
                .map(|waiter| {
                    let entry = match waiter {
                        Value::BulkString(id) => values.get(id).map(Vec::as_slice),
                        _ => None,
                    };
                    Candidate::read(entry, now)
                })
                .collect()
        }
        _ => return None,
    };
    Some(ElectionStatus {
        leader,
        candidates: u64::try_from(*candidates).ok()?,
        queue,
    })
}

/// A stored field as Lua's `tonumber` reads it, truncated to an integer: `None` for no field,
/// or no number.
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
