//! The least-privilege ACL of a lock client, as documented in the README: with exactly these
//! permissions everything a lock does works (acquire, wait and be woken, renew, hand over,
//! release); with any one of them taken away, the error names what is missing.

use std::time::Duration;

use fenced::{Client, Error, WaitPolicy};

use crate::acl_family::user;
use crate::support::raw;

/// The commands a lock client needs, besides its key and channel patterns (README, "Least
/// privilege").
pub(crate) const LOCK_COMMANDS: [&str; 11] = [
    "evalsha",
    "script|load",
    "ping",
    "set",
    "get",
    "mget",
    "del",
    "pexpire",
    "pttl",
    "xadd",
    "publish",
];

/// For wake-up on release (`subscribe`, `unsubscribe`: without them waiters poll), for the
/// one-round-trip handover to a waiter of the same client (`pubsub|numsub`, `llen`: without
/// them a release goes the ordinary way), and for the grant by transaction (`multi`, `exec`,
/// `type`, `watch`: without them grants run the acquire script). Nothing fails without them;
/// it is slower.
const SPEED_COMMANDS: [&str; 8] = [
    "subscribe",
    "unsubscribe",
    "pubsub|numsub",
    "llen",
    "multi",
    "exec",
    "type",
    "watch",
];

/// Without scripts, for wake-ups.
const NO_SCRIPT_SPEED_COMMANDS: [&str; 2] = ["subscribe", "unsubscribe"];

/// The commands a lock client without scripts needs (`ClientBuilder::without_scripts`;
/// operations guide, "Least privilege"): each step of the lock is a `WATCH`/`MULTI`/`EXEC`
/// transaction. `subscribe` and `unsubscribe` only make it faster, as above; `delifeq`
/// (Valkey 9) releases in one round trip instead of a transaction.
pub(crate) const NO_SCRIPT_COMMANDS: [&str; 12] = [
    "ping", "set", "mget", "del", "pexpire", "pttl", "xadd", "type", "publish", "watch", "multi",
    "exec",
];

/// `all` but `missing`. A client that may run `INFO` reads the server's version with it and
/// needs no `PING`: `ping` goes with `info`.
fn without<'a>(all: &[&'a str], missing: &str) -> Vec<&'a str> {
    all.iter()
        .copied()
        .filter(|c| *c != missing && !(missing == "ping" && *c == "info"))
        .collect()
}

/// Everything a lock does, end to end: the first error, if any.
async fn exercise(url: &str, name: &str) -> Result<(), Error> {
    exercise_with(url, name, false).await
}

/// [`exercise`], by a client with or without scripts.
async fn exercise_with(url: &str, name: &str, without_scripts: bool) -> Result<(), Error> {
    let builder = || {
        let b = Client::builder(url).timeout(Duration::from_millis(500));
        if without_scripts {
            b.without_scripts()
        } else {
            b
        }
    };
    let c = builder().connect().await?;
    let lock = c
        .lock(name)
        .with_ttl(Duration::from_millis(300))
        .with_wait(WaitPolicy::up_to(Duration::from_secs(3)));
    let g = lock.acquire().await?;
    // Renewal's script, called directly (the background renewal would only lose the lease).
    g.extend(Duration::from_millis(300)).await?;
    // A waiter of the same client (woken by a handover), and one of another client (woken
    // by the release's message).
    let other = builder().connect().await?;
    let local = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await?.release().await }
    });
    let remote = tokio::spawn({
        let lock = other
            .lock(name)
            .with_wait(WaitPolicy::up_to(Duration::from_secs(3)));
        async move { lock.acquire().await?.release().await }
    });
    // Renewed past its ttl.
    tokio::time::sleep(Duration::from_millis(700)).await;
    g.lease().check()?;
    g.extend(Duration::from_millis(400)).await?;
    g.release().await?;
    local.await.expect("task")?;
    remote.await.expect("task")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_is_enough_and_each_permission_is_needed() {
    let server = crate::support::server();
    let all: Vec<&str> = LOCK_COMMANDS
        .iter()
        .chain(&SPEED_COMMANDS)
        .copied()
        .collect();
    let url = user(&server, "locker", &all).await;
    exercise(&url, "all").await.unwrap();
    // Without the commands that only make it faster: slower, still correct.
    let url = user(&server, "poller", &LOCK_COMMANDS).await;
    exercise(&url, "poller").await.unwrap();
    for (i, missing) in LOCK_COMMANDS.iter().enumerate() {
        let fewer = without(&all, missing);
        let url = user(&server, &format!("without{i}"), &fewer).await;
        // A fresh script cache, so that loading scripts is needed again.
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut raw(&server).await)
            .await
            .unwrap();
        match exercise(&url, missing).await {
            Err(Error::Permission { command, .. }) => assert_eq!(&command, missing),
            // Scripts refused, and the transactions' commands allowed: the lock goes on
            // without scripts, as it learns from the first refusal.
            Ok(()) if SCRIPTING.contains(missing) => {}
            other => panic!("without {missing}: {other:?}"),
        }
    }
}

/// Without scripts: with exactly the documented commands the lock's whole cycle works, and
/// with any one of them taken away the error names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_without_scripts_is_enough_and_each_permission_is_needed() {
    let server = crate::support::server();
    let all: Vec<&str> = NO_SCRIPT_COMMANDS
        .iter()
        .chain(&NO_SCRIPT_SPEED_COMMANDS)
        .copied()
        .collect();
    let url = user(&server, "plain", &all).await;
    exercise_with(&url, "plain", true).await.unwrap();
    let url = user(&server, "plainpoller", &NO_SCRIPT_COMMANDS).await;
    exercise_with(&url, "plainpoller", true).await.unwrap();
    for (i, missing) in NO_SCRIPT_COMMANDS.iter().enumerate() {
        let fewer = without(&all, missing);
        let url = user(&server, &format!("plain{i}"), &fewer).await;
        match exercise_with(&url, missing, true).await {
            Err(Error::Permission { command, .. }) => assert_eq!(&command, missing),
            other => panic!("without {missing}: {other:?}"),
        }
    }
}

/// A user who may run every command but not on fenced's keys, or not on its channels, gets
/// [`Error::Permission`] naming `keys` or `channels`, on every server (each words it its own
/// way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_channels_outside_the_users_patterns_are_permission_errors() {
    let server = crate::support::server();
    let mut conn = raw(&server).await;
    for (name, patterns) in [
        ("nokeys", ["~other:*", "&fenced:*"]),
        ("nochannels", ["~fenced:*", "&other:*"]),
    ] {
        let args = setuser(name, &patterns, &LOCK_COMMANDS);
        let mut acl = redis::cmd(&args[0]);
        for a in &args[1..] {
            acl.arg(a);
        }
        let _: () = acl.query_async(&mut conn).await.unwrap();
    }
    let as_user = |name: &str| {
        server
            .url()
            .replace("redis://", &format!("redis://{name}:pw@"))
    };
    let c = Client::connect(&as_user("nokeys")).await.unwrap();
    let e = c.lock("k").try_acquire().await.unwrap_err();
    assert!(
        matches!(&e, Error::Permission { command, .. } if command == "keys"),
        "a lock key outside the user's patterns: {e:?}"
    );
    assert!(e.to_string().contains("~fenced:*"), "{e}");
    let c = Client::connect(&as_user("nochannels")).await.unwrap();
    let g = c.lock("c").acquire().await.unwrap();
    match g.release().await {
        Err(Error::Permission { command, .. }) => assert_eq!(command, "channels"),
        other => panic!("a release channel outside the user's patterns: {other:?}"),
    }
    // The unfenced release says so too: by its script, or natively (`DELIFEQ`, then the
    // announcement) on a server that has `DELIFEQ`, for a user who may run it.
    let native: redis::RedisResult<i64> = redis::cmd("DELIFEQ")
        .arg("probe")
        .arg("x")
        .query_async(&mut conn)
        .await;
    if native.is_ok() {
        let mut commands = LOCK_COMMANDS.to_vec();
        commands.push("delifeq");
        let args = setuser("nochannels", &["~fenced:*", "&other:*"], &commands);
        let mut acl = redis::cmd(&args[0]);
        for a in &args[1..] {
            acl.arg(a);
        }
        let _: () = acl.query_async(&mut conn).await.unwrap();
    }
    let c = Client::connect(&as_user("nochannels")).await.unwrap();
    let g = c.lock("cu").unfenced().acquire().await.unwrap();
    match g.release().await {
        Err(Error::Permission { command, .. }) => assert_eq!(command, "channels"),
        other => panic!("an unfenced release's channel outside the patterns: {other:?}"),
    }
}

/// What a semaphore client needs besides the lock's connection basics (`evalsha`,
/// `script|load`, `ping`, `subscribe`, `unsubscribe`; README, "Least privilege").
const SEMAPHORE_COMMANDS: [&str; 17] = [
    "evalsha",
    "script|load",
    "ping",
    "time",
    "set",
    "get",
    "del",
    "xadd",
    "pexpire",
    "publish",
    "zadd",
    "zrange",
    "zrangebyscore",
    "zremrangebyscore",
    "zscore",
    "zrem",
    "pexpireat",
];

/// The semaphore's hash commands, listed apart to keep each list readable.
const SEMAPHORE_HASH_COMMANDS: [&str; 4] = ["hset", "hdel", "hvals", "hgetall"];

/// Everything a semaphore does: take permits, renew them, give them back, and read status.
async fn exercise_semaphore(url: &str, name: &str) -> Result<(), Error> {
    let c = Client::builder(url)
        .timeout(Duration::from_millis(500))
        .connect()
        .await?;
    let pool = c.semaphore(name, 2).with_ttl(Duration::from_millis(300));
    let a = pool.acquire().await?;
    let b = pool.acquire_many(1).await?;
    // Renewal's script, called directly (the background renewal would only lose the lease).
    a.extend(Duration::from_millis(300)).await?;
    tokio::time::sleep(Duration::from_millis(500)).await; // renewed past its ttl
    a.lease().check()?;
    assert_eq!(pool.status().await?.held, 2);
    a.release().await?;
    b.release().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semaphores_acl_is_enough_and_each_permission_is_needed() {
    let server = crate::support::server();
    let all: Vec<&str> = SEMAPHORE_COMMANDS
        .iter()
        .chain(&SEMAPHORE_HASH_COMMANDS)
        .chain(&["subscribe", "unsubscribe"])
        .copied()
        .collect();
    let url = user(&server, "pool", &all).await;
    exercise_semaphore(&url, "all").await.unwrap();
    let needed: Vec<&str> = SEMAPHORE_COMMANDS
        .iter()
        .chain(&SEMAPHORE_HASH_COMMANDS)
        .copied()
        .collect();
    for (i, missing) in needed.iter().enumerate() {
        let fewer: Vec<&str> = all.iter().copied().filter(|c| c != missing).collect();
        let url = user(&server, &format!("pool{i}"), &fewer).await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut raw(&server).await)
            .await
            .unwrap();
        match exercise_semaphore(&url, missing).await {
            Err(Error::Permission { command, .. }) => assert_eq!(&command, missing),
            // Scripts refused: a semaphore needs them, and says so with the server's words.
            Err(Error::Unsupported(why)) if SCRIPTING.contains(missing) => {
                assert!(why.contains(missing), "{why}")
            }
            other => panic!("without {missing}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_back_to_back_where_multi_or_exec_is_refused_and_answer_the_same() {
    let server = crate::support::server();
    let owner = Client::connect(&server.url()).await.unwrap();
    let held = owner.semaphore("snap", 3).acquire_many(2).await.unwrap();
    let reader = owner.rw_lock("snap-rw").read().await.unwrap();
    let expected = owner.semaphore("snap", 3).status().await.unwrap();
    let base: Vec<&str> = SEMAPHORE_COMMANDS
        .iter()
        .chain(&SEMAPHORE_HASH_COMMANDS)
        .copied()
        .collect();
    // Without `multi`: the reads ran one by one behind the refused `MULTI`. Without `exec`:
    // the server discarded the transaction, and the reads go again back to back.
    for (name, extra) in [("nomulti", "exec"), ("noexec", "multi")] {
        let mut commands = base.clone();
        commands.push(extra);
        let url = user(&server, name, &commands).await;
        let c = Client::connect(&url).await.unwrap();
        for round in 0..2 {
            let status = c.semaphore("snap", 3).status().await.unwrap();
            assert_eq!(
                (status.held, status.holders),
                (expected.held, expected.holders),
                "{name}, read {round}"
            );
            assert_eq!(c.rw_lock("snap-rw").status().await.unwrap().readers, 1);
        }
    }
    held.release().await.unwrap();
    reader.release().await.unwrap();
}

/// The commands of scripts themselves: refused, a primitive that needs scripts answers
/// [`Error::Unsupported`], quoting the refusal.
pub(crate) const SCRIPTING: [&str; 2] = ["evalsha", "script|load"];

/// On a Redis Cluster: the lock client's list, plus what the cluster client needs (README,
/// "Least privilege").
const CLUSTER_COMMANDS: [&str; 4] = ["cluster|slots", "spublish", "ssubscribe", "sunsubscribe"];

/// `ACL SETUSER name reset on >pw <patterns> -@all +commands…`.
fn setuser(name: &str, patterns: &[&str], commands: &[&str]) -> Vec<String> {
    // `resetchannels`: Redis 6.2 gives a reset user every channel (`acl-pubsub-default`).
    let mut args: Vec<String> = [
        "ACL",
        "SETUSER",
        name,
        "reset",
        "resetchannels",
        "on",
        ">pw",
    ]
    .iter()
    .chain(patterns)
    .map(|a| (*a).to_owned())
    .collect();
    args.push("-@all".into());
    args.extend(commands.iter().map(|c| format!("+{c}")));
    args
}

/// Sets user `name` with `commands` on every node of `c`; the seeds' URLs as that user.
fn cluster_user(c: &fenced_testkit::RedisCluster, name: &str, commands: &[&str]) -> Vec<String> {
    let args = setuser(name, &["~fenced:*", "&fenced:*"], commands);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for i in 0..c.len() {
        match c.run(i, &args).unwrap() {
            fenced_testkit::Reply::Status(ok) => assert_eq!(ok, "OK"),
            other => panic!("ACL SETUSER on node {i}: {other:?}"),
        }
    }
    c.urls()
        .iter()
        .map(|u| u.replace("redis://", &format!("redis://{name}:pw@")))
        .collect()
}

/// A lock's cycle on a cluster: acquire, a waiter of another client woken by the release,
/// subscribed on sharded pub/sub (on the slot's master) or classic (on any node).
async fn exercise_cluster(
    c: &fenced_testkit::RedisCluster,
    seeds: &[String],
    name: &str,
    sharded: bool,
) -> Result<(), Error> {
    let connect = || {
        Client::cluster_builder(seeds)
            .timeout(Duration::from_millis(800))
            // Polling would take 10 s: a wake-up in time is the release's message.
            .poll_interval(Duration::from_secs(10), Duration::from_secs(10))
            .connect()
    };
    let (a, b) = (connect().await?, connect().await?);
    let g = a.lock(name).acquire().await?;
    g.extend(Duration::from_secs(5)).await?;
    let waiter = tokio::spawn({
        let lock = b
            .lock(name)
            .with_wait(WaitPolicy::up_to(Duration::from_secs(3)));
        async move { lock.acquire().await?.release().await }
    });
    let channel = format!("fenced:{{{name}}}:released");
    if sharded {
        let owner = c.owner_of(fenced_testkit::key_slot(&channel), 0).unwrap();
        crate::cluster::until_subscribers(c, owner, true, &channel, 1).await;
    } else {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while (0..c.len()).all(|i| crate::cluster::subscribers(c, i, false, &channel) == 0) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no classic subscriber"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    g.release().await?;
    waiter.await.expect("task")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_cluster_acl_is_enough() {
    let c = crate::support::cluster(3, 0);
    let all: Vec<&str> = LOCK_COMMANDS
        .iter()
        .chain(&["subscribe", "unsubscribe"])
        .chain(&CLUSTER_COMMANDS)
        .copied()
        .collect();
    let sharded = fenced_testkit::server_binary(&[])
        .unwrap()
        .has(fenced_testkit::Capability::ShardedPubSub);
    // The sharded list where the server has sharded pub/sub (Redis 7+, Valkey); Redis 6 does
    // not know its commands, and the classic list below is then the documented one.
    if sharded {
        let seeds = cluster_user(&c, "clustered", &all);
        exercise_cluster(&c, &seeds, "acl-cluster", true)
            .await
            .unwrap();
    }
    // Without the sharded commands: classic pub/sub, as on a server older than Redis 7.
    let classic: Vec<&str> = all
        .iter()
        .copied()
        .filter(|c| !["spublish", "ssubscribe", "sunsubscribe"].contains(c))
        .collect();
    let seeds = cluster_user(&c, "classic", &classic);
    exercise_cluster(&c, &seeds, "acl-classic", false)
        .await
        .unwrap();
    // Without `cluster|slots`, the client cannot read the slot map: it fails to connect.
    let blind: Vec<&str> = classic
        .iter()
        .copied()
        .filter(|c| *c != "cluster|slots")
        .collect();
    let seeds = cluster_user(&c, "blind", &blind);
    let refused = Client::cluster_builder(&seeds)
        .timeout(Duration::from_millis(800))
        .connect()
        .await;
    assert!(refused.is_err(), "connected without cluster|slots");
}

/// Through Sentinel: the lock client's list on the master, and on the sentinels what locating
/// and following the master needs (README, "Least privilege"). The master is reached with
/// the sentinel URL's user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_sentinel_acl_is_enough() {
    use fenced_testkit::{Reply, command};
    let mut set = tokio::task::block_in_place(|| fenced_testkit::RedisSentinels::start(0, 1))
        .unwrap_or_else(|e| panic!("this test needs redis-server --sentinel: {e}"));
    let sentinel = set.sentinel_urls()[0].clone();
    let port: u16 = sentinel.rsplit(':').next().unwrap().parse().unwrap();
    let on_sentinel = |name: &str, commands: &[&str]| {
        let args = setuser(name, &["&+switch-master"], commands);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert!(matches!(command(port, &args).unwrap(), Reply::Status(_)));
        sentinel.replace("redis://", &format!("redis://{name}:pw@"))
    };
    let master = set.master().unwrap();
    let master_port = set.node(master).port();
    let on_master = |name: &str| {
        let commands: Vec<&str> = LOCK_COMMANDS
            .iter()
            .chain(&["subscribe", "unsubscribe"])
            .copied()
            .collect();
        let args = setuser(name, &["~fenced:*", "&fenced:*"], &commands);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert!(matches!(
            command(master_port, &args).unwrap(),
            Reply::Status(_)
        ));
    };
    let exercise = |url: String| async move {
        let c = Client::sentinel_builder(&[url], "mymaster")
            .timeout(Duration::from_millis(800))
            .connect()
            .await?;
        let g = c.lock("acl-sentinel").acquire().await?;
        g.extend(Duration::from_secs(2)).await?;
        g.release().await?;
        // The client follows failovers: it listens to `+switch-master` on the sentinel.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let subscribed = match command(port, &["CLIENT", "LIST"]).unwrap() {
                Reply::Bulk(Some(list)) => list.lines().any(|l| l.contains(" sub=1 ")),
                other => panic!("CLIENT LIST: {other:?}"),
            };
            if subscribed {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no +switch-master listener"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok::<_, Error>(())
    };
    on_master("watcher");
    let url = on_sentinel(
        "watcher",
        &["sentinel|get-master-addr-by-name", "subscribe"],
    );
    exercise(url).await.unwrap();
    // Without the lookup, the master cannot be located.
    on_master("lost");
    let url = on_sentinel("lost", &["subscribe"]);
    assert!(
        exercise(url).await.is_err(),
        "located the master without the lookup"
    );
    drop(set);
}
