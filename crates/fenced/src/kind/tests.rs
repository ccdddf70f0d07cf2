//! The scripts' answers, on a real server, in the cases the client cannot easily produce on
//! purpose: a release whose reply was lost, an acquire that arrives after it was abandoned,
//! late expiry changes, an emptied script cache, re-entry and leased permits.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionManager;

use super::exclusive::Exclusive;
use super::permits::{Permits, SemaphoreKeys};
use super::reentrant::ReentrantHold;
use super::*;
use crate::backend::Node;
use crate::keys::{LockKeys, ResourceKeys};
use crate::scripts::FENCED_ACCESS;

async fn node(server: &fenced_testkit::RedisServer) -> Node {
    let client = redis::Client::open(server.url()).unwrap();
    Node::new(
        crate::backend::Conn::Single(ConnectionManager::new(client).await.unwrap()),
        Duration::from_secs(2),
    )
}

/// The server's clock, as TIME answers: seconds and microseconds.
async fn server_time(n: &Node) -> (u64, u64) {
    n.query("time", &redis::cmd("TIME")).await.unwrap()
}

/// The server's clock in microseconds, the unit of fencing tokens.
async fn time_us(n: &Node) -> u64 {
    let (s, us) = server_time(n).await;
    s * 1_000_000 + us
}

fn owner() -> OwnerToken {
    OwnerToken::generate().unwrap()
}

fn lock(name: &str) -> Exclusive {
    Exclusive {
        name: name.into(),
        keys: Arc::new(LockKeys::new("t:", name)),
        fence_retention_ms: 60_000,
        counted: true,
    }
}

async fn acquire(n: &Node, kind: &dyn LeaseKind, who: &OwnerToken, ttl_ms: u64) -> AcquireReply {
    acquire_reply(n.run::<Value>(&kind.acquire(who, ttl_ms)).await.unwrap()).unwrap()
}

async fn release(n: &Node, kind: &dyn LeaseKind, who: &OwnerToken) -> ReleaseReply {
    release_reply(n.run::<Value>(&kind.release(who, "c 1")).await.unwrap()).unwrap()
}

async fn abandon(n: &Node, kind: &dyn LeaseKind, who: &OwnerToken, ms: u64) -> bool {
    abandon_reply(n.run::<Value>(&kind.abandon(who, "c 1", ms)).await.unwrap()).unwrap()
}

async fn extend(
    n: &Node,
    kind: &dyn LeaseKind,
    who: &OwnerToken,
    ttl_ms: u64,
    epoch: u64,
) -> ExpiryReply {
    expiry_reply(
        n.run::<Value>(&kind.extend(who, ttl_ms, epoch))
            .await
            .unwrap(),
    )
    .unwrap()
}

async fn pttl(n: &Node, key: &str) -> i64 {
    n.query("pttl", redis::cmd("PTTL").arg(key)).await.unwrap()
}

fn granted(reply: AcquireReply) -> bool {
    matches!(reply, AcquireReply::Acquired(_))
}

#[tokio::test]
async fn a_release_frees_only_its_own_lease_and_writes_nothing_else() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let job = lock("job");
    let me = owner();
    assert!(granted(acquire(&n, &job, &me, 10_000).await));
    assert_eq!(release(&n, &job, &me).await, ReleaseReply::Released);
    // Only the fence is left: no release record (a retry is read by the client's validity
    // deadline, core/cleanup.rs).
    let keys: Vec<String> = n.query("keys", redis::cmd("KEYS").arg("*")).await.unwrap();
    assert_eq!(keys, vec![job.keys.fence.clone()]);
    // The same release again (a retry after a lost reply) changes nothing, and neither does
    // it once another holder has the lock:
    assert_eq!(release(&n, &job, &me).await, ReleaseReply::NotHeld);
    let other = owner();
    assert!(granted(acquire(&n, &job, &other, 10_000).await));
    assert_eq!(release(&n, &job, &me).await, ReleaseReply::NotHeld);
    assert!(
        pttl(&n, &job.keys.lock).await > 0,
        "the new holder's lock stays"
    );
}

#[tokio::test]
async fn a_fence_key_that_is_no_fence_answers_wrong_type_and_the_grant_is_undone() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let job = lock("layout");
    let wrong = |setup: redis::Cmd| {
        let (n, job) = (&n, &job);
        async move {
            let _: Value = n
                .query("del", redis::cmd("DEL").arg(&job.keys.fence))
                .await
                .unwrap();
            let _: Value = n.query("setup", &setup).await.unwrap();
            let me = owner();
            // KEYS[2]: the fence; and the lock was not left taken.
            assert_eq!(
                acquire(n, job, &me, 10_000).await,
                AcquireReply::WrongType { key: 2 },
                "{setup:?}"
            );
            let holder: Option<String> = n
                .query("get", redis::cmd("GET").arg(&job.keys.lock))
                .await
                .unwrap();
            assert_eq!(holder, None);
        }
    };
    // Another type; a string that is no token; an ID whose token would pass 2^53.
    wrong(
        redis::cmd("HSET")
            .arg(&job.keys.fence)
            .arg("last")
            .arg("7")
            .clone(),
    )
    .await;
    wrong(
        redis::cmd("SET")
            .arg(&job.keys.fence)
            .arg("not a token")
            .clone(),
    )
    .await;
    wrong(
        redis::cmd("SET")
            .arg(&job.keys.fence)
            .arg("9223372036854775807")
            .clone(),
    )
    .await;
    let out_of_range = format!("{}-0", crate::token::FENCE_MAX_MS + 1);
    let mut add = redis::cmd("XADD");
    add.arg(&job.keys.fence)
        .arg(&out_of_range)
        .arg("f")
        .arg("1");
    wrong(add).await;
}

#[tokio::test]
async fn an_abandoned_attempt_that_arrives_late_refuses_itself() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let late_lock = lock("late");
    let late = owner();
    // The client gave up on the attempt before Redis saw it:
    assert!(!abandon(&n, &late_lock, &late, 5_000).await);
    // The attempt arrives after all, and takes nothing:
    assert_eq!(
        acquire(&n, &late_lock, &late, 10_000).await,
        AcquireReply::Abandoned
    );
    // A tombstone for an attempt that never arrives expires by itself:
    let never = owner();
    assert!(!abandon(&n, &late_lock, &never, 200).await);
    let left = pttl(&n, &late_lock.keys.tombstone(&never)).await;
    assert!(left > 0 && left <= 200, "tombstone pttl {left}");
    // The lock is free for others, and an abandon of an attempt that DID take it releases it:
    let taken = owner();
    assert!(granted(acquire(&n, &late_lock, &taken, 10_000).await));
    assert!(abandon(&n, &late_lock, &taken, 5_000).await);
    assert!(granted(acquire(&n, &late_lock, &owner(), 10_000).await));
}

#[tokio::test]
async fn a_multi_lock_gives_back_what_it_holds_and_an_abandon_voids_an_attempt_still_to_come() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let names = ["m1", "m2"];
    let multi = super::multi::MultiExclusive {
        name: "m1,m2".into(),
        keys: Arc::new(names.iter().map(|name| LockKeys::new("t:", name)).collect()),
        channels: Arc::new(Vec::new()),
        fence_retention_ms: 60_000,
    };
    let tombstone = |who: &OwnerToken| multi.keys[0].tombstone(who);
    // Abandoned before it arrived: nothing held, so a tombstone voids the late attempt.
    let late = owner();
    assert!(!abandon(&n, &multi, &late, 5_000).await);
    assert!(pttl(&n, &tombstone(&late)).await > 0);
    assert_eq!(
        acquire(&n, &multi, &late, 10_000).await,
        AcquireReply::Abandoned
    );
    // Held: an abandon gives every name back and leaves no tombstone.
    let taken = owner();
    assert!(granted(acquire(&n, &multi, &taken, 10_000).await));
    assert!(abandon(&n, &multi, &taken, 5_000).await);
    assert_eq!(pttl(&n, &tombstone(&taken)).await, -2);
    // A release gives every name back; one of nothing held changes nothing, tombstone none.
    let held = owner();
    assert!(granted(acquire(&n, &multi, &held, 10_000).await));
    assert_eq!(release(&n, &multi, &held).await, ReleaseReply::Released);
    for keys in multi.keys.iter() {
        assert_eq!(pttl(&n, &keys.lock).await, -2, "{}", keys.lock);
    }
    assert_eq!(release(&n, &multi, &held).await, ReleaseReply::NotHeld);
    assert_eq!(pttl(&n, &tombstone(&held)).await, -2);
}

#[tokio::test]
async fn a_failed_fenced_write_does_not_move_the_fence() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let keys = ResourceKeys::new("t:", "doc");
    let write = |token: u64| {
        crate::scripts::ScriptCall::new(&FENCED_ACCESS)
            .key(&keys.data)
            .key(&keys.fence)
            .arg(token)
            .arg("write")
            .arg("f")
            .arg("v")
    };
    let _: Value = n.run(&write(5)).await.unwrap();
    let _: () = n
        .query("set", redis::cmd("SET").arg(&keys.data).arg("not a hash"))
        .await
        .unwrap();
    assert!(n.run::<Value>(&write(9)).await.is_err());
    let fence: String = n
        .query("get", redis::cmd("GET").arg(&keys.fence))
        .await
        .unwrap();
    assert_eq!(fence, "5");
}

#[tokio::test]
async fn a_batch_renews_held_leases_and_refuses_lost_ones_after_the_script_cache_emptied() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let (held, gone) = (lock("held"), lock("gone"));
    let (a, b) = (owner(), owner());
    acquire(&n, &held, &a, 10_000).await;
    acquire(&n, &gone, &b, 10_000).await;
    release(&n, &gone, &b).await;
    // An emptied script cache must not break the pipelined renewal.
    let _: () = n
        .query("flush", redis::cmd("SCRIPT").arg("FLUSH"))
        .await
        .unwrap();
    let calls = [held.extend(&a, 20_000, 0), gone.extend(&b, 20_000, 0)];
    let replies: Vec<ExpiryReply> = n
        .run_batch("renew", &calls)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.and_then(expiry_reply).unwrap())
        .collect();
    assert_eq!(replies, [ExpiryReply::Applied, ExpiryReply::NotHeld]);
    assert!(pttl(&n, &held.keys.lock).await > 15_000);
}

#[tokio::test]
async fn a_late_expiry_change_of_an_older_epoch_is_refused() {
    // The race of a renewal that timed out on a dead connection and reaches Redis after a
    // newer `extend` sent on a fresh one: the older request must not re-time the lease.
    for kind in ["lock", "semaphore"] {
        let server = fenced_testkit::RedisServer::start().unwrap();
        let n = node(&server).await;
        let me = owner();
        let (lease, key): (Box<dyn LeaseKind>, String) = if kind == "lock" {
            let l = lock("epochs");
            let key = l.keys.lock.clone();
            (Box::new(l), key)
        } else {
            let p = permits("epochs", 1, 1);
            let key = p.keys.holders.clone();
            (Box::new(p), key)
        };
        assert!(granted(acquire(&n, &*lease, &me, 3_000).await));
        // extend(300ms) opens epoch 1 and is applied first ...
        assert_eq!(extend(&n, &*lease, &me, 300, 1).await, ExpiryReply::Applied);
        // ... then the delayed epoch-0 renewal for 3s arrives: refused, nothing changes.
        assert_eq!(
            extend(&n, &*lease, &me, 3_000, 0).await,
            ExpiryReply::Superseded
        );
        assert!(
            pttl(&n, &key).await <= 300,
            "{kind}: the older epoch re-timed the lease"
        );
        // The opposite order: a longer epoch 2 applied, then a late epoch-1 (shorter) renewal.
        assert_eq!(
            extend(&n, &*lease, &me, 20_000, 2).await,
            ExpiryReply::Applied
        );
        assert_eq!(
            extend(&n, &*lease, &me, 300, 1).await,
            ExpiryReply::Superseded
        );
        assert!(
            pttl(&n, &key).await > 15_000,
            "{kind}: the older epoch shortened the lease"
        );
        // Same epoch in any order is applied; another owner is refused whatever its epoch.
        assert_eq!(
            extend(&n, &*lease, &me, 20_000, 2).await,
            ExpiryReply::Applied
        );
        assert_eq!(
            extend(&n, &*lease, &owner(), 1_000, 9).await,
            ExpiryReply::NotHeld
        );
    }
}

fn hold(name: &str, id: &str, reenter_only: bool) -> ReentrantHold {
    ReentrantHold {
        name: name.into(),
        keys: Arc::new(LockKeys::new("t:", name)),
        hold: id.to_owned(),
        reenter_only,
        fence_retention_ms: 60_000,
    }
}

#[tokio::test]
async fn reentrant_holds_share_one_token_and_the_last_release_frees_the_lock() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let me = owner();
    let first = acquire(&n, &hold("re", "h1", false), &me, 10_000).await;
    let again = acquire(&n, &hold("re", "h2", true), &me, 10_000).await;
    assert!(granted(first));
    assert_eq!(first, again, "a re-entry carries the hold's token");
    // A plain lock and a stranger are kept out.
    assert!(matches!(
        acquire(&n, &lock("re"), &owner(), 10_000).await,
        AcquireReply::Busy { .. }
    ));
    assert_eq!(
        acquire(&n, &hold("re", "x", true), &owner(), 10_000).await,
        AcquireReply::NotHeld
    );
    // Inner release: retained; its retry is recognised; the last one frees the lock.
    assert_eq!(
        release(&n, &hold("re", "h2", true), &me).await,
        ReleaseReply::Retained
    );
    assert_eq!(
        release(&n, &hold("re", "h2", true), &me).await,
        ReleaseReply::Retained,
        "a retried inner release still says the lock stays"
    );
    // A re-entry never shortens the lease other holds count on.
    assert!(granted(
        acquire(&n, &hold("re", "h3", true), &me, 200).await
    ));
    assert!(pttl(&n, "t:{re}").await > 5_000);
    assert_eq!(
        release(&n, &hold("re", "h3", true), &me).await,
        ReleaseReply::Retained
    );
    assert_eq!(
        release(&n, &hold("re", "h1", false), &me).await,
        ReleaseReply::Released
    );
    // Its retry finds the lock gone: "not held" from the script, which the client reads as
    // "already released" while the lease was still valid (core/cleanup.rs).
    assert_eq!(
        release(&n, &hold("re", "h1", false), &me).await,
        ReleaseReply::NotHeld
    );
    assert_eq!(pttl(&n, "t:{re}").await, -2, "the lock key is gone");
    assert_eq!(pttl(&n, "t:{re}:holds").await, -2, "the holds are gone");
    // Once free, a re-entry by the old owner is refused: it never takes a free lock.
    assert_eq!(
        acquire(&n, &hold("re", "h4", true), &me, 10_000).await,
        AcquireReply::NotHeld
    );
}

fn permits(name: &str, n: u32, limit: u32) -> Permits {
    Permits {
        name: name.into(),
        keys: Arc::new(SemaphoreKeys::new("t:", name)),
        permits: n,
        limit,
        fence_retention_ms: 60_000,
    }
}

#[tokio::test]
async fn a_fence_is_raised_only_where_the_lock_or_the_semaphores_lease_is_still_held() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let raise = |kind: &dyn LeaseKind, who: &OwnerToken, token: u64| {
        let call = kind
            .redlock()
            .unwrap()
            .raise_fence(who, FencingToken::new(token));
        call.unwrap()
    };
    let (lock, pool) = (lock("raised"), permits("raised-pool", 1, 2));
    let (holder, short, stranger) = (owner(), owner(), owner());
    assert!(granted(acquire(&n, &lock, &holder, 10_000).await));
    assert!(granted(acquire(&n, &pool, &holder, 10_000).await));
    assert!(granted(acquire(&n, &pool, &short, 100).await));
    let far = time_us(&n).await + 10_000_000; // a token 10 s ahead of the server's clock
    for (kind, fence) in [
        (&lock as &dyn LeaseKind, &lock.keys.fence),
        (&pool as &dyn LeaseKind, &pool.keys.fence),
    ] {
        // Not the holder's: nothing changes.
        let refused: i64 = n.run(&raise(kind, &stranger, far)).await.unwrap();
        assert_eq!(refused, 0);
        assert_ne!(
            last_id(&n, fence).await,
            format!("{}-{}", far / 1000, far % 1000)
        );
        let raised: i64 = n.run(&raise(kind, &holder, far)).await.unwrap();
        assert_eq!(raised, 1);
        assert_eq!(
            last_id(&n, fence).await,
            format!("{}-{}", far / 1000, far % 1000)
        );
    }
    // A semaphore's lease that ended by the server's clock holds nothing, though its entry
    // is still there.
    let ended = time_us(&n).await / 1000 + 150;
    while time_us(&n).await / 1000 <= ended {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let late: i64 = n.run(&raise(&pool, &short, far + 1_000)).await.unwrap();
    assert_eq!(late, 0);
}

#[tokio::test]
async fn permits_are_counted_against_each_requests_limit_and_expire_by_server_time() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let (a, b, c) = (owner(), owner(), owner());
    let two = acquire(&n, &permits("pool", 2, 3), &a, 10_000).await;
    assert!(granted(two));
    let one = acquire(&n, &permits("pool", 1, 3), &b, 250).await;
    assert!(granted(one));
    // Full: the answer says how long until the earliest lease ends.
    match acquire(&n, &permits("pool", 1, 3), &c, 10_000).await {
        AcquireReply::Busy {
            remaining: Some(left),
        } => assert!(left <= Duration::from_millis(250)),
        other => panic!("{other:?}"),
    }
    // A handle with a larger limit is admitted; a smaller one waits.
    assert!(granted(
        acquire(&n, &permits("pool", 1, 4), &c, 10_000).await
    ));
    assert!(matches!(
        acquire(&n, &permits("pool", 1, 2), &owner(), 10_000).await,
        AcquireReply::Busy { .. }
    ));
    // b's lease ends by the server's clock: its permit comes back without any release.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        extend(&n, &permits("pool", 1, 3), &b, 10_000, 0).await,
        ExpiryReply::NotHeld
    );
    assert!(granted(
        acquire(&n, &permits("pool", 1, 4), &owner(), 10_000).await
    ));
    // Tokens increase in grant order, and release is exact.
    let (AcquireReply::Acquired(t1), AcquireReply::Acquired(t2)) = (two, one) else {
        unreachable!()
    };
    assert!(t2 > t1);
    assert_eq!(
        release(&n, &permits("pool", 2, 3), &a).await,
        ReleaseReply::Released
    );
    assert_eq!(
        release(&n, &permits("pool", 2, 3), &a).await,
        ReleaseReply::NotHeld
    );
    assert_eq!(
        release(&n, &permits("pool", 1, 3), &b).await,
        ReleaseReply::NotHeld
    );
}

#[tokio::test]
async fn a_proposed_token_counts_when_above_the_next_one_and_within_a_second_of_the_server_clock() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let job = lock("proposed");
    let server_us = || time_us(&n);
    let take = |proposal: u64| {
        let (n, job) = (&n, &job);
        async move {
            let me = owner();
            let Some(call) = job.propose_token(&job.acquire(&me, 10_000), proposal) else {
                panic!("a lock takes proposals");
            };
            let reply = acquire_reply(n.run::<Value>(&call).await.unwrap()).unwrap();
            release(n, job, &me).await;
            match reply {
                AcquireReply::Acquired(t) => t.get(),
                other => panic!("{other:?}"),
            }
        }
    };
    // 0.9 s ahead: taken as it is (the checks below hold unless this test stalls that long),
    // with a sequence far from a carry into the next ms.
    let ahead = (server_us().await + 900_000) / 1000 * 1000 + 500;
    assert_eq!(take(ahead).await, ahead);
    // Below the next token: the counter's next one.
    assert_eq!(take(ahead - 10).await, ahead + 1);
    // A minute ahead (a client clock far off): ignored, the fence's sequence goes on.
    let far = server_us().await + 60_000_000;
    assert_eq!(take(far).await, ahead + 2);
    // Not a number: ignored.
    let me = owner();
    let call = job.acquire(&me, 10_000).arg("not-a-number");
    let reply = acquire_reply(n.run::<Value>(&call).await.unwrap()).unwrap();
    assert!(matches!(reply, AcquireReply::Acquired(t) if t.get() == ahead + 3));
}

/// The fence's last ID as a stream: `XINFO STREAM`'s `last-generated-id`.
async fn last_id(n: &Node, key: &str) -> String {
    let info: Vec<Value> = n
        .query("xinfo", redis::cmd("XINFO").arg("STREAM").arg(key))
        .await
        .unwrap();
    let at = info
        .iter()
        .position(|v| matches!(v, Value::BulkString(b) if b == b"last-generated-id"))
        .unwrap();
    match &info[at + 1] {
        Value::BulkString(id) => String::from_utf8(id.clone()).unwrap(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_token_is_the_fence_streams_next_id_which_the_server_clock_floors() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let job = lock("clock");
    let server_ms = || async { time_us(&n).await / 1000 };
    let fence_at = |id: String| {
        let (n, key) = (&n, job.keys.fence.clone());
        async move {
            let _: Value = n.query("del", redis::cmd("DEL").arg(&key)).await.unwrap();
            let _: String = n
                .query(
                    "xadd",
                    redis::cmd("XADD")
                        .arg(&key)
                        .arg("MAXLEN")
                        .arg(0)
                        .arg(id)
                        .arg("f")
                        .arg(1),
                )
                .await
                .unwrap();
        }
    };
    let take = || {
        let (n, job) = (&n, &job);
        async move {
            let me = owner();
            let reply = acquire(n, job, &me, 10_000).await;
            release(n, job, &me).await;
            match reply {
                AcquireReply::Acquired(t) => t.get(),
                other => panic!("{other:?}"),
            }
        }
    };
    // No fence: one ms past the server's clock, times 1000 (a grant earlier in that ms, from
    // a fence since lost, may have handed out any token of it).
    let before = server_ms().await;
    let token = take().await;
    let after = server_ms().await;
    let ms = token / 1000;
    assert!(before < ms && ms <= after + 1, "{before} {token} {after}");
    assert_eq!(token, ms * 1000, "the first token of its ms");
    assert_eq!(last_id(&n, &job.keys.fence).await, format!("{ms}-0"));
    // A fence behind the clock: the server's clock in ms, times 1000, and a sequence.
    fence_at("1000-5".into()).await;
    let before = server_ms().await;
    let token = take().await;
    let after = server_ms().await;
    assert!(
        before * 1000 <= token && token <= after * 1000 + 999,
        "{before} {token} {after}"
    );
    // A fence ahead of the clock (a clock that stepped back, a Redlock proposal): its
    // sequence counts on, and carries into the next ms past 999.
    let ahead = server_ms().await + 60_000;
    fence_at(format!("{ahead}-997")).await;
    assert_eq!(take().await, ahead * 1000 + 998);
    assert_eq!(take().await, ahead * 1000 + 999);
    assert_eq!(take().await, (ahead + 1) * 1000);
    assert_eq!(
        last_id(&n, &job.keys.fence).await,
        format!("{}-0", ahead + 1)
    );
    assert_eq!(take().await, (ahead + 1) * 1000 + 1);
    // Back-to-back grants, each past the last; the stream keeps no entry.
    fence_at("1-0".into()).await;
    let mut last = 0;
    for _ in 0..200 {
        let token = take().await;
        assert!(token > last, "{token} after {last}");
        last = token;
    }
    let len: u64 = n
        .query("xlen", redis::cmd("XLEN").arg(&job.keys.fence))
        .await
        .unwrap();
    assert_eq!(len, 0);
    let id = last_id(&n, &job.keys.fence).await;
    assert_eq!(id, format!("{}-{}", last / 1000, last % 1000));
}

#[tokio::test]
async fn a_fence_of_an_earlier_build_is_converted_to_a_stream_above_its_token() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let job = lock("legacy");
    let take = || {
        let (n, job) = (&n, &job);
        async move {
            let me = owner();
            let reply = acquire(n, job, &me, 10_000).await;
            release(n, job, &me).await;
            match reply {
                AcquireReply::Acquired(t) => t.get(),
                other => panic!("{other:?}"),
            }
        }
    };
    // The server's µs of a grant, 5 s ahead (a Redlock proposal, a clock that stepped back).
    for legacy in [time_us(&n).await + 5_000_000, 42_999] {
        let () = n
            .query("set", redis::cmd("SET").arg(&job.keys.fence).arg(legacy))
            .await
            .unwrap();
        let token = take().await;
        assert_eq!(token, (legacy / 1000 + 1) * 1000, "{legacy}");
        assert!(take().await > token);
        let kind: String = n
            .query("type", redis::cmd("TYPE").arg(&job.keys.fence))
            .await
            .unwrap();
        assert_eq!(kind, "stream");
    }
}

#[tokio::test]
async fn every_grant_gives_the_fence_its_retention() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let job = lock("retention"); // the fence's expiry: 60 s
    let pttl = || async {
        let ms: i64 = n
            .query("pttl", redis::cmd("PTTL").arg(&job.keys.fence))
            .await
            .unwrap();
        ms
    };
    let cycle = || async {
        let me = owner();
        assert!(matches!(
            acquire(&n, &job, &me, 10_000).await,
            AcquireReply::Acquired(_)
        ));
        release(&n, &job, &me).await;
    };
    cycle().await;
    assert!((59_000..=60_000).contains(&pttl().await));
    let () = n
        .query(
            "pexpire",
            redis::cmd("PEXPIRE").arg(&job.keys.fence).arg(30_000),
        )
        .await
        .unwrap();
    cycle().await;
    assert!((59_000..=60_000).contains(&pttl().await));
    let () = n
        .query("persist", redis::cmd("PERSIST").arg(&job.keys.fence))
        .await
        .unwrap();
    cycle().await;
    assert!((59_000..=60_000).contains(&pttl().await));
}
