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
use crate::scripts::FENCED_WRITE;

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
async fn a_fence_of_an_older_layout_or_another_type_never_fails_a_grant_half_way() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let job = lock("layout");
    // Before 0.2 the fence was a hash `last`; another program may have written anything.
    let _: () = n
        .query(
            "hset",
            redis::cmd("HSET").arg(&job.keys.fence).arg("last").arg("7"),
        )
        .await
        .unwrap();
    let AcquireReply::Acquired(token) = acquire(&n, &job, &owner(), 10_000).await else {
        panic!("not granted");
    };
    // The server clock's floor (µs since 1970) keeps it above any token of the old fence.
    assert!(token.get() > 1_700_000_000_000_000, "{token}");
    let fence: String = n
        .query("get", redis::cmd("GET").arg(&job.keys.fence))
        .await
        .unwrap();
    assert_eq!(fence, token.get().to_string(), "the fence is a string now");
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
async fn a_failed_fenced_write_does_not_move_the_fence() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let keys = ResourceKeys::new("t:", "doc");
    let write = |token: u64| {
        crate::scripts::ScriptCall::new(&FENCED_WRITE)
            .key(&keys.data)
            .key(&keys.fence)
            .arg(token)
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
    // 0.9 s ahead: taken as it is (the checks below hold unless this test stalls that long).
    let ahead = server_us().await + 900_000;
    assert_eq!(take(ahead).await, ahead);
    // Below the next token: the counter's next one.
    assert_eq!(take(ahead - 10).await, ahead + 1);
    // A minute ahead (a client clock far off): ignored, the counter goes on.
    let far = server_us().await + 60_000_000;
    assert_eq!(take(far).await, ahead + 2);
    // Not a number: ignored.
    let me = owner();
    let call = job.acquire(&me, 10_000).arg("not-a-number");
    let reply = acquire_reply(n.run::<Value>(&call).await.unwrap()).unwrap();
    assert!(matches!(reply, AcquireReply::Acquired(t) if t.get() == ahead + 3));
}

#[tokio::test]
async fn a_grant_takes_the_server_clock_past_the_fence_and_the_counter_otherwise() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let job = lock("clock");
    let server_us = || time_us(&n);
    let fence_is = |value: String| {
        let (n, key) = (&n, job.keys.fence.clone());
        async move {
            let () = n
                .query("set", redis::cmd("SET").arg(&key).arg(value))
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
    // No fence, then fences behind the clock (the text comparison's case, a shorter decimal,
    // a value that is not a number): the token is the server's clock, between two readings.
    for fence in [
        None,
        Some("1000000000000000"),
        Some("42"),
        Some("not a token"),
    ] {
        if let Some(value) = fence {
            fence_is(value.to_owned()).await;
        }
        let before = server_us().await;
        let token = take().await;
        let after = server_us().await;
        assert!(
            before <= token && token <= after,
            "{fence:?}: {before} {token} {after}"
        );
    }
    // A fence ahead of the clock (a clock that stepped back, a Redlock proposal): the counter.
    let ahead = server_us().await + 5_000_000;
    fence_is(ahead.to_string()).await;
    assert_eq!(take().await, ahead + 1);
    assert_eq!(take().await, ahead + 2);
    // Back-to-back grants, each past the last, whether the clock or the counter decides.
    let mut last = 0;
    for _ in 0..200 {
        let token = take().await;
        assert!(token > last, "{token} after {last}");
        last = token;
    }
    // What a grant stores is the decimal it hands out.
    let stored: String = n
        .query("get", redis::cmd("GET").arg(&job.keys.fence))
        .await
        .unwrap();
    assert_eq!(stored, last.to_string());
}

#[tokio::test]
async fn a_fence_keeps_its_expiry_within_a_window_of_tokens_and_renews_it_when_a_token_leaves_it() {
    let server = fenced_testkit::RedisServer::start().unwrap();
    let n = node(&server).await;
    let job = lock("window"); // the fence's expiry: 60 s
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
    // The first grant creates the fence with its expiry.
    cycle().await;
    assert!(pttl().await > 59_000);
    // Shortened by hand: later grants of the same 1000 s window keep the expiry as it is (run
    // again should the server clock cross into the next window meanwhile) ...
    let window = || async { server_time(&n).await.0 / 1_000 };
    let mut kept = 0;
    for _ in 0..2 {
        let () = n
            .query(
                "pexpire",
                redis::cmd("PEXPIRE").arg(&job.keys.fence).arg(30_000),
            )
            .await
            .unwrap();
        let before = window().await;
        cycle().await;
        cycle().await;
        kept = pttl().await;
        if window().await == before {
            break;
        }
    }
    assert!((25_000..=30_000).contains(&kept), "{kept}");
    // ... and a grant whose token leaves the fence's window (the fence is 2000 s behind the
    // clock here) sets it again. So does one over a fence with no expiry.
    let behind = (server_time(&n).await.0 - 2_000) * 1_000_000;
    let () = n
        .query(
            "set",
            redis::cmd("SET")
                .arg(&job.keys.fence)
                .arg(behind)
                .arg("PX")
                .arg(30_000),
        )
        .await
        .unwrap();
    cycle().await;
    assert!(pttl().await > 59_000);
    let () = n
        .query("set", redis::cmd("SET").arg(&job.keys.fence).arg(behind))
        .await
        .unwrap();
    cycle().await;
    assert!(pttl().await > 59_000);
}
