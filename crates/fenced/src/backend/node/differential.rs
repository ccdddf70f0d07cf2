//! Differential tests of the executor loop's ways (`exec.rs`, invariant 4): from one
//! generated state, every way of a step answers what its script answers and leaves the same
//! keys. Property tests over generated states and steps (proptest, with a fixed seed so that
//! a run is repeatable, shrinking to the smallest state that tells two ways apart), on a real
//! server: `scripts/test` runs them on every server of the matrix.
//!
//! The ways: the script on a node that sends scripts; the grant's transaction on that node
//! and on one that sends none (whose fence start and mint then need no script either); the
//! native compare-and-delete where the server has it; the `WATCH` transaction; and for a
//! renewal batch, one pipeline of scripts against `WATCH` transactions in parts. The one
//! documented difference is left out of the generated states: a grant by transaction does not
//! read the tombstone of an abandoned attempt (`grant.rs`, invariant 5).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use redis::Value;
use redis::aio::ConnectionManager;

use super::exec::Executor;
use super::{Conn, Node};
use crate::backend::Dedicated;
use crate::backend::pool::TxPool;
use crate::error::Error;
use crate::keys::LockKeys;
use crate::kind::LeaseKind;
use crate::kind::exclusive::Exclusive;
use crate::scripts::{FORCE_RELEASE, ScriptCall};
use crate::token::{FenceId, OwnerToken};

/// Who holds the lock key before the step.
#[derive(Clone, Copy, Debug)]
enum Holder {
    Free,
    /// The caller, with a ttl or without one.
    Caller {
        expires: bool,
    },
    Another,
    /// A key of another type (a list), with a ttl or without one.
    Foreign {
        expires: bool,
    },
}

/// What the fence key holds before the step.
#[derive(Clone, Copy, Debug)]
enum Fence {
    Missing,
    Stream,
    /// A key of another type (a hash).
    Foreign,
}

#[derive(Clone, Copy, Debug)]
struct State {
    holder: Holder,
    /// The caller's newest applied epoch, if any.
    epoch: Option<u64>,
    /// The tombstone of an abandoned attempt of the caller.
    tombstone: bool,
    /// A re-entrant lock's holds beside the lock key.
    holds: bool,
    fence: Fence,
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Grant,
    Extend { ttl_ms: u64, epoch: u64 },
    Release { announce: bool },
    Abandon { announce: bool, patience_ms: u64 },
    ForceRelease,
}

fn holder() -> impl Strategy<Value = Holder> {
    prop_oneof![
        Just(Holder::Free),
        any::<bool>().prop_map(|expires| Holder::Caller { expires }),
        Just(Holder::Another),
        any::<bool>().prop_map(|expires| Holder::Foreign { expires }),
    ]
}

fn state() -> impl Strategy<Value = State> {
    let fence = prop_oneof![
        Just(Fence::Missing),
        Just(Fence::Stream),
        Just(Fence::Foreign)
    ];
    (
        holder(),
        proptest::option::of(0u64..4),
        any::<bool>(),
        any::<bool>(),
        fence,
    )
        .prop_map(|(holder, epoch, tombstone, holds, fence)| State {
            holder,
            epoch,
            tombstone,
            holds,
            fence,
        })
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Grant),
        1 => (prop_oneof![Just(20_000u64), Just(40_000)], 0u64..4)
            .prop_map(|(ttl_ms, epoch)| Step::Extend { ttl_ms, epoch }),
        1 => any::<bool>().prop_map(|announce| Step::Release { announce }),
        1 => (any::<bool>(), prop_oneof![Just(5_000u64), Just(15_000)])
            .prop_map(|(announce, patience_ms)| Step::Abandon {
                announce,
                patience_ms
            }),
        1 => Just(Step::ForceRelease),
    ]
}

/// The two nodes on one server: one sends scripts, one sends none.
pub(super) struct Nodes {
    scripted: Node,
    pub(super) scriptless: Node,
    raw: ConnectionManager,
}

async fn nodes(url: &str) -> Nodes {
    let timeout = Duration::from_secs(3);
    let client = redis::Client::open(url).unwrap();
    let node = |client: redis::Client| async move {
        let pool = TxPool::new(Dedicated::Fixed(client.clone()), None, 4, timeout);
        Node::new(
            Conn::Single(ConnectionManager::new(client).await.unwrap()),
            timeout,
        )
        .with_counted_grants(true)
        .with_pool(Arc::new(pool))
    };
    Nodes {
        scripted: node(client.clone()).await,
        scriptless: node(client.clone()).await.with_scripts_forbidden(true),
        raw: ConnectionManager::new(client).await.unwrap(),
    }
}

/// A server of its own, and a runtime to drive a node from a property's closure: the set-up
/// of every generated-state test on a real server (the election's read's too).
pub(crate) fn server_and_runtime() -> (fenced_testkit::RedisServer, tokio::runtime::Runtime) {
    let server =
        fenced_testkit::RedisServer::start().unwrap_or_else(|e| panic!("needs redis-server: {e}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (server, runtime)
}

/// [`server_and_runtime`], and the two nodes on that server.
pub(super) fn lab() -> (fenced_testkit::RedisServer, tokio::runtime::Runtime, Nodes) {
    let (server, runtime) = server_and_runtime();
    let nodes = runtime.block_on(nodes(&server.url()));
    (server, runtime, nodes)
}

/// The lock the steps are of, and its caller.
struct Subject {
    lock: Exclusive,
    caller: OwnerToken,
    another: OwnerToken,
}

impl Subject {
    fn keys(&self) -> [String; 5] {
        let keys = &self.lock.keys;
        [
            keys.lock.clone(),
            keys.epoch(&self.caller),
            keys.tombstone(&self.caller),
            keys.holds.clone(),
            keys.fence.clone(),
        ]
    }

    fn call(&self, step: Step) -> ScriptCall {
        let (lock, caller) = (&self.lock, &self.caller);
        let message = |announce: bool| if announce { "c 1" } else { "" };
        match step {
            Step::Grant => lock.acquire(caller, 30_000),
            Step::Extend { ttl_ms, epoch } => lock.extend(caller, ttl_ms, epoch),
            Step::Release { announce } => lock.release(caller, message(announce)),
            Step::Abandon {
                announce,
                patience_ms,
            } => lock.abandon(caller, message(announce), patience_ms),
            Step::ForceRelease => ScriptCall::new(&FORCE_RELEASE)
                .key(&lock.keys.lock)
                .key(&lock.keys.holds)
                .arg(&lock.keys.channel)
                .arg("c 1"),
        }
    }

    /// Writes `state`, after deleting whatever the last run left.
    async fn write(&self, raw: &mut ConnectionManager, state: State) {
        let [lock, epoch, tombstone, holds, fence] = self.keys();
        let mut pipe = redis::pipe();
        pipe.cmd("DEL")
            .arg(&[&lock, &epoch, &tombstone, &holds, &fence])
            .ignore();
        match state.holder {
            Holder::Free => {}
            Holder::Caller { expires } => {
                pipe.cmd("SET")
                    .arg(&lock)
                    .arg(self.caller.as_str())
                    .ignore();
                if expires {
                    pipe.cmd("PEXPIRE").arg(&lock).arg(10_000).ignore();
                }
            }
            Holder::Another => {
                pipe.cmd("SET")
                    .arg(&lock)
                    .arg(self.another.as_str())
                    .arg("PX")
                    .arg(10_000)
                    .ignore();
            }
            Holder::Foreign { expires } => {
                pipe.cmd("RPUSH").arg(&lock).arg("x").ignore();
                if expires {
                    pipe.cmd("PEXPIRE").arg(&lock).arg(10_000).ignore();
                }
            }
        }
        if let Some(n) = state.epoch {
            pipe.cmd("SET")
                .arg(&epoch)
                .arg(n)
                .arg("PX")
                .arg(10_000)
                .ignore();
        }
        if state.tombstone {
            pipe.cmd("SET")
                .arg(&tombstone)
                .arg(1)
                .arg("PX")
                .arg(10_000)
                .ignore();
        }
        if state.holds {
            pipe.cmd("HSET").arg(&holds).arg("h").arg(1).ignore();
        }
        match state.fence {
            Fence::Missing => {}
            Fence::Stream => {
                // An ID of its own, the same every run: a step that is no grant leaves it.
                pipe.cmd("XADD")
                    .arg(&fence)
                    .arg("MAXLEN")
                    .arg(0)
                    .arg("1000-5")
                    .arg("f")
                    .arg(1)
                    .ignore();
                pipe.cmd("PEXPIRE").arg(&fence).arg(60_000).ignore();
            }
            Fence::Foreign => {
                pipe.cmd("HSET").arg(&fence).arg("f").arg(1).ignore();
            }
        }
        let () = pipe.query_async(raw).await.unwrap();
    }

    /// The keys as they are now: each one's type, content and remaining life.
    async fn snapshot(&self, raw: &mut ConnectionManager) -> Vec<Key> {
        let mut out = Vec::new();
        for key in self.keys() {
            let (kind, pttl): (String, i64) = redis::pipe()
                .cmd("TYPE")
                .arg(&key)
                .cmd("PTTL")
                .arg(&key)
                .query_async(raw)
                .await
                .unwrap();
            let content = match kind.as_str() {
                "string" => redis::cmd("GET").arg(&key).query_async(raw).await.unwrap(),
                "list" => redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query_async(raw)
                    .await
                    .unwrap(),
                "hash" => redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(raw)
                    .await
                    .unwrap(),
                "stream" => last_id(raw, &key).await,
                _ => Value::Nil,
            };
            out.push(Key {
                name: key,
                kind,
                content,
                pttl,
            });
        }
        out
    }
}

/// A stream's last ID, as a value.
async fn last_id(raw: &mut ConnectionManager, key: &str) -> Value {
    let info: Value = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(key)
        .query_async(raw)
        .await
        .unwrap();
    let pairs: Vec<(Value, Value)> = match info {
        Value::Map(pairs) => pairs,
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| Some((p.first()?.clone(), p.get(1)?.clone())))
            .collect(),
        other => panic!("XINFO STREAM answered {other:?}"),
    };
    pairs
        .into_iter()
        .find(|(name, _)| {
            matches!(name, Value::BulkString(b) if b == b"last-generated-id")
                || matches!(name, Value::SimpleString(s) if s == "last-generated-id")
        })
        .map(|(_, id)| id)
        .unwrap_or(Value::Nil)
}

/// One key after a step.
#[derive(Debug)]
struct Key {
    name: String,
    kind: String,
    content: Value,
    pttl: i64,
}

/// What one way did: its answer, and the keys it left.
#[derive(Debug)]
struct Outcome {
    way: &'static str,
    answer: Answer,
    keys: Vec<Key>,
}

/// An answer as two ways must agree on it: a grant's token is the fence's last ID (each run
/// mints its own), a remaining lease counts within a margin, an error by what it says of the
/// keys.
#[derive(Debug)]
enum Answer {
    Granted,
    Busy(i64),
    Value(Value),
    WrongType(String),
    Failed(String),
}

/// How far two readings of one remaining life may be apart: the runs follow each other.
const MARGIN_MS: i64 = 1_500;

fn token_is_last_id(token: &Value, keys: &[Key]) -> bool {
    let Value::BulkString(token) = token else {
        return false;
    };
    let fence = keys.last().map(|k| &k.content);
    match fence {
        Some(Value::BulkString(id)) => {
            matches!(FenceId::parse(id), FenceId::Token(t) if t.to_string().as_bytes() == token.as_slice())
        }
        Some(Value::SimpleString(id)) => {
            matches!(FenceId::parse(id.as_bytes()), FenceId::Token(t) if t.to_string().as_bytes() == token.as_slice())
        }
        _ => false,
    }
}

fn answer(step: Step, reply: Result<Value, Error>, keys: &[Key]) -> Answer {
    let fence = keys.last().map_or("", |k| k.name.as_str());
    match reply {
        Err(Error::WrongType { key, .. }) => Answer::WrongType(key),
        Err(e) => Answer::Failed(e.to_string()),
        Ok(Value::Array(items)) if matches!(step, Step::Grant) => match &items[..] {
            [Value::Int(0), Value::Int(pttl)] => Answer::Busy(*pttl),
            // A key of another type, named by its place among the call's keys: the reply the
            // core turns into the error the transaction raises (`kind/reply.rs`).
            [Value::Int(0), Value::Int(-5), Value::Int(2)] => Answer::WrongType(fence.to_owned()),
            _ => Answer::Value(Value::Array(items)),
        },
        Ok(token) if matches!(step, Step::Grant) => {
            assert!(
                token_is_last_id(&token, keys),
                "a grant's token {token:?} is not its fence's last ID: {keys:?}"
            );
            Answer::Granted
        }
        Ok(value) => Answer::Value(value),
    }
}

fn same_answer(a: &Answer, b: &Answer) -> bool {
    match (a, b) {
        (Answer::Granted, Answer::Granted) => true,
        (Answer::Busy(x), Answer::Busy(y)) => (x - y).abs() <= MARGIN_MS,
        (Answer::Value(x), Answer::Value(y)) => x == y,
        (Answer::WrongType(x), Answer::WrongType(y)) | (Answer::Failed(x), Answer::Failed(y)) => {
            x == y
        }
        _ => false,
    }
}

fn same_keys(step: Step, a: &[Key], b: &[Key]) -> bool {
    a.iter().zip(b).all(|(x, y)| {
        let life = match (x.pttl, y.pttl) {
            (p, q) if p < 0 || q < 0 => p == q,
            (p, q) => (p - q).abs() <= MARGIN_MS,
        };
        // A grant's fence moves to an ID of its own run.
        let content = (matches!(step, Step::Grant) && x.kind == "stream") || x.content == y.content;
        x.name == y.name && x.kind == y.kind && life && content
    })
}

/// The ways that run `step`, as (label, node sends scripts, way).
fn ways(step: Step) -> Vec<(&'static str, bool, Executor)> {
    match step {
        Step::Grant => vec![
            ("transaction", true, Executor::Transaction),
            ("transaction without scripts", false, Executor::Transaction),
        ],
        Step::Release { .. } => vec![
            ("native", false, Executor::Native),
            ("watched", false, Executor::Watched),
        ],
        _ => vec![("watched", false, Executor::Watched)],
    }
}

async fn run_way(
    nodes: &Nodes,
    subject: &Subject,
    state: State,
    step: Step,
    (label, scripted, way): (&'static str, bool, Executor),
) -> Option<Outcome> {
    let mut raw = nodes.raw.clone();
    subject.write(&mut raw, state).await;
    let node = if scripted {
        &nodes.scripted
    } else {
        &nodes.scriptless
    };
    let reply = match node.run_as(way, &subject.call(step), false).await {
        // Not a way this server runs (the native command of a newer server).
        Ok(None) => return None,
        Ok(Some((value, _))) => Ok(value),
        Err(e) => Err(e),
    };
    let keys = subject.snapshot(&mut raw).await;
    Some(Outcome {
        way: label,
        answer: answer(step, reply, &keys),
        keys,
    })
}

/// Runs `case` every way and compares each with the script's run.
async fn check(
    nodes: &Nodes,
    subject: &Subject,
    state: State,
    step: Step,
) -> Result<Vec<&'static str>, TestCaseError> {
    let script = run_way(
        nodes,
        subject,
        state,
        step,
        ("script", true, Executor::Script),
    )
    .await
    .expect("the script always runs");
    let mut compared = Vec::new();
    for way in ways(step) {
        let Some(other) = run_way(nodes, subject, state, step, way).await else {
            continue;
        };
        prop_assert!(
            same_answer(&script.answer, &other.answer)
                && same_keys(step, &script.keys, &other.keys),
            "{step:?} from {state:?}:\n  script: {:?} {:?}\n  {}: {:?} {:?}",
            script.answer,
            script.keys,
            other.way,
            other.answer,
            other.keys
        );
        compared.push(other.way);
    }
    Ok(compared)
}

#[test]
fn every_way_of_a_lock_step_answers_and_writes_what_its_script_does() {
    let (_server, runtime, nodes) = lab();
    let subject = Subject {
        lock: Exclusive {
            name: "d".into(),
            keys: Arc::new(LockKeys::new("diff:", "d")),
            fence_retention_ms: 60_000,
            counted: true,
        },
        caller: OwnerToken::generate().unwrap(),
        another: OwnerToken::generate().unwrap(),
    };
    let mut runner = runner(400);
    let compared = std::cell::RefCell::new(std::collections::BTreeMap::<&str, usize>::new());
    let cases = (state(), step()).prop_filter(
        "a grant by transaction does not read a tombstone (documented)",
        |(state, step)| !(matches!(step, Step::Grant) && state.tombstone),
    );
    let result = runner.run(&cases, |(state, step)| {
        for way in runtime.block_on(check(&nodes, &subject, state, step))? {
            *compared.borrow_mut().entry(way).or_default() += 1;
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // Every way ran, many times: the native one where the server has its command.
    let compared = compared.into_inner();
    let has_native: redis::Value = runtime
        .block_on(
            redis::cmd("COMMAND")
                .arg("INFO")
                .arg("DELIFEQ")
                .query_async(&mut nodes.raw.clone()),
        )
        .unwrap();
    let has_native = !matches!(&has_native, Value::Array(a) if matches!(a[..], [Value::Nil]));
    let mut expected = vec!["transaction", "transaction without scripts", "watched"];
    if has_native {
        expected.push("native");
    }
    for way in expected {
        let n = compared.get(way).copied().unwrap_or(0);
        assert!(n >= 20, "{way} compared {n} times: {compared:?}");
    }
    println!("compared with the script: {compared:?}");
}

/// The runner of both tests: a fixed seed, no file of past failures.
/// A runner of `cases` generated cases with a fixed seed, so that a run is repeatable.
pub(crate) fn runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

/// A renewal batch of the leases of `subjects`, each from its own state.
async fn renew_batch(
    nodes: &Nodes,
    scripted: bool,
    subjects: &[Subject],
    cases: &[(State, Step)],
) -> (Vec<Answer>, Vec<Vec<Key>>) {
    let mut raw = nodes.raw.clone();
    for (subject, (state, _)) in subjects.iter().zip(cases) {
        subject.write(&mut raw, *state).await;
    }
    let calls: Vec<ScriptCall> = subjects
        .iter()
        .zip(cases)
        .map(|(subject, (_, step))| subject.call(*step))
        .collect();
    let node = if scripted {
        &nodes.scripted
    } else {
        &nodes.scriptless
    };
    let replies = node.run_batch("renew", &calls).await.unwrap();
    let mut answers = Vec::new();
    let mut keys = Vec::new();
    for ((subject, (_, step)), reply) in subjects.iter().zip(cases).zip(replies) {
        let after = subject.snapshot(&mut raw).await;
        answers.push(answer(*step, reply, &after));
        keys.push(after);
    }
    (answers, keys)
}

#[test]
fn a_renewal_batch_without_scripts_answers_and_writes_what_its_scripts_do() {
    let (_server, runtime, nodes) = lab();
    let caller = OwnerToken::generate().unwrap();
    let subjects: Vec<Subject> = (0..8)
        .map(|i| Subject {
            lock: Exclusive {
                name: format!("b{i}").into(),
                keys: Arc::new(LockKeys::new("diff:", &format!("b{i}"))),
                fence_retention_ms: 60_000,
                counted: true,
            },
            caller: caller.clone(),
            another: OwnerToken::generate().unwrap(),
        })
        .collect();
    let renewal = (prop_oneof![Just(20_000u64), Just(40_000)], 0u64..4)
        .prop_map(|(ttl_ms, epoch)| Step::Extend { ttl_ms, epoch });
    let batch = proptest::collection::vec((state(), renewal), 1..=8);
    let result = runner(150).run(&batch, |cases| {
        let subjects = &subjects[..cases.len()];
        let (by_script, keys_by_script) =
            runtime.block_on(renew_batch(&nodes, true, subjects, &cases));
        let (watched, keys_watched) = runtime.block_on(renew_batch(&nodes, false, subjects, &cases));
        for (i, (state, step)) in cases.iter().enumerate() {
            prop_assert!(
                same_answer(&by_script[i], &watched[i])
                    && same_keys(*step, &keys_by_script[i], &keys_watched[i]),
                "call {i} of {}: {step:?} from {state:?}:\n  script: {:?} {:?}\n  watched: {:?} {:?}",
                cases.len(),
                by_script[i],
                keys_by_script[i],
                watched[i],
                keys_watched[i]
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A semaphore's holders as the generated state puts them: each ends this many ms from the
/// server's now (clear of the boundary, so runs ms apart agree on who is live), with this
/// count of permits (`None`: no count; `Some(None)`: a count that is no number).
type Holders = Vec<(i64, Option<Option<u32>>)>;

fn holders() -> impl Strategy<Value = Holders> {
    let end = prop_oneof![Just(-5_000i64), Just(-1_000), Just(3_000), Just(20_000)];
    let count = proptest::option::of(proptest::option::of(1u32..4));
    proptest::collection::vec((end, count), 0..6)
}

/// A semaphore's status read (one `MULTI`/`EXEC`), from `holders` written first.
async fn semaphore_status(
    nodes: &Nodes,
    holders: &Holders,
    foreign: bool,
) -> Result<Vec<i64>, String> {
    let (zset, counts) = ("diff:{s}:holders", "diff:{s}:counts");
    let mut raw = nodes.raw.clone();
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let now = secs * 1000 + micros / 1000;
    let mut pipe = redis::pipe();
    pipe.cmd("DEL").arg(&[zset, counts]).ignore();
    if foreign {
        pipe.cmd("SET").arg(zset).arg("x").ignore();
    }
    for (i, (end, count)) in holders.iter().enumerate() {
        let owner = format!("o{i}");
        if !foreign {
            pipe.cmd("ZADD")
                .arg(zset)
                .arg(now + end)
                .arg(&owner)
                .ignore();
        }
        match count {
            Some(Some(n)) => pipe.cmd("HSET").arg(counts).arg(&owner).arg(*n).ignore(),
            Some(None) => pipe.cmd("HSET").arg(counts).arg(&owner).arg("x").ignore(),
            None => &mut pipe,
        };
    }
    let () = pipe.query_async(&mut raw).await.unwrap();
    let reads = [
        redis::cmd("TIME"),
        super::reads::zrange_all(zset),
        redis::cmd("HGETALL").arg(counts).take(),
    ];
    nodes
        .scriptless
        .read("semaphore status", &reads, super::reads::semaphore_status)
        .await
        .map_err(|e| match e {
            Error::WrongType { key, .. } => format!("wrong type: {key}"),
            e => e.to_string(),
        })
}

/// What a semaphore's status must read from `holders`: the permits and number of the
/// holders whose lease runs (a count missing or no number counts 0), and the ms to the
/// earliest live end; a holders key of another type named.
fn expected_status(holders: &Holders, foreign: bool) -> Result<Vec<i64>, String> {
    if foreign {
        return Err("wrong type: diff:{s}:holders".into());
    }
    let live: Vec<_> = holders.iter().filter(|(end, _)| *end > 0).collect();
    let held = live
        .iter()
        .map(|(_, count)| i64::from(count.flatten().unwrap_or(0)))
        .sum();
    let first = live.iter().map(|(end, _)| *end).min().unwrap_or(-1);
    Ok(vec![held, live.len() as i64, first])
}

#[test]
fn a_semaphore_status_reads_the_live_holders_of_any_state() {
    let (_server, runtime, nodes) = lab();
    let cases = (holders(), proptest::bool::weighted(0.1));
    let result = runner(200).run(&cases, |(holders, foreign)| {
        let read = runtime.block_on(semaphore_status(&nodes, &holders, foreign));
        let expected = expected_status(&holders, foreign);
        // The ms to the first lease's end pass between the write and the read.
        let same = match (&read, &expected) {
            (Ok(a), Ok(b)) => {
                a.len() == 3
                    && a[..2] == b[..2]
                    && ((a[2] < 0 && b[2] < 0) || (0..=MARGIN_MS).contains(&(b[2] - a[2])))
            }
            (a, b) => a == b,
        };
        prop_assert!(
            same,
            "from {holders:?} (foreign {foreign}): read {read:?}, expected {expected:?}"
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A read-write lock's status read (one `MULTI`/`EXEC`), from `readers` and `writers` (their
/// ends, ms from the server's now) written first; `foreign`: the readers' key holds a string.
async fn rw_status(
    nodes: &Nodes,
    readers: &[i64],
    writers: &[i64],
    foreign: bool,
) -> Result<Vec<u64>, String> {
    let (readers_key, writers_key) = ("diff:{rw}:readers", "diff:{rw}:writers");
    let mut raw = nodes.raw.clone();
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let now = secs * 1000 + micros / 1000;
    let mut pipe = redis::pipe();
    pipe.cmd("DEL").arg(&[readers_key, writers_key]).ignore();
    if foreign {
        pipe.cmd("SET").arg(readers_key).arg("x").ignore();
    }
    for (key, ends) in [(readers_key, readers), (writers_key, writers)] {
        for (i, end) in ends.iter().enumerate() {
            if !(foreign && key == readers_key) {
                pipe.cmd("ZADD")
                    .arg(key)
                    .arg(now + end)
                    .arg(format!("m{i}"))
                    .ignore();
            }
        }
    }
    let () = pipe.query_async(&mut raw).await.unwrap();
    let reads = [
        redis::cmd("TIME"),
        super::reads::zrange_all(readers_key),
        super::reads::zrange_all(writers_key),
    ];
    nodes
        .scriptless
        .read("rw status", &reads, super::reads::rw_status)
        .await
        .map_err(|e| match e {
            Error::WrongType { key, .. } => format!("wrong type: {key}"),
            e => e.to_string(),
        })
}

#[test]
fn a_read_write_locks_status_counts_the_live_readers_and_writers_of_any_state() {
    let (_server, runtime, nodes) = lab();
    let ends = || {
        let end = prop_oneof![Just(-5_000i64), Just(-1_000), Just(3_000), Just(20_000)];
        proptest::collection::vec(end, 0..6)
    };
    let cases = (ends(), ends(), proptest::bool::weighted(0.1));
    let result = runner(150).run(&cases, |(readers, writers, foreign)| {
        let read = runtime.block_on(rw_status(&nodes, &readers, &writers, foreign));
        let live = |ends: &[i64]| ends.iter().filter(|end| **end > 0).count() as u64;
        let expected = if foreign {
            Err("wrong type: diff:{rw}:readers".to_string())
        } else {
            Ok(vec![live(&readers), live(&writers)])
        };
        prop_assert_eq!(
            &read,
            &expected,
            "readers {:?}, writers {:?}",
            readers,
            writers
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn the_type_check_after_a_refusal_leaves_a_held_lease_alone_every_way() {
    let (_server, runtime, nodes) = lab();
    runtime.block_on(async {
        let mut raw = nodes.raw.clone();
        let key = "diff:{typed}";
        let call = ScriptCall::new(&crate::scripts::UNFENCED_ACQUIRE)
            .key(key)
            .arg("me")
            .arg(30_000);
        // The script or the native command on one node, the `WATCH` twin on the other.
        for node in [&nodes.scripted, &nodes.scriptless] {
            let () = redis::cmd("SET")
                .arg(key)
                .arg("holder")
                .arg("PX")
                .arg(30_000)
                .query_async(&mut raw)
                .await
                .unwrap();
            let reply = node.refusal_type(&call).await.unwrap();
            assert_eq!(reply, crate::kind::AcquireReply::Busy { remaining: None });
            let (held, left): (Option<String>, i64) = redis::pipe()
                .cmd("GET")
                .arg(key)
                .cmd("PTTL")
                .arg(key)
                .query_async(&mut raw)
                .await
                .unwrap();
            assert_eq!(held.as_deref(), Some("holder"));
            assert!(left > 28_000, "{left}");
            let () = redis::pipe()
                .cmd("DEL")
                .arg(key)
                .ignore()
                .cmd("HSET")
                .arg(key)
                .arg("f")
                .arg("v")
                .ignore()
                .query_async(&mut raw)
                .await
                .unwrap();
            let reply = node.refusal_type(&call).await.unwrap();
            assert_eq!(reply, crate::kind::AcquireReply::WrongType { key: 1 });
            let kind: String = redis::cmd("TYPE")
                .arg(key)
                .query_async(&mut raw)
                .await
                .unwrap();
            assert_eq!(kind, "hash");
            let () = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut raw)
                .await
                .unwrap();
        }
    });
}
