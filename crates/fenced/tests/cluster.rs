//! Redis Cluster: every primitive on a real cluster the test kit forms (3 masters, and
//! replicas where a test promotes one), renewal across nodes, wake-ups across nodes, and a
//! held lease through a slot migration, a replica promotion and a killed master.

use std::time::Duration;

use fenced::optimistic::CasOutcome;
use fenced::resource::FencedWrite;
use fenced::{Client, Error, WaitPolicy};
use fenced_testkit::{RedisCluster, Reply, key_slot};

use crate::support::{cluster, cluster_client, raw, sharded_cluster};
use tokio::time::Instant;

/// Lock names whose keys land on `n` different masters' slots, one per master.
fn names_on_every_master(c: &RedisCluster, masters: usize) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut owners = Vec::new();
    for i in 0.. {
        let name = format!("spread-{i}");
        let owner = c
            .owner_of(key_slot(&format!("fenced:{{{name}}}")), 0)
            .unwrap();
        if !owners.contains(&owner) {
            owners.push(owner);
            names.push(name);
        }
        if owners.len() == masters {
            break;
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_runs_on_a_cluster_and_what_needs_one_server_says_so() {
    let c = cluster(3, 0);
    let a = cluster_client(&c).await;
    let b = cluster_client(&c).await;

    // Locks on every master: exclusive, tokens increasing, released.
    for name in names_on_every_master(&c, 3) {
        let g = a.lock(name.as_str()).acquire().await.unwrap();
        assert!(b.lock(name.as_str()).try_acquire().await.unwrap().is_none());
        let first = g.fencing_token();
        g.release().await.unwrap();
        let g = b.lock(name.as_str()).acquire().await.unwrap();
        assert!(g.fencing_token() > first, "{name}: tokens must increase");
        let status = a.lock(name.as_str()).status().await.unwrap();
        assert!(status.holder.is_some());
        g.release().await.unwrap();
    }

    // Reentrant, semaphore, read-write, fair, latch.
    let r = a.reentrant_lock("re").acquire().await.unwrap();
    let again = r.reenter().await.unwrap();
    drop(again);
    r.release().await.unwrap();
    let p1 = a.semaphore("pool", 2).acquire().await.unwrap();
    let p2 = b.semaphore("pool", 2).acquire().await.unwrap();
    assert!(
        a.semaphore("pool", 2)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    // Status reads are one transaction of reads on the slot's master.
    let pool = b.semaphore("pool", 2).status().await.unwrap();
    assert_eq!((pool.held, pool.holders), (2, 2));
    p1.release().await.unwrap();
    p2.release().await.unwrap();
    let r1 = a.rw_lock("feed").read().await.unwrap();
    let r2 = b.rw_lock("feed").read().await.unwrap();
    assert!(a.rw_lock("feed").try_write().await.unwrap().is_none());
    assert_eq!(b.rw_lock("feed").status().await.unwrap().readers, 2);
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    b.rw_lock("feed")
        .write()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    a.fair_lock("fifo")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let latch = a.latch("start");
    assert!(latch.arm(1).await.unwrap());
    let waiter = tokio::spawn({
        let latch = b.latch("start");
        async move { latch.wait().await }
    });
    assert_eq!(latch.count_down().await.unwrap(), Some(0));
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the latch's waiter was not woken")
        .unwrap()
        .unwrap();

    // A fenced resource refuses an older token.
    let old = a.lock("writer").acquire().await.unwrap();
    let old_token = old.fencing_token();
    old.release().await.unwrap();
    let new = a.lock("writer").acquire().await.unwrap();
    let res = a.resource("ledger");
    assert_eq!(
        res.set(new.fencing_token(), "balance", "10").await.unwrap(),
        FencedWrite::Applied
    );
    assert!(matches!(
        res.set(old_token, "balance", "99").await.unwrap(),
        FencedWrite::Stale { .. }
    ));
    new.release().await.unwrap();

    // The cache computes once; the atomic helpers work.
    let cache = a.cache("product");
    let v = cache
        .get_or_compute("42", Duration::from_secs(10), |_| async {
            Ok::<_, Error>(Some(b"widget".to_vec()))
        })
        .await
        .unwrap();
    assert_eq!(v.as_deref(), Some(&b"widget"[..]));
    let again = cache
        .get_or_compute("42", Duration::from_secs(10), |_| async {
            Ok::<_, Error>(Some(b"computed twice".to_vec()))
        })
        .await
        .unwrap();
    assert_eq!(
        again.as_deref(),
        Some(&b"widget"[..]),
        "read from the cache"
    );
    let election = a.election("cluster-leader");
    let leading = election.campaign("me").await.unwrap();
    let seen = b.election("cluster-leader").status().await.unwrap();
    assert_eq!(seen.leader.map(|l| l.value).as_deref(), Some("me"));
    leading.resign().await.unwrap();
    assert_eq!(
        a.compare_and_set("config", None, b"v1").await.unwrap(),
        CasOutcome::Swapped
    );

    // What needs one server is refused with a typed error, and sends nothing.
    let multi = a.multi_lock(["one", "two"]).unwrap();
    assert!(matches!(multi.acquire().await, Err(Error::Unsupported(_))));
    let single = a.multi_lock(["alone"]).unwrap();
    single.acquire().await.unwrap().release().await.unwrap();
    // A transaction's keys share a slot (one hash tag); keys of two slots are refused.
    let (x, y) = ("{order:1}:stock", "{order:2}:stock");
    assert_ne!(key_slot(x), key_slot(y));
    assert!(matches!(
        a.transaction(&[x, y], |_tx| async { Ok::<_, Error>(()) })
            .await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_walk_every_master() {
    let c = cluster(3, 0);
    let a = cluster_client(&c).await;
    // Names on every master, several per slot-owner, so a batch must be split by slot.
    let mut names: Vec<String> = (0..24).map(|i| format!("listed-{i}")).collect();
    names.extend(names_on_every_master(&c, 3));
    names.sort();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(a.lock(name.as_str()).acquire().await.unwrap());
    }
    let listed: Vec<String> = a
        .list("*")
        .await
        .unwrap()
        .locks
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(listed, names);
    let only: Vec<String> = a
        .list("listed-1*")
        .await
        .unwrap()
        .locks
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(only.len(), 11, "{only:?}");
    let granted = a.list("*").await.unwrap().grants;
    assert_eq!(granted.len(), names.len());
    let p = a.semaphore("pool-listed", 3).acquire().await.unwrap();
    let sems = a.list("*").await.unwrap().semaphores;
    assert_eq!(sems.len(), 1);
    assert_eq!(sems[0].holders, 1);
    let granted = a.list("*").await.unwrap().grants;
    assert!(
        granted
            .iter()
            .any(|g| g.name == "pool-listed" && g.semaphore),
        "{granted:?}"
    );
    p.release().await.unwrap();
    for g in guards {
        g.release().await.unwrap();
    }
    assert!(a.list("*").await.unwrap().locks.is_empty());
}

/// Reads `key` as a number through a read-only transaction (0 when absent).
async fn read_number(client: &Client, key: &str) -> i64 {
    client
        .transaction(&[key], |tx| async move {
            Ok::<_, Error>(tx.get::<i64>(key).await?.unwrap_or(0))
        })
        .await
        .unwrap()
}

/// One buyer: takes a unit of `stock` if any is left, counting the sale in `sold` (both keys
/// in one slot). True if it bought.
async fn buy(client: &Client, stock: &str, sold: &str) -> bool {
    client
        .transaction(&[stock, sold], |tx| async move {
            let left = tx.get::<i64>(stock).await?.unwrap_or(0);
            if left <= 0 {
                return Ok::<_, Error>(false);
            }
            tx.set(stock, left - 1);
            tx.incr(sold, 1);
            Ok(true)
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_run_on_their_slots_master_and_follow_it_when_the_slot_moves() {
    let c = cluster(3, 0);
    // A slot that the first seed does not serve: the first WATCH meets MOVED.
    let tag = (0..)
        .map(|i| format!("{{sale-{i}}}"))
        .find(|t| c.owner_of(key_slot(t), 0).unwrap() != 0)
        .unwrap();
    let (stock, sold) = (format!("{tag}:stock"), format!("{tag}:sold"));
    let (stock, sold) = (stock.as_str(), sold.as_str());
    let a = cluster_client(&c).await;
    let b = cluster_client(&c).await;
    a.transaction(&[stock], |tx| async move {
        tx.set(stock, 10);
        Ok::<_, Error>(())
    })
    .await
    .unwrap();

    // The seckill: 40 buyers over two clients, 10 units, none oversold.
    let buyers: Vec<_> = (0..40)
        .map(|i| {
            let client = if i % 2 == 0 { a.clone() } else { b.clone() };
            let (stock, sold) = (stock.to_owned(), sold.to_owned());
            tokio::spawn(async move { buy(&client, &stock, &sold).await })
        })
        .collect();
    let mut bought = 0;
    for buyer in buyers {
        bought += i64::from(buyer.await.unwrap());
    }
    assert_eq!(bought, 10);
    assert_eq!(read_number(&a, stock).await, 0);
    assert_eq!(read_number(&b, sold).await, 10);

    // The slot moves to another master: the next transaction follows the MOVED reply.
    let slot = key_slot(&tag);
    let from = c.owner_of(slot, 0).unwrap();
    let to = (0..3).find(|&m| m != from).unwrap();
    tokio::task::block_in_place(|| c.migrate_slot(slot, to)).unwrap();
    a.transaction(&[stock], |tx| async move {
        tx.set(stock, 2);
        Ok::<_, Error>(())
    })
    .await
    .unwrap();
    assert!(buy(&a, stock, sold).await);

    // And it moves back while a transaction is between its reads and its EXEC: that attempt
    // writes nothing, and the next one runs on the new master. Exactly one unit is sold.
    let back = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let moved_mid_step = b
        .transaction(&[stock, sold], |tx| {
            let (c, back) = (&c, back.clone());
            async move {
                let left = tx.get::<i64>(stock).await?.unwrap_or(0);
                if !back.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    tokio::task::block_in_place(|| c.migrate_slot(slot, from)).unwrap();
                }
                tx.set(stock, left - 1);
                tx.incr(sold, 1);
                Ok::<_, Error>(tx.attempt())
            }
        })
        .await
        .unwrap();
    assert!(
        moved_mid_step >= 2,
        "the interrupted attempt must not commit"
    );
    assert_eq!(read_number(&a, stock).await, 0);
    assert_eq!(read_number(&a, sold).await, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_on_every_master_are_renewed_and_a_release_wakes_a_waiter_of_another_client() {
    let c = sharded_cluster(3, 0);
    let a = cluster_client(&c).await;
    let b = Client::cluster_builder(&c.urls())
        .timeout(Duration::from_millis(800))
        // Polling alone would take 10 s: a wake-up within the bound below is pub/sub's.
        .poll_interval(Duration::from_secs(10), Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let ttl = Duration::from_millis(400);
    let names = names_on_every_master(&c, 3);
    let mut guards = Vec::new();
    for name in &names {
        guards.push(a.lock(name.as_str()).with_ttl(ttl).acquire().await.unwrap());
    }
    let before = a.stats();
    tokio::time::sleep(ttl * 4).await;
    for g in &guards {
        assert!(!g.lease().is_lost(), "{} was lost", g.name());
    }
    let after = a.stats();
    assert!(
        after.renewed >= before.renewed + 3 * 3,
        "renewals {before:?} -> {after:?}"
    );

    // A waiter in another client, on each master's slot, hears the release.
    for g in guards {
        let name = g.name().to_owned();
        let waiting = waiter(b.lock(name.as_str()));
        // The waiter subscribed (sharded, on the slot's master) after finding the lock taken.
        let channel = format!("fenced:{{{name}}}:released");
        let owner = c.owner_of(key_slot(&channel), 0).unwrap();
        until_subscribers(&c, owner, true, &channel, 1).await;
        release_wakes(g, waiting, &name).await;
    }
}

/// Waits for `lock` (20 s at most) in a task, which answers when it got the lock.
fn waiter(lock: fenced::Lock) -> tokio::task::JoinHandle<Result<Instant, Error>> {
    let lock = lock.with_wait(WaitPolicy::up_to(Duration::from_secs(20)));
    tokio::spawn(async move {
        let g = lock.acquire().await?;
        let at = Instant::now();
        g.release().await?;
        Ok(at)
    })
}

/// Releases `g` and checks that `waiting` got the lock within 2 s: a wake-up, not a poll.
async fn release_wakes(
    g: fenced::LockGuard,
    waiting: tokio::task::JoinHandle<Result<Instant, Error>>,
    what: &str,
) {
    let released = Instant::now();
    g.release().await.unwrap();
    let woke = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter was not woken")
        .unwrap()
        .unwrap();
    assert!(
        woke.duration_since(released) < Duration::from_secs(2),
        "{what}: woken after {:?}",
        woke.duration_since(released)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_survives_a_slot_migration_and_a_replica_promotion() {
    let c = cluster(3, 1);
    let a = cluster_client(&c).await;
    // Connected now, silent until after the migration: its slot map is stale then, so its
    // first command meets a MOVED redirect, which must be followed, not reported.
    let stale = cluster_client(&c).await;
    // Long enough that a renewal held up by the migration's redirects or the failover's
    // switch (hundreds of ms on a loaded machine) still lands within the lease.
    let ttl = Duration::from_secs(2);
    let lock = a.lock("moving").with_ttl(ttl);
    let slot = key_slot("fenced:{moving}");
    let g = lock.acquire().await.unwrap();
    let first = g.fencing_token();

    // Migrate the slot to another master while the lease is held and renewed.
    let from = c.owner_of(slot, 0).unwrap();
    let to = (0..3).find(|&m| m != from).unwrap();
    tokio::task::block_in_place(|| c.migrate_slot(slot, to)).unwrap();
    assert!(
        stale.lock("moving").try_acquire().await.unwrap().is_none(),
        "a redirected attempt must reach the new owner and find the lock held"
    );
    // Renewed at least once on the new owner (every third of the ttl).
    tokio::time::sleep(ttl).await;
    assert!(!g.lease().is_lost(), "lost across the migration");
    assert!(a.lock("moving").try_acquire().await.unwrap().is_none());

    // Promote the new owner's replica (a manual failover: it catches up first).
    let replica = c.replicas_of(to).unwrap()[0];
    tokio::task::block_in_place(|| c.failover(replica, false)).unwrap();
    assert_eq!(c.owner_of(slot, replica).unwrap(), replica);
    tokio::time::sleep(ttl).await;
    assert!(!g.lease().is_lost(), "lost across the failover");
    assert!(a.lock("moving").try_acquire().await.unwrap().is_none());
    g.release().await.unwrap();

    let next = a.lock("moving").acquire().await.unwrap();
    assert!(next.fencing_token() > first, "tokens must increase");
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_master_dies_its_replica_serves_and_tokens_still_increase_even_where_it_lagged() {
    let mut c = cluster(3, 1);
    let a = cluster_client(&c).await;
    let slot = key_slot("fenced:{ledger}");
    let g = a.lock("ledger").acquire().await.unwrap();
    let held = g.fencing_token();
    let owner = c.owner_of(slot, 0).unwrap();
    let replica = c.replicas_of(owner).unwrap()[0];
    // The replica has the grant (`WAIT` on the master), then the master dies: its replica
    // takes over.
    let mut on_owner = raw(c.node(owner)).await;
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query_async(&mut on_owner)
        .await
        .unwrap();
    assert_eq!(acked, 1, "the replica never acknowledged the grant");
    // Then the replica lags: grants of another name of the same master that it never sees.
    let lagging = (0..)
        .map(|i| format!("lagging-{i}"))
        .find(|n| c.owner_of(key_slot(&format!("fenced:{{{n}}}")), 0).ok() == Some(owner))
        .unwrap();
    c.node(replica).pause().unwrap();
    let mut unseen = 0;
    for _ in 0..3 {
        let g = a.lock(&lagging).acquire().await.unwrap();
        unseen = g.fencing_token().get();
        g.release().await.unwrap();
    }
    c.node(owner).kill().unwrap();
    c.node(replica).resume().unwrap();
    let asker = (0..3).find(|&m| m != owner).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.owner_of(slot, asker).ok() != Some(replica) {
        assert!(Instant::now() < deadline, "no failover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::task::block_in_place(|| c.wait_healthy()).unwrap();
    // The lease was replicated: still held (the holder renews on the new master). The first
    // command may meet the dead master's broken connection and report it as Unavailable
    // (never sent again: it might have run); the client then reconnects on the new map.
    let t0 = Instant::now();
    let held_by_us = loop {
        match a.lock("ledger").try_acquire().await {
            Ok(other) => break other.is_none(),
            Err(e) if e.is_transient() && t0.elapsed() < Duration::from_secs(10) => {
                eprintln!("after {:?}: {e}", t0.elapsed());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the client did not recover from the failover: {e}"),
        }
    };
    assert!(held_by_us, "the replicated lease was lost in the failover");
    g.release().await.unwrap();
    let next = a
        .lock("ledger")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(10)))
        .acquire()
        .await
        .unwrap();
    assert!(
        next.fencing_token() > held,
        "tokens must increase after a failover"
    );
    next.release().await.unwrap();
    // The promoted replica never saw the last grants of the other name: its fence there is
    // older, and the next token still comes out above them.
    let after = a.lock(&lagging).acquire().await.unwrap();
    assert!(
        after.fencing_token().get() > unseen,
        "a token repeated after a failover to a lagging replica: {} after {unseen}",
        after.fencing_token()
    );
    after.release().await.unwrap();
}

/// How many clients node `i` counts on `channel`: sharded (`SHARDNUMSUB`) or classic.
pub(crate) fn subscribers(c: &RedisCluster, i: usize, sharded: bool, channel: &str) -> i64 {
    let kind = if sharded { "SHARDNUMSUB" } else { "NUMSUB" };
    match c.run(i, &["PUBSUB", kind, channel]).unwrap() {
        Reply::Array(pair) => match pair.get(1) {
            Some(Reply::Int(n)) => *n,
            other => panic!("PUBSUB {kind}: {other:?}"),
        },
        other => panic!("PUBSUB {kind}: {other:?}"),
    }
}

/// Waits (5 s at most) until node `i` counts `n` sharded subscribers on `channel`.
async fn until_sharded_subscribers(c: &RedisCluster, i: usize, channel: &str, n: i64) {
    until_subscribers(c, i, true, channel, n).await;
}

/// Waits (5 s at most) until node `i` counts `n` subscribers on `channel`, sharded or not.
pub(crate) async fn until_subscribers(
    c: &RedisCluster,
    i: usize,
    sharded: bool,
    channel: &str,
    n: i64,
) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while subscribers(c, i, sharded, channel) != n {
        assert!(
            Instant::now() < deadline,
            "node {i} never counted {n} subscribers (sharded: {sharded}) on {channel}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_subscribe_on_their_slots_master_and_follow_the_slot_when_it_moves() {
    let c = sharded_cluster(3, 0);
    let a = cluster_client(&c).await;
    let b = Client::cluster_builder(&c.urls())
        // Polling alone would take 10 s: a wake-up within the bound below is pub/sub's.
        .poll_interval(Duration::from_secs(10), Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let channel = "fenced:{sharded}:released";
    let slot = key_slot(channel);
    let from = c.owner_of(slot, 0).unwrap();
    let to = (0..3).find(|&m| m != from).unwrap();

    let g = a.lock("sharded").acquire().await.unwrap();
    let waiting = waiter(b.lock("sharded"));
    // The waiter's subscription sits on the slot's master, sharded; no node has a classic one.
    until_sharded_subscribers(&c, from, channel, 1).await;
    for i in 0..3 {
        assert_eq!(subscribers(&c, i, false, channel), 0, "node {i}");
    }

    // The slot moves: its old master drops the subscription, the client subscribes on the
    // new one.
    tokio::task::block_in_place(|| c.migrate_slot(slot, to)).unwrap();
    until_sharded_subscribers(&c, to, channel, 1).await;
    assert_eq!(subscribers(&c, from, true, channel), 0);

    // The release is announced on the new master alone, and the waiter hears it.
    release_wakes(g, waiting, "after the migration").await;
    let stats = c.run(to, &["INFO", "commandstats"]).unwrap();
    assert!(
        stats.text().contains("cmdstat_spublish:calls="),
        "the release must SPUBLISH: {}",
        stats.text()
    );
}

/// A script's first call on a cluster loads it on the master of the call's slot alone, with
/// the hash that master answers: a master that does not answer (here, paused) fails no call
/// that never goes to it, and is never asked to load anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripts_first_call_loads_it_where_the_call_runs_and_a_silent_master_elsewhere_fails_nothing()
 {
    let mut c = cluster(3, 0);
    let names = names_on_every_master(&c, 3);
    let client = cluster_client(&c).await;
    let live: Vec<usize> = names[..2]
        .iter()
        .map(|name| {
            c.owner_of(key_slot(&format!("fenced:{{{name}}}")), 0)
                .unwrap()
        })
        .collect();
    let silent = (0..c.len()).find(|i| !live.contains(i)).unwrap();
    for i in 0..c.len() {
        // No server knows a script yet, and the live masters serve their slots while one is
        // silent.
        c.run(i, &["SCRIPT", "FLUSH"]).unwrap();
        c.run(i, &["CONFIG", "RESETSTAT"]).unwrap();
        c.run(i, &["CONFIG", "SET", "cluster-require-full-coverage", "no"])
            .unwrap();
    }
    c.node(silent).pause().unwrap();
    let calls = async {
        for name in &names[..2] {
            let g = client.lock(name.as_str()).acquire().await.unwrap();
            g.extend(Duration::from_secs(5)).await.unwrap();
            let other = client.lock(name.as_str()).try_acquire().await.unwrap();
            assert!(other.is_none(), "{name}");
            g.release().await.unwrap();
        }
    };
    let answered = tokio::time::timeout(Duration::from_secs(5), calls).await;
    c.node(silent).resume().unwrap();
    assert!(
        answered.is_ok(),
        "calls on the live masters waited for the silent one"
    );
    let loads = |i: usize| {
        let stats = c.run(i, &["INFO", "commandstats"]).unwrap();
        stats
            .text()
            .lines()
            .find(|l| l.starts_with("cmdstat_script|load:") || l.starts_with("cmdstat_script:"))
            .is_some()
    };
    for &i in &live {
        assert!(
            loads(i),
            "master {i} ran scripts it was never asked to load"
        );
    }
    assert!(
        !loads(silent),
        "the silent master was asked to load a script"
    );
}

/// A master back from a pause long enough for the others to mark it failed serves its
/// slots' locks again: the client's first call there (a script's load, then the script)
/// reaches it and answers within the timeout's few rounds, not never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_back_from_a_pause_serves_its_locks_again() {
    let mut c = cluster(3, 0);
    let names = names_on_every_master(&c, 3);
    let client = cluster_client(&c).await;
    let silent = c
        .owner_of(key_slot(&format!("fenced:{{{}}}", names[2])), 0)
        .unwrap();
    for i in 0..c.len() {
        c.run(i, &["CONFIG", "SET", "cluster-require-full-coverage", "no"])
            .unwrap();
    }
    // The client knows no script of the silent master yet: its first lock there loads one.
    c.node(silent).pause().unwrap();
    let other = (0..c.len()).find(|&i| i != silent).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let nodes = c.run(other, &["CLUSTER", "NODES"]).unwrap();
        if nodes.text().lines().any(|l| l.contains(" master,fail ")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no master marked the silent one failed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for name in &names[..2] {
        let g = client.lock(name.as_str()).acquire().await.unwrap();
        g.release().await.unwrap();
    }
    c.node(silent).resume().unwrap();
    let back = async {
        let g = client.lock(names[2].as_str()).acquire().await?;
        g.release().await
    };
    let answered = tokio::time::timeout(Duration::from_secs(20), back).await;
    assert!(
        matches!(answered, Ok(Ok(_))),
        "the master back from its pause: {answered:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flushed_between_its_reload_and_its_call_is_sent_again() {
    // What a failover does between the client's `SCRIPT LOAD` and its `EVALSHA` (the slot's
    // new master never had the script), done here by flushing the scripts of the slot's
    // master every millisecond, so that some flushes land between a reload and its call: a call
    // that meets `NOSCRIPT` after its reload did not run, and goes out again, loaded once
    // more; the caller never sees it.
    let mut c = cluster(3, 0);
    let a = cluster_client(&c).await;
    let owner = c.owner_of(key_slot("fenced:{flushed}"), 0).unwrap();
    let mut on_owner = raw(c.node(owner)).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let flusher = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut flushes = 0u64;
            while !stop.is_cancelled() {
                let _: () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut on_owner)
                    .await
                    .unwrap();
                flushes += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            flushes
        })
    };
    let mut last = 0;
    for _ in 0..500 {
        let g = a.lock("flushed").acquire().await.unwrap();
        assert!(g.fencing_token().get() > last);
        last = g.fencing_token().get();
        g.release().await.unwrap();
    }
    stop.cancel();
    assert!(flusher.await.unwrap() > 0);
}
