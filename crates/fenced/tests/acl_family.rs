//! The least-privilege ACL of every other primitive, as listed in the README: with exactly
//! these commands everything the primitive does works; with any one taken away, the error
//! names it. (The lock and the semaphore have their own tests in `acl.rs`.)
//!
//! `discover_minimal_acls` (ignored) derives the lists: it starts from every command fenced
//! sends or runs in a script, and drops each one that the primitive can do without.

use std::future::Future;
use std::time::Duration;

use fenced::{Client, Error, FencingToken, WaitPolicy};
use fenced_testkit::RedisServer;

use crate::support::raw;

/// Every command fenced sends, or runs inside a script.
const EVERY_COMMAND: [&str; 48] = [
    "evalsha",
    "script|load",
    "ping",
    "subscribe",
    "unsubscribe",
    "pubsub|numsub",
    "watch",
    "unwatch",
    "multi",
    "exec",
    "discard",
    "decr",
    "decrby",
    "incrby",
    "del",
    "get",
    "set",
    "mget",
    "hdel",
    "hexists",
    "hget",
    "hgetall",
    "hlen",
    "hmget",
    "hset",
    "hvals",
    "lindex",
    "llen",
    "lpop",
    "lrem",
    "rpush",
    "pexpire",
    "pexpireat",
    "pttl",
    "publish",
    "time",
    "type",
    "xadd",
    "xinfo",
    "zadd",
    "zcount",
    "zrange",
    "zrangebyscore",
    "zrem",
    "zremrangebyscore",
    "zscore",
    "info",
    "scan",
];

/// Wake-up on release (without them waiters poll), and the one-round-trip handover to a
/// waiter of the same client (without them a release goes the ordinary way): never
/// required, as for the lock.
const SPEED: [&str; 4] = ["subscribe", "unsubscribe", "pubsub|numsub", "llen"];

/// Every primitive starts from these: scripts run by `EVALSHA`, loaded after a restart or a
/// flush, and the health check.
const BASE: [&str; 3] = ["evalsha", "script|load", "ping"];

const REENTRANT: &[&str] = &[
    "xadd", "type", "xinfo", "time", "set", "get", "mget", "del", "pexpire", "pttl", "publish",
    "hset", "hget", "hdel", "hexists", "hlen",
];
const FAIR: &[&str] = &[
    "xadd", "type", "xinfo", "time", "set", "get", "mget", "del", "pexpire", "pttl", "publish",
    "hset", "hget", "hdel", "rpush", "lpop", "lindex", "lrem", "llen",
];
const RW: &[&str] = &[
    "xadd",
    "type",
    "xinfo",
    "time",
    "set",
    "get",
    "mget",
    "del",
    "pexpire",
    "pexpireat",
    "pttl",
    "publish",
    "hset",
    "hdel",
    "zadd",
    "zcount",
    "zrange",
    "zrangebyscore",
    "zrem",
    "zremrangebyscore",
    "zscore",
];
const MULTI: &[&str] = &[
    "xadd", "type", "xinfo", "time", "set", "get", "mget", "del", "pexpire", "pttl", "publish",
];
const LATCH: &[&str] = &["set", "get", "decr", "publish"];
const RESOURCE: &[&str] = &["set", "get", "hset", "hget", "hmget"];
const OPTIMISTIC: &[&str] = &[
    "get", "set", "decrby", "hset", "hget", "hmget", "watch", "unwatch", "multi", "exec",
];
const CACHE: &[&str] = &[
    "xadd", "type", "xinfo", "time", "set", "get", "mget", "del", "pexpire", "pttl", "publish",
    "hset", "hmget",
];

/// The scripts each primitive may run, on any path (acquire, renew, release, hand over, give
/// up, status): its list must hold every command in them.
const SCRIPTS: &[(&str, &[&str])] = &[
    (
        "reentrant",
        &[
            include_str!("../src/scripts/fence.lua"),
            include_str!("../src/scripts/reentrant_acquire.lua"),
            include_str!("../src/scripts/reentrant_extend.lua"),
            include_str!("../src/scripts/reentrant_release.lua"),
            include_str!("../src/scripts/reentrant_abandon.lua"),
        ],
    ),
    (
        "fair",
        &[
            include_str!("../src/scripts/fence.lua"),
            include_str!("../src/scripts/fair_acquire.lua"),
            include_str!("../src/scripts/fair_take.lua"),
            include_str!("../src/scripts/extend.lua"),
            include_str!("../src/scripts/fair_free.lua"),
            include_str!("../src/scripts/fair_release.lua"),
            include_str!("../src/scripts/fair_abandon.lua"),
        ],
    ),
    (
        "rw",
        &[
            include_str!("../src/scripts/fence.lua"),
            include_str!("../src/scripts/rw_read_acquire.lua"),
            include_str!("../src/scripts/rw_write_acquire.lua"),
            include_str!("../src/scripts/rw_write_leave.lua"),
            include_str!("../src/scripts/semaphore_extend.lua"),
            include_str!("../src/scripts/semaphore_release.lua"),
            include_str!("../src/scripts/semaphore_abandon.lua"),
            include_str!("../src/scripts/extend.lua"),
            include_str!("../src/scripts/release.lua"),
            include_str!("../src/scripts/abandon.lua"),
        ],
    ),
    (
        "multi",
        &[
            include_str!("../src/scripts/fence.lua"),
            include_str!("../src/scripts/multi_acquire.lua"),
            include_str!("../src/scripts/multi_extend.lua"),
            include_str!("../src/scripts/multi_release.lua"),
        ],
    ),
    (
        "latch",
        &[
            include_str!("../src/scripts/latch_arm.lua"),
            include_str!("../src/scripts/latch_count_down.lua"),
        ],
    ),
    (
        "resource",
        &[include_str!("../src/scripts/fenced_access.lua")],
    ),
    (
        "optimistic",
        &[
            include_str!("../src/scripts/compare_and_set.lua"),
            include_str!("../src/scripts/set_if_version.lua"),
            include_str!("../src/scripts/set_extreme.lua"),
            include_str!("../src/scripts/decrement_if_at_least.lua"),
        ],
    ),
    (
        "cache",
        &[
            include_str!("../src/scripts/fence.lua"),
            include_str!("../src/scripts/acquire.lua"),
            include_str!("../src/scripts/hand_over.lua"),
            include_str!("../src/scripts/release.lua"),
            include_str!("../src/scripts/abandon.lua"),
            include_str!("../src/scripts/extend.lua"),
            include_str!("../src/scripts/cache_store.lua"),
            include_str!("../src/scripts/cache_invalidate.lua"),
        ],
    ),
];

/// The commands a script runs: `redis.call('X'` and `redis.pcall('X'`, lower case, with the
/// subcommand where the ACL names one (`pubsub|numsub`).
fn script_commands(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for call in ["redis.call('", "redis.pcall('"] {
        for rest in source.split(call).skip(1) {
            let command: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
            let mut command = command.to_ascii_lowercase();
            if command == "pubsub" {
                let sub: String = rest[command.len()..]
                    .trim_start_matches(['\'', ',', ' '])
                    .chars()
                    .take_while(char::is_ascii_alphabetic)
                    .collect();
                command = format!("pubsub|{}", sub.to_ascii_lowercase());
            }
            out.push(command);
        }
    }
    out
}

/// A user with exactly `commands` on fenced's keys and channels, and a flushed script cache
/// (so that loading scripts is needed again); its URL.
pub(crate) async fn user(server: &RedisServer, name: &str, commands: &[&str]) -> String {
    let mut conn = raw(server).await;
    let mut acl = redis::cmd("ACL");
    acl.arg("SETUSER")
        .arg(name)
        .arg("reset")
        // Redis 6.2 gives a reset user every channel (`acl-pubsub-default allchannels`).
        .arg("resetchannels")
        .arg("on")
        .arg(">pw")
        .arg("~fenced:*")
        .arg("&fenced:*")
        .arg("-@all");
    for c in commands {
        acl.arg(format!("+{c}"));
    }
    let _: () = acl.query_async(&mut conn).await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    server
        .url()
        .replace("redis://", &format!("redis://{name}:pw@"))
}

async fn client(url: &str) -> Result<Client, Error> {
    Client::builder(url)
        .timeout(Duration::from_millis(500))
        .connect()
        .await
}

fn wait() -> WaitPolicy {
    WaitPolicy::up_to(Duration::from_secs(3))
}

const TTL: Duration = Duration::from_millis(300);

/// Holds, re-enters, is renewed past its ttl, waits in another client, releases.
async fn reentrant(url: String, name: String) -> Result<(), Error> {
    let (a, b) = (client(&url).await?, client(&url).await?);
    let lock = a.reentrant_lock(name.as_str()).with_ttl(TTL);
    let outer = lock.acquire().await?;
    let inner = outer.reenter().await?;
    let waiter = tokio::spawn({
        let lock = b.reentrant_lock(name.as_str()).with_wait(wait());
        async move { lock.acquire().await?.release().await }
    });
    tokio::time::sleep(TTL + TTL / 3).await; // renewed past its ttl
    inner.lease().check()?;
    inner.release().await?;
    outer.release().await?;
    waiter.await.expect("task")
}

/// Holds, queues a waiter of another client, reads the queue, hands over.
async fn fair(url: String, name: String) -> Result<(), Error> {
    let (a, b) = (client(&url).await?, client(&url).await?);
    let lock = a.fair_lock(name.as_str()).with_ttl(TTL);
    let g = lock.acquire().await?;
    let waiter = tokio::spawn({
        let lock = b.fair_lock(name.as_str()).with_wait(wait());
        async move { lock.acquire().await?.release().await }
    });
    // Until the waiter is queued (or has failed: its error is the answer).
    while lock.queued().await? == 0 {
        if waiter.is_finished() {
            return waiter.await.expect("task");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    g.extend(TTL).await?;
    g.release().await?;
    waiter.await.expect("task")
}

/// Two readers renewed past their ttl, the status, then a writer that waited for them.
async fn rw(url: String, name: String) -> Result<(), Error> {
    let (a, b) = (client(&url).await?, client(&url).await?);
    let lock = a.rw_lock(name.as_str()).with_ttl(TTL);
    let (r1, r2) = (lock.read().await?, lock.read().await?);
    assert_eq!(lock.status().await?.readers, 2);
    let writer = tokio::spawn({
        let lock = b.rw_lock(name.as_str()).with_wait(wait());
        async move {
            let w = lock.write().await?;
            w.extend(TTL).await?;
            w.release().await
        }
    });
    tokio::time::sleep(TTL + TTL / 3).await;
    r1.lease().check()?;
    r1.release().await?;
    r2.release().await?;
    writer.await.expect("task")
}

/// Several locks at once, extended, released, and waited for.
async fn multi(url: String, name: String) -> Result<(), Error> {
    let (a, b) = (client(&url).await?, client(&url).await?);
    let names = [format!("{name}:a"), format!("{name}:b")];
    let g = a.multi_lock(names.clone())?.with_ttl(TTL).acquire().await?;
    let waiter = tokio::spawn({
        let lock = b.multi_lock(names)?.with_wait(wait());
        async move { lock.acquire().await?.release().await }
    });
    g.extend(TTL).await?;
    g.release().await?;
    waiter.await.expect("task")
}

/// Armed, waited for in another client, counted down to open.
async fn latch(url: String, name: String) -> Result<(), Error> {
    let (a, b) = (client(&url).await?, client(&url).await?);
    let latch = a.latch(name.as_str());
    assert!(latch.arm(2).await?);
    let waiter = tokio::spawn({
        let latch = b.latch(name.as_str()).with_wait(wait());
        async move { latch.wait().await }
    });
    latch.count_down().await?;
    assert_eq!(latch.count().await?, Some(1));
    latch.count_down().await?;
    waiter.await.expect("task")
}

/// Fenced writes, reads, read-modify-write, claim, and the unfenced reads.
async fn resource(url: String, name: String) -> Result<(), Error> {
    let c = client(&url).await?;
    let res = c.resource(name.as_str());
    let t = FencingToken::new(7);
    res.set(t, "n", "1").await?;
    res.set_many(t, &[("a", b"1"), ("b", b"2")]).await?;
    res.read(t, "n").await?;
    res.update(t, "n", |v| {
        Some(format!("{}1", v.unwrap_or("")).into_bytes())
    })
    .await?;
    res.claim(FencingToken::new(8)).await?;
    res.get("n").await?;
    res.highest_token().await?;
    Ok(())
}

/// Every optimistic helper, on a key the user may touch.
async fn optimistic(url: String, name: String) -> Result<(), Error> {
    let c = client(&url).await?;
    let key = format!("fenced:{name}");
    c.compare_and_set(&key, None, b"1").await?;
    let vkey = format!("{key}:v");
    c.set_if_version(&vkey, 0, b"x").await?;
    c.get_versioned(&vkey).await?;
    let n = format!("{key}:n");
    c.set_max(&n, 5).await?;
    c.set_min(&n, 3).await?;
    c.decrement_if_at_least(&n, 1).await?;
    let t = format!("{key}:t");
    c.transaction(&[t.as_str()], |tx| {
        let t = t.clone();
        async move {
            let v: i64 = tx.get(&t).await?.unwrap_or(0);
            tx.set(&t, v + 1);
            Ok::<_, Error>(())
        }
    })
    .await?;
    // A step that decides to write nothing ends with UNWATCH (without it, the connection is
    // closed instead of going back to the pool: slower, still correct).
    c.transaction(&[t.as_str()], |tx| {
        let t = t.clone();
        async move { tx.get::<i64>(&t).await.map(drop) }
    })
    .await?;
    Ok(())
}

/// A miss computed and stored, a hit, a caller of another client waiting on the computer, an
/// invalidation.
async fn cache(url: String, name: String) -> Result<(), Error> {
    let (a, b) = (client(&url).await?, client(&url).await?);
    let cache = a.cache(name.as_str()).with_lease_ttl(TTL);
    let (started, go) = (
        std::sync::Arc::new(tokio::sync::Notify::new()),
        std::sync::Arc::new(tokio::sync::Notify::new()),
    );
    let mut computer = tokio::spawn({
        let (cache, started, go) = (cache.clone(), started.clone(), go.clone());
        async move {
            cache
                .get_or_compute("k", Duration::from_secs(10), |_lease| async move {
                    started.notify_one();
                    go.notified().await;
                    Ok::<_, Error>(Some(b"v".to_vec()))
                })
                .await
        }
    });
    tokio::select! {
        _ = started.notified() => {}
        // Failed before computing: its error is the answer.
        done = &mut computer => return done.expect("task").map(drop),
    }
    let follower = tokio::spawn({
        let cache = b.cache(name.as_str()).with_wait(wait());
        async move {
            cache
                .get_or_compute("k", Duration::from_secs(10), |_| async {
                    Ok::<_, Error>(Some(b"other".to_vec()))
                })
                .await
        }
    });
    go.notify_one();
    let (computed, followed) = (
        computer.await.expect("task")?,
        follower.await.expect("task")?,
    );
    if computed != followed {
        // The store failed without a typed error: the follower had to compute again.
        return Err(Error::InvalidArgument(format!(
            "{computed:?} != {followed:?}"
        )));
    }
    cache.get("k").await?;
    cache.invalidate("k").await?;
    Ok(())
}

/// An exercise that does not finish in 10 s failed (as a timeout).
async fn bounded(f: impl Future<Output = Result<(), Error>>) -> Result<(), Error> {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .unwrap_or_else(|_| Err(Error::InvalidArgument("the exercise hung".into())))
}

/// Checks one primitive's list (`BASE` + `list`, `SPEED` optional):
/// - it holds every command of every script the primitive may run, on any path;
/// - with it, and without the speed commands, the exercise works;
/// - without any one of its commands, the exercise either fails with `Error::Permission`
///   naming that command, or loses its lease when the command is one renewal runs, or still
///   works (a path this exercise does not take, such as a waiter giving up).
async fn check_list<F, Fut>(label: &str, list: &[&str], exercise: F)
where
    F: Fn(String, String) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let needed: Vec<&str> = BASE.iter().chain(list).copied().collect();
    let scripts = SCRIPTS
        .iter()
        .find(|(name, _)| *name == label)
        .map(|(_, s)| *s)
        .unwrap_or_default();
    for command in scripts.iter().flat_map(|s| script_commands(s)) {
        assert!(
            needed.contains(&command.as_str()) || SPEED.contains(&command.as_str()),
            "{label}'s scripts run {command}, which its ACL list lacks"
        );
    }
    let renewal: Vec<String> = scripts
        .iter()
        .filter(|s| s.starts_with("-- Renew"))
        .flat_map(|s| script_commands(s))
        .collect();
    for source in scripts {
        assert!(
            source
                .lines()
                .all(|l| l.matches("redis.call(").count() <= 1),
            "one command per line, so that a refusal inside a script names it"
        );
    }
    let exercise = |url, name| bounded(exercise(url, name));
    let server = crate::support::server();
    let all: Vec<&str> = needed.iter().chain(&SPEED).copied().collect();
    let url = user(&server, &format!("{label}-all"), &all).await;
    exercise(url, format!("{label}-all")).await.unwrap();
    let url = user(&server, &format!("{label}-slow"), &needed).await;
    exercise(url, format!("{label}-slow")).await.unwrap();
    for (i, missing) in needed.iter().enumerate() {
        let fewer: Vec<&str> = all.iter().copied().filter(|c| c != missing).collect();
        let url = user(&server, &format!("{label}{i}"), &fewer).await;
        match exercise(url, format!("{label}{i}")).await {
            Ok(()) => {}
            // Newer servers name a container command's subcommand (`xinfo|stream`).
            Err(Error::Permission { command, .. }) => assert!(
                command == *missing || command.starts_with(&format!("{missing}|")),
                "{label} without {missing}: {command}"
            ),
            // Scripts refused: a primitive that needs them says so with the server's words.
            Err(Error::Unsupported(why)) if crate::acl::SCRIPTING.contains(missing) => {
                assert!(why.contains(missing), "{label} without {missing}: {why}")
            }
            // Renewal runs in the background: a refused renewal ends the lease (and logs a
            // warning that names the command).
            Err(Error::LeaseLost { .. }) if renewal.contains(&missing.to_string()) => {}
            Err(other) => panic!("{label} without {missing}: {other:?}"),
        }
    }
}

/// The smallest list, found by dropping commands one at a time from every command fenced
/// uses, wake-up aside.
async fn minimal<F, Fut>(label: &str, exercise: F) -> Vec<&'static str>
where
    F: Fn(String, String) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let exercise = |url, name| bounded(exercise(url, name));
    let server = crate::support::server();
    let mut kept: Vec<&'static str> = EVERY_COMMAND
        .iter()
        .copied()
        .filter(|c| !SPEED.contains(c))
        .collect();
    let url = user(&server, &format!("{label}-every"), &kept).await;
    exercise(url, format!("{label}-every")).await.unwrap();
    for (i, candidate) in EVERY_COMMAND.iter().enumerate() {
        let fewer: Vec<&'static str> = kept.iter().copied().filter(|c| c != candidate).collect();
        let url = user(&server, &format!("{label}{i}"), &fewer).await;
        if exercise(url, format!("{label}{i}")).await.is_ok() {
            kept = fewer;
        }
    }
    kept
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "derives the lists; run by hand after a script changes"]
async fn discover_minimal_acls() {
    println!("reentrant {:?}", minimal("reentrant", reentrant).await);
    println!("fair {:?}", minimal("fair", fair).await);
    println!("rw {:?}", minimal("rw", rw).await);
    println!("multi {:?}", minimal("multi", multi).await);
    println!("latch {:?}", minimal("latch", latch).await);
    println!("resource {:?}", minimal("resource", resource).await);
    println!("optimistic {:?}", minimal("optimistic", optimistic).await);
    println!("cache {:?}", minimal("cache", cache).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reentrant_locks_acl() {
    check_list("reentrant", REENTRANT, reentrant).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fair_locks_acl() {
    check_list("fair", FAIR, fair).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rw_locks_acl() {
    check_list("rw", RW, rw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_multi_locks_acl() {
    check_list("multi", MULTI, multi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latchs_acl() {
    check_list("latch", LATCH, latch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fenced_resources_acl() {
    check_list("resource", RESOURCE, resource).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_optimistic_helpers_acl() {
    check_list("optimistic", OPTIMISTIC, optimistic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caches_acl() {
    check_list("cache", CACHE, cache).await;
}
