//! The model and the code agree: walks through the model's states, replayed step by step
//! against a real server through the library's own steps, with every reply compared.
//!
//! Each walk picks, at each state, one of the model's actions that a test can make happen on
//! a real server: a client's acquire (`Lock::try_acquire`: the grant by transaction, or by
//! script where the client is built with `counted_grants(false)`, one of each), its release,
//! and the faults that put data back or take it away (a snapshot taken by `DUMP`, a fence put
//! back by `RESTORE`, the whole name put back as `DEBUG LOADAOF` would, the lock key or the
//! fence deleted as an eviction would). Time does not pass in the model, and the leases are
//! long on the server, so nothing expires on either side.
//!
//! Compared at every step:
//! - granted or busy, as the model answers;
//! - the token: exactly what the model's fence rule (`fence::next_id`, at 1000 sequences a
//!   ms) gives from the fence's last ID before the step and the server clock during it (read
//!   by `TIME` just before and just after);
//! - after a refusal, the fence: moved as the model moves it (a refused grant by transaction
//!   burns an ID of a fence that exists, and starts none), or not at all where the grant is
//!   by script;
//! - every token above every token before, wherever the model says so.
//!
//! A change to a script or a transaction that the model does not know (another start of a
//! lost fence, no carry, a refusal that starts a fence, a release that deletes another
//! owner's key) answers differently here.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed step should fail the test loudly

use std::time::Duration;

use fenced::{Client, LockGuard};
use fenced_model::config::{Config, Fault};
use fenced_model::fence::{Id, SEQ_LIMIT, next_id, token};
use fenced_model::model::{Action, Protocol};
use fenced_model::state::{Phase, State};
use fenced_testkit::RedisServer;
use redis::aio::MultiplexedConnection;
use stateright::Model;

/// Walks, and steps per walk.
const WALKS: u64 = 24;
const STEPS: usize = 30;

/// The faults a test can cause on a real server.
const REPLAYABLE: [Fault; 5] = [
    Fault::Save,
    Fault::LoadAof,
    Fault::RestoreFence,
    Fault::EvictLock,
    Fault::EvictFence,
];

/// A small deterministic generator (xorshift), so that a failing walk replays.
struct Walk(u64);

impl Walk {
    fn pick(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// `DUMP`s of the lock key and the fence, `None` where missing.
type Dumps = (Option<Vec<u8>>, Option<Vec<u8>>);

struct Real {
    conn: MultiplexedConnection,
    clients: Vec<Client>,
    guards: Vec<Option<LockGuard>>,
    lock_key: String,
    fence_key: String,
    name: String,
    /// `DUMP`s of the lock key and the fence (nil where missing).
    disk: Option<Dumps>,
}

impl Real {
    async fn server_ms(&mut self) -> i64 {
        let (secs, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.conn)
            .await
            .expect("TIME");
        secs * 1000 + micros / 1000
    }

    /// The fence's last ID, `None` where there is no fence.
    async fn fence(&mut self) -> Option<Id> {
        let exists: bool = redis::cmd("EXISTS")
            .arg(&self.fence_key)
            .query_async(&mut self.conn)
            .await
            .expect("EXISTS");
        if !exists {
            return None;
        }
        let info: redis::Value = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(&self.fence_key)
            .query_async(&mut self.conn)
            .await
            .expect("XINFO STREAM");
        let mut map: std::collections::HashMap<String, redis::Value> =
            redis::FromRedisValue::from_redis_value(info).expect("XINFO reply");
        let last: String = redis::FromRedisValue::from_redis_value(
            map.remove("last-generated-id").expect("last-generated-id"),
        )
        .expect("an ID");
        let (ms, seq) = last.split_once('-').expect("ms-seq");
        Some(Id {
            ms: ms.parse().expect("ms"),
            seq: seq.parse().expect("seq"),
        })
    }

    async fn dump(&mut self, key: &str) -> Option<Vec<u8>> {
        redis::cmd("DUMP")
            .arg(key)
            .query_async(&mut self.conn)
            .await
            .expect("DUMP")
    }

    async fn put_back(&mut self, key: &str, dump: Option<Vec<u8>>) {
        let mut del = redis::cmd("DEL");
        del.arg(key);
        let () = del.query_async(&mut self.conn).await.expect("DEL");
        if let Some(bytes) = dump {
            let () = redis::cmd("RESTORE")
                .arg(key)
                .arg(600_000)
                .arg(bytes)
                .query_async(&mut self.conn)
                .await
                .expect("RESTORE");
        }
    }

    async fn delete(&mut self, key: &str) {
        let () = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut self.conn)
            .await
            .expect("DEL");
    }
}

/// The model's check for a conformance walk: the replayable faults, as many as a walk takes,
/// leases that never expire, time that does not pass.
fn walk_config() -> Config {
    Config {
        faults: REPLAYABLE.to_vec(),
        prompt: true,
        writes: false,
        seq_limit: SEQ_LIMIT,
        scripted: 0b10,
        ttl: 1_000_000,
        drift: 0,
        max_faults: u8::MAX,
        max_attempts: u8::MAX,
        ..Config::base("conformance")
    }
}

fn replayable(action: &Action) -> bool {
    match action {
        Action::Acquire(_) | Action::Release(_) => true,
        Action::Fault(f) => REPLAYABLE.contains(f),
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_replies_are_the_models_on_every_walk() {
    let server = RedisServer::start().expect("a redis-server for the conformance test");
    let url = server.url();
    let redis = redis::Client::open(url.as_str()).expect("url");
    let conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let by_transaction = Client::connect(&url).await.expect("client");
    let by_script = Client::builder(&url)
        .counted_grants(false)
        .connect()
        .await
        .expect("client");
    let model = Protocol::new(walk_config());
    let mut grants_checked = 0;
    let mut refusals_checked = 0;
    for walk in 0..WALKS {
        let name = format!("conformance-{walk}");
        let mut real = Real {
            conn: conn.clone(),
            clients: vec![by_transaction.clone(), by_script.clone()],
            guards: vec![None, None],
            lock_key: format!("fenced:{{{name}}}"),
            fence_key: format!("fenced:{{{name}}}:fence"),
            name,
            disk: None,
        };
        let mut state: State = model.init_states().remove(0);
        let mut rng = Walk(0x9E37_79B9_7F4A_7C15 ^ (walk + 1));
        let mut tokens: Vec<u64> = Vec::new();
        let mut log = Vec::new();
        for _ in 0..STEPS {
            let mut actions = Vec::new();
            model.actions(&state, &mut actions);
            actions.retain(replayable);
            if actions.is_empty() {
                break;
            }
            let action = actions[rng.pick(actions.len())];
            log.push(format!("{action:?}"));
            let Some(next) = model.next_state(&state, action) else {
                continue;
            };
            let context = || format!("walk {walk}, steps {log:?}");
            match action {
                Action::Acquire(c) => {
                    let c = usize::from(c);
                    let last = real.fence().await;
                    let before = real.server_ms().await;
                    let lock = real.clients[c]
                        .lock(real.name.clone())
                        .with_ttl(Duration::from_secs(600))
                        .with_auto_renew(false);
                    let guard = lock.try_acquire().await.expect("try_acquire");
                    let after = real.server_ms().await;
                    let model_granted = matches!(next.clients[c].phase, Phase::Holding { .. });
                    assert_eq!(
                        guard.is_some(),
                        model_granted,
                        "granted on the server but not in the model, or the reverse: {}",
                        context()
                    );
                    let moved = real.fence().await;
                    let possible: Vec<Id> = (before..=after)
                        .map(|ms| next_id(last, ms, SEQ_LIMIT))
                        .collect();
                    match &guard {
                        Some(g) => {
                            let got = g.fencing_token().get();
                            assert!(
                                possible.iter().any(|id| token(*id, SEQ_LIMIT) == got),
                                "token {got} is not the model's rule from fence {last:?} and clock {before}..={after}: {}",
                                context()
                            );
                            if state.outside.is_none() && next.outside.is_none() {
                                assert!(
                                    tokens.iter().all(|t| *t < got),
                                    "token {got} not above {tokens:?}: {}",
                                    context()
                                );
                            }
                            tokens.push(got);
                            grants_checked += 1;
                        }
                        None if c == 0 => {
                            // The grant by transaction burned an ID of a fence that exists.
                            match last {
                                Some(_) => assert!(
                                    moved.is_some_and(|m| possible.contains(&m)),
                                    "a refused grant moved the fence to {moved:?}, not by the rule from {last:?}: {}",
                                    context()
                                ),
                                None => assert_eq!(
                                    moved,
                                    None,
                                    "a refused grant started a fence: {}",
                                    context()
                                ),
                            }
                            refusals_checked += 1;
                        }
                        None => {
                            assert_eq!(
                                moved,
                                last,
                                "a refused grant by script moved the fence: {}",
                                context()
                            );
                            refusals_checked += 1;
                        }
                    }
                    real.guards[c] = guard;
                }
                Action::Release(c) => {
                    if let Some(guard) = real.guards[usize::from(c)].take() {
                        // Its answer is not compared: a release that finds another owner, or
                        // none, reads as released before the deadline. What it did shows in
                        // the next grant, which the model predicts.
                        let _ = guard.release().await;
                    }
                }
                Action::Fault(Fault::Save) => {
                    let lock = real.dump(&real.lock_key.clone()).await;
                    let fence = real.dump(&real.fence_key.clone()).await;
                    real.disk = Some((lock, fence));
                }
                Action::Fault(Fault::LoadAof) => {
                    let (lock, fence) = real.disk.clone().unwrap_or((None, None));
                    let (lk, fk) = (real.lock_key.clone(), real.fence_key.clone());
                    real.put_back(&lk, lock).await;
                    real.put_back(&fk, fence).await;
                }
                Action::Fault(Fault::RestoreFence) => {
                    let fence = real.disk.clone().and_then(|(_, f)| f);
                    let fk = real.fence_key.clone();
                    real.put_back(&fk, fence).await;
                }
                Action::Fault(Fault::EvictLock) => {
                    let lk = real.lock_key.clone();
                    real.delete(&lk).await;
                }
                Action::Fault(Fault::EvictFence) => {
                    let fk = real.fence_key.clone();
                    real.delete(&fk).await;
                }
                _ => unreachable!("only replayable actions are picked"),
            }
            state = next;
        }
        for guard in real.guards.iter_mut().filter_map(Option::take) {
            let _ = guard.release().await;
        }
    }
    println!("{grants_checked} grants and {refusals_checked} refusals compared");
    assert!(
        grants_checked > 100,
        "too few grants compared: {grants_checked}"
    );
    assert!(
        refusals_checked > 20,
        "too few refusals compared: {refusals_checked}"
    );
}
