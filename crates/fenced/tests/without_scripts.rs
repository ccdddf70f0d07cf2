//! Locks where scripts are forbidden: a user whose ACL leaves out `@scripting`, and a client
//! built without scripts. The lock and the unfenced lock work (grants with increasing tokens,
//! renewal, release, the lost signal, wake-ups) beside clients that do send scripts; every
//! other primitive is refused before anything is sent, and inspecting reads every kind.

use std::time::Duration;

use fenced::{Client, Error, WaitPolicy};
use fenced_testkit::RedisServer;
use tokio::time::Instant;

use crate::support::{calls, client, dbsize, eventually, raw, server};

/// What two listings of one moment share (leases left aside, which tick).
fn summary(l: &fenced::inspect::Listing) -> String {
    let locks: Vec<&str> = l.locks.iter().map(|s| s.name.as_str()).collect();
    let semaphores: Vec<_> = l
        .semaphores
        .iter()
        .map(|s| (&s.name, s.held, s.holders, s.next_expiry.is_some()))
        .collect();
    let elections: Vec<_> = l
        .elections
        .iter()
        .map(|e| {
            let leader = e.status.leader.as_ref();
            (
                &e.name,
                leader.map(|l| (&l.value, l.term)),
                e.status.candidates,
            )
        })
        .collect();
    format!(
        "{locks:?} {semaphores:?} {:?} {elections:?} {:?}",
        l.rw_locks, l.unreadable
    )
}

/// A user who may run every command but scripts: `EVAL`, `EVALSHA`, `SCRIPT`, `FCALL`.
async fn no_script_user(server: &RedisServer) -> String {
    let mut conn = raw(server).await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "noscripts",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-@scripting",
        ])
        .query_async(&mut conn)
        .await
        .unwrap();
    format!("redis://noscripts:pw@127.0.0.1:{}", server.port())
}

async fn connect(url: &str) -> Client {
    Client::builder(url)
        .timeout(Duration::from_millis(800))
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_scripts_locks_with_increasing_tokens_beside_clients_with_scripts() {
    let server = server();
    let url = no_script_user(&server).await;
    let without = connect(&url).await;
    let with = client(&server).await;
    let mut conn = raw(&server).await;
    let mut last = None;
    for round in 0..6 {
        // Turn by turn, so each grant finds the other kind's fence.
        let (holder, other) = if round % 2 == 0 {
            (&without, &with)
        } else {
            (&with, &without)
        };
        let g = holder.lock("shared").acquire().await.unwrap();
        let token = g.fencing_token();
        if let Some(last) = last {
            assert!(token > last, "round {round}: {token:?} after {last:?}");
        }
        last = Some(token);
        assert!(other.lock("shared").try_acquire().await.unwrap().is_none());
        g.extend(Duration::from_secs(20)).await.unwrap();
        let pttl: i64 = redis::cmd("PTTL")
            .arg("fenced:{shared}")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(pttl > 10_000, "round {round}: the extend took: {pttl}");
        g.release().await.unwrap();
    }
    // The fence lost whole (a restart without persistence): tokens still go up, by the clock.
    let _: () = redis::cmd("DEL")
        .arg("fenced:{shared}:fence")
        .query_async(&mut conn)
        .await
        .unwrap();
    let g = without.lock("shared").acquire().await.unwrap();
    assert!(Some(g.fencing_token()) > last, "after the fence was lost");
    g.release().await.unwrap();
    let u = without.lock("plain").unfenced().acquire().await.unwrap();
    assert!(
        with.lock("plain")
            .unfenced()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    u.release().await.unwrap();
    assert!(with.lock("plain").try_acquire().await.unwrap().is_some());
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("fenced:{plain}*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    assert!(!keys.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripts_a_held_lock_is_renewed_and_its_loss_is_signalled() {
    let server = server();
    let url = no_script_user(&server).await;
    let without = connect(&url).await;
    let mut conn = raw(&server).await;
    let g = without
        .lock("renewed")
        .with_ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    // Three leases long: alive only if renewed.
    let until = Instant::now() + Duration::from_millis(1800);
    while Instant::now() < until {
        let owner: Option<String> = redis::cmd("GET")
            .arg("fenced:{renewed}")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(owner.is_some(), "the lease ran out while held");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(without.stats().renewed > 0);
    // Taken away: the next renewal finds another owner and says the lease is lost.
    let _: () = redis::cmd("SET")
        .arg(&["fenced:{renewed}", "somebody-else", "PX", "10000"])
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("the loss is signalled");
    assert!(matches!(
        g.release().await,
        Err(Error::LeaseLost { .. }) | Ok(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripts_a_release_wakes_a_waiter_of_another_client() {
    let server = server();
    let url = no_script_user(&server).await;
    let holder = connect(&url).await;
    let waiter = connect(&url).await;
    let g = holder.lock("handed").acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .lock("handed")
            // Polling alone would wake it within seconds: only the announcement is this fast.
            .with_wait(WaitPolicy::up_to(Duration::from_secs(10)))
            .acquire()
            .await
            .map(|g| g.fencing_token())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first = g.fencing_token();
    let released = Instant::now();
    g.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter woke")
        .unwrap()
        .unwrap();
    assert!(next > first);
    assert!(
        released.elapsed() < Duration::from_millis(900),
        "woken by polling, not by the release: {:?}",
        released.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_built_without_scripts_sends_none_and_refuses_other_primitives_before_sending() {
    let server = server();
    let c = Client::builder(&server.url())
        .timeout(Duration::from_millis(800))
        .without_scripts()
        .connect()
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    let g = c.lock("quiet").acquire().await.unwrap();
    g.extend(Duration::from_secs(5)).await.unwrap();
    g.release().await.unwrap();
    let u = c.lock("quiet").unfenced().acquire().await.unwrap();
    u.release().await.unwrap();
    assert_eq!(calls(&mut conn, "evalsha").await, 0);
    assert_eq!(calls(&mut conn, "script|load").await, 0);
    let before = dbsize(&mut conn).await;
    let refused = [
        c.semaphore("pool", 2).try_acquire().await.map(|_| ()),
        c.reentrant_lock("re").try_acquire().await.map(|_| ()),
        c.fair_lock("fifo").try_acquire().await.map(|_| ()),
    ];
    for r in refused {
        match r {
            Err(Error::Unsupported(why)) => assert!(why.contains("script"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(dbsize(&mut conn).await, before, "a refused primitive wrote");
    assert_eq!(calls(&mut conn, "evalsha").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_scripts_is_told_which_primitives_need_them_and_the_lock_still_works() {
    let server = server();
    let url = no_script_user(&server).await;
    let c = connect(&url).await;
    let started = Instant::now();
    let r = c
        .semaphore("pool", 2)
        .with_wait(WaitPolicy::up_to(Duration::from_secs(10)))
        .acquire()
        .await;
    assert!(matches!(&r, Err(Error::Unsupported(_))), "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the wait went on"
    );
    let g = c.lock("still").acquire().await.unwrap();
    g.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || async {
            c.lock("still").try_acquire().await.unwrap().is_some()
        })
        .await
    );
}

/// A lock key of another type (another program wrote it): without scripts, each step answers
/// as its script does, a typed `WrongType` naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripts_a_key_of_another_type_is_a_typed_error_as_with_scripts() {
    let server = server();
    let mut conn = raw(&server).await;
    let _: () = redis::cmd("HSET")
        .arg(&["fenced:{hostile}", "field", "value"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let with = client(&server).await;
    let without = Client::builder(&server.url())
        .timeout(Duration::from_millis(800))
        .without_scripts()
        .connect()
        .await
        .unwrap();
    for c in [&with, &without] {
        let r = c.lock("hostile").try_acquire().await;
        assert!(
            matches!(&r, Err(Error::WrongType { key, .. }) if key == "fenced:{hostile}"),
            "{r:?}"
        );
        let r = c.lock("hostile").unfenced().try_acquire().await;
        assert!(matches!(&r, Err(Error::WrongType { .. })), "{r:?}");
        let r = c.lock("hostile").force_release().await;
        assert!(
            matches!(&r, Err(Error::WrongType { key, .. }) if key == "fenced:{hostile}"),
            "{r:?}"
        );
    }
}

/// A refused script of a primitive that has no way without scripts teaches the client
/// nothing: once the ACL allows scripts, the same client's next call runs its script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_for_a_primitive_without_a_twin_is_not_remembered() {
    let server = server();
    let url = no_script_user(&server).await;
    let c = connect(&url).await;
    let r = c.semaphore("pool", 2).try_acquire().await;
    assert!(matches!(&r, Err(Error::Unsupported(_))), "{r:?}");
    let mut conn = raw(&server).await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "noscripts", "+@scripting"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let permit = c.semaphore("pool", 2).try_acquire().await.unwrap();
    assert!(permit.is_some(), "the script ran once allowed");
    // Another primitive that needs scripts runs its script too.
    let before = calls(&mut conn, "evalsha").await;
    let g = c.fair_lock("plain").acquire().await.unwrap();
    g.release().await.unwrap();
    assert!(calls(&mut conn, "evalsha").await > before);
}

/// Inspecting needs no scripts: a client without them, chosen or refused by the ACL, lists a
/// held semaphore, a read-write lock's readers and waiting writer, and an election's leader
/// (with its changes of leader) and candidates (with their values, one without) as a client
/// with scripts does (a lease past its end not counted, a key of another type named), and
/// each status answers the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripts_list_and_status_read_every_kind_as_a_client_with_scripts_does() {
    let server = server();
    let with = client(&server).await;
    let chosen = Client::builder(&server.url())
        .timeout(Duration::from_millis(800))
        .without_scripts()
        .connect()
        .await
        .unwrap();
    let refused = connect(&no_script_user(&server).await).await;
    let _held = with.lock("plain").acquire().await.unwrap();
    let _permits = with.semaphore("pool", 3).acquire_many(2).await.unwrap();
    let _reader = with.rw_lock("doc").read().await.unwrap();
    let writer = with.rw_lock("doc");
    let writing = tokio::spawn(async move { writer.write().await.map(drop) });
    // A first leader, and a change of leader.
    let gone = with.election("leader").campaign("host-0").await.unwrap();
    gone.resign().await.unwrap();
    let leading = with.election("leader").campaign("host-a").await.unwrap();
    let other = client(&server).await;
    let candidate = other.election("leader");
    let campaigning = tokio::spawn(async move { candidate.campaign("host-b").await.map(drop) });
    assert!(
        eventually(Duration::from_secs(5), || async {
            with.rw_lock("doc").status().await.unwrap().waiting_writers == 1
                && with.election("leader").status().await.unwrap().candidates == 1
        })
        .await,
        "the writer and the candidate never queued"
    );
    let mut conn = raw(&server).await;
    // A candidate queued behind host-b without a value (its campaign recorded none), whose
    // registration does not end while the test runs.
    let _: () = redis::cmd("RPUSH")
        .arg(&["fenced:election:{leader}:queue", "00000000000000aa"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&["fenced:election:{leader}:queue:ends", "00000000000000aa"])
        .arg(i64::MAX / 2)
        .query_async(&mut conn)
        .await
        .unwrap();
    // A holder whose lease ended (not yet swept), and a key another program wrote.
    let _: () = redis::cmd("ZADD")
        .arg(&["fenced:{pool}:permits", "1", "gone"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&["fenced:{pool}:permits:n", "gone", "1"])
        .query_async(&mut conn)
        .await
        .unwrap();
    // A reader whose lease ended and a waiting writer whose registration lapsed: neither
    // counts.
    let _: () = redis::cmd("ZADD")
        .arg(&["fenced:{doc}:readers", "1", "gone-reader"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(&["fenced:{doc}:writers", "1", "gone-writer"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&["fenced:{odd}:permits", "another program's"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let expected = with.list("*").await.unwrap();
    assert_eq!(expected.semaphores.len(), 1, "{expected:?}");
    assert_eq!(expected.rw_locks.len(), 1, "{expected:?}");
    assert_eq!(expected.elections.len(), 1, "{expected:?}");
    assert_eq!(expected.unreadable.len(), 1, "{expected:?}");
    for c in [&chosen, &refused] {
        let listing = c.list("*").await.unwrap();
        assert_eq!(summary(&listing), summary(&expected));
        let pool = c.semaphore("pool", 3).status().await.unwrap();
        assert_eq!((pool.held, pool.holders), (2, 1), "{pool:?}");
        assert!(pool.next_expiry.is_some(), "{pool:?}");
        assert_eq!(c.semaphore("pool", 3).available().await.unwrap(), 1);
        let free = c.semaphore("free", 1).status().await.unwrap();
        assert_eq!((free.held, free.holders, free.next_expiry), (0, 0, None));
        let rw = c.rw_lock("doc").status().await.unwrap();
        assert_eq!((rw.readers, rw.waiting_writers), (1, 1), "{rw:?}");
        assert_eq!(rw, with.rw_lock("doc").status().await.unwrap());
        let election = c.election("leader").status().await.unwrap();
        let scripted = with.election("leader").status().await.unwrap();
        // The same candidates, in the same order, read the same (their queued time ticks).
        let seen = |s: &fenced::ElectionStatus| {
            s.queue
                .iter()
                .map(|q| (q.value.clone(), q.queued_since, q.queued_for.is_some()))
                .collect::<Vec<_>>()
        };
        assert_eq!(seen(&election), seen(&scripted));
        let values: Vec<_> = election.queue.iter().map(|q| q.value.as_deref()).collect();
        assert_eq!(values, [Some("host-b"), None]);
        assert_eq!(election.candidates, 2);
        let leader = election.leader.expect("a leader");
        assert_eq!(
            (leader.value.as_str(), leader.term, leader.transitions),
            ("host-a", leading.term(), 1)
        );
        let expected = scripted.leader.expect("a leader");
        assert_eq!(
            (leader.since, leader.proclaims, leader.transitions),
            (expected.since, expected.proclaims, expected.transitions)
        );
        assert!(
            c.election("nobody")
                .status()
                .await
                .unwrap()
                .leader
                .is_none()
        );
    }
    campaigning.abort();
    writing.abort();
}

/// Holds `leases` locks of `ttl` for `hold` through a proxy adding `one_way` each way, on a
/// client without scripts; answers how many were lost and how many renewal round trips went.
async fn hold_many_without_scripts(
    server: &RedisServer,
    leases: usize,
    ttl: Duration,
    one_way: Duration,
    hold: Duration,
) -> (u64, u64) {
    let proxy = fenced_testkit::LatencyProxy::start(
        std::net::SocketAddr::from(([127, 0, 0, 1], server.port())),
        one_way,
    )
    .unwrap();
    let without = Client::builder(&proxy.url())
        .without_scripts()
        .timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let guards = futures_util::future::join_all((0..leases).map(|i| {
        let lock = without.lock(format!("many-{i}")).with_ttl(ttl);
        async move { lock.acquire().await }
    }))
    .await;
    let guards: Vec<_> = guards.into_iter().map(Result::unwrap).collect();
    let until = Instant::now() + hold;
    while Instant::now() < until {
        if guards.iter().any(|g| g.is_lost()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = without.stats();
    let lost = guards.iter().filter(|g| g.is_lost()).count() as u64;
    assert_eq!(lost, stats.lost, "{stats:?}");
    (lost, stats.batches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripts_six_hundred_leases_behind_a_slow_link_are_all_renewed() {
    let server = server();
    let (lost, batches) = hold_many_without_scripts(
        &server,
        600,
        Duration::from_millis(1500),
        Duration::from_millis(5),
        Duration::from_secs(4),
    )
    .await;
    assert_eq!(lost, 0, "{lost} of 600 leases lost");
    assert!(batches >= 4, "{batches} renewal rounds in 4 s at ttl 1.5 s");
}
