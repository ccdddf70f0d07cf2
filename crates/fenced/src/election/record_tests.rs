//! An election's read (`ElectionReads`, one `MULTI`/`EXEC` of reads) held to the state it
//! reads, over generated states on a real server: the leader only where the key holds the
//! record's owner, its fields as written (a proclaim count or a count of changes that is
//! missing or no number reads 0), the candidates counted, and listed in queue order with
//! their values where recorded.

use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use redis::aio::ConnectionManager;

use super::record::{ElectionReads, ElectionStatus};
use crate::backend::{Conn, Node, runner, server_and_runtime};

/// Who holds the leader key, and whose record is there.
#[derive(Clone, Copy, Debug)]
enum Seat {
    /// Neither.
    Empty,
    /// The key and the record of one owner: a leader.
    Led,
    /// The key of one owner, the record of another (a grant between its lease and its
    /// record): no leader.
    Between,
    /// The record alone (the lease ended): no leader.
    RecordOnly,
}

#[derive(Clone, Debug)]
struct State {
    seat: Seat,
    /// The record's proclaim count: a number, none, or not a number.
    proclaims: Option<Option<u32>>,
    /// The changes of leader: a number, none, or not a number.
    transitions: Option<Option<u32>>,
    /// The queue: each candidate's `(queued since, value)`, or none recorded.
    queue: Vec<Option<(u64, String)>>,
    list: bool,
}

fn state() -> impl Strategy<Value = State> {
    let seat = prop_oneof![
        1 => Just(Seat::Empty),
        3 => Just(Seat::Led),
        1 => Just(Seat::Between),
        1 => Just(Seat::RecordOnly),
    ];
    let count = || proptest::option::of(proptest::option::of(0u32..50));
    let candidate = proptest::option::of((1_600_000_000_000u64..1_900_000_000_000, "[a-z ]{0,8}"));
    (
        seat,
        count(),
        count(),
        proptest::collection::vec(candidate, 0..5),
        any::<bool>(),
    )
        .prop_map(|(seat, proclaims, transitions, queue, list)| State {
            seat,
            proclaims,
            transitions,
            queue,
            list,
        })
}

const LOCK: &str = "t:{e}";
const RECORD: &str = "t:{e}:leader";
const QUEUE: &str = "t:{e}:queue";
const TRANSITIONS: &str = "t:{e}:transitions";
const VALUES: &str = "t:{e}:queue:values";
const TERM: u64 = 1_700_000_000_000_007;
const SINCE: u64 = 1_700_000_000_123;

async fn write(raw: &mut ConnectionManager, state: &State) {
    let mut pipe = redis::pipe();
    pipe.cmd("DEL")
        .arg(&[LOCK, RECORD, QUEUE, TRANSITIONS, VALUES])
        .ignore();
    let (key_owner, record_owner) = match state.seat {
        Seat::Empty => (None, None),
        Seat::Led => (Some("owner-a"), Some("owner-a")),
        Seat::Between => (Some("owner-b"), Some("owner-a")),
        Seat::RecordOnly => (None, Some("owner-a")),
    };
    if let Some(owner) = key_owner {
        pipe.cmd("SET")
            .arg(LOCK)
            .arg(owner)
            .arg("PX")
            .arg(30_000)
            .ignore();
    }
    if let Some(owner) = record_owner {
        pipe.cmd("HSET")
            .arg(RECORD)
            .arg(&["owner", owner, "value", "host-a"])
            .arg("term")
            .arg(TERM)
            .arg("since")
            .arg(SINCE)
            .ignore();
        match state.proclaims {
            Some(Some(n)) => pipe.cmd("HSET").arg(RECORD).arg("v").arg(n).ignore(),
            Some(None) => pipe.cmd("HSET").arg(RECORD).arg("v").arg("x").ignore(),
            None => &mut pipe,
        };
    }
    match state.transitions {
        Some(Some(n)) => pipe.cmd("SET").arg(TRANSITIONS).arg(n).ignore(),
        Some(None) => pipe.cmd("SET").arg(TRANSITIONS).arg("x").ignore(),
        None => &mut pipe,
    };
    for (i, candidate) in state.queue.iter().enumerate() {
        let id = format!("w{i}");
        pipe.cmd("RPUSH").arg(QUEUE).arg(&id).ignore();
        if let Some((since, value)) = candidate {
            pipe.cmd("HSET")
                .arg(VALUES)
                .arg(&id)
                .arg(format!("{since} {value}"))
                .ignore();
        }
    }
    let () = pipe.query_async(raw).await.unwrap();
}

/// Whether `read` is what `state` holds.
fn agrees(read: &ElectionStatus, state: &State) -> Result<(), String> {
    let count = |c: Option<Option<u32>>| u64::from(c.flatten().unwrap_or(0));
    match (&read.leader, state.seat) {
        (Some(leader), Seat::Led) => {
            let expected = (
                "host-a",
                TERM,
                SystemTime::UNIX_EPOCH + Duration::from_millis(SINCE),
                count(state.proclaims),
                count(state.transitions),
            );
            let seen = (
                leader.value.as_str(),
                leader.term.get(),
                leader.since,
                leader.proclaims,
                leader.transitions,
            );
            if seen != expected {
                return Err(format!("leader {seen:?}, expected {expected:?}"));
            }
            if !(Duration::from_millis(25_000)..=Duration::from_millis(30_000))
                .contains(&leader.lease_left)
            {
                return Err(format!("lease left {:?}", leader.lease_left));
            }
        }
        (None, Seat::Empty | Seat::Between | Seat::RecordOnly) => {}
        (leader, seat) => return Err(format!("{leader:?} where the seat is {seat:?}")),
    }
    if read.candidates != state.queue.len() as u64 {
        return Err(format!("{} candidates", read.candidates));
    }
    let expected: Vec<_> = if state.list {
        state
            .queue
            .iter()
            .map(|c| {
                c.as_ref().map(|(since, value)| {
                    (
                        value.clone(),
                        SystemTime::UNIX_EPOCH + Duration::from_millis(*since),
                    )
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let seen: Vec<_> = read
        .queue
        .iter()
        .map(|c| c.value.clone().zip(c.queued_since))
        .collect();
    if seen != expected {
        return Err(format!("queue {seen:?}, expected {expected:?}"));
    }
    Ok(())
}

#[test]
fn an_elections_read_answers_what_its_keys_hold_in_any_state() {
    let (server, runtime) = server_and_runtime();
    let (node, raw) = runtime.block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let node = Node::new(
            Conn::Single(ConnectionManager::new(client.clone()).await.unwrap()),
            Duration::from_secs(3),
        );
        (node, ConnectionManager::new(client).await.unwrap())
    });
    let mut runner = runner(200);
    let result = runner.run(&state(), |state| {
        let reads = ElectionReads::of(LOCK, RECORD, QUEUE, TRANSITIONS, VALUES, state.list);
        let read = runtime.block_on(async {
            write(&mut raw.clone(), &state).await;
            reads.run(&node).await
        });
        let read = read.map_err(|e| TestCaseError::fail(e.to_string()))?;
        agrees(&read, &state).map_err(|e| TestCaseError::fail(format!("{e}, from {state:?}")))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
