//! Redlock over several independent masters: grants by a majority, quorum fencing tokens
//! (largest token written back to a majority before use), decisions that do not wait for slow
//! nodes, partial grants undone, renewal on a majority and the lost signal, `NoQuorum`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use fenced::{Client, Error, WaitPolicy};
use fenced_testkit::{Fault, Proxy, RedisServer};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::support::{eventually, raw, server};

const KEY: &str = "fenced:{report}";
const FENCE: &str = "fenced:{report}:fence";

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| server()).collect()
}

async fn redlock(urls: &[String]) -> Client {
    Client::redlock_builder(urls)
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("a majority answers")
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

async fn get(conn: &mut MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

/// The token of a fence's last ID (`XINFO STREAM`'s `last-generated-id`, `ms-seq`).
async fn fence_token(conn: &mut MultiplexedConnection, key: &str) -> Option<u64> {
    let info: Vec<redis::Value> = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(key)
        .query_async(conn)
        .await
        .ok()?;
    let at = info
        .iter()
        .position(|v| matches!(v, redis::Value::BulkString(b) if b == b"last-generated-id"))?;
    let redis::Value::BulkString(id) = &info[at + 1] else {
        return None;
    };
    let (ms, seq) = std::str::from_utf8(id).ok()?.split_once('-')?;
    Some(ms.parse::<u64>().ok()? * 1000 + seq.parse::<u64>().ok()?)
}

#[tokio::test]
async fn a_lock_is_granted_by_a_majority_and_released_everywhere() {
    let s = servers(3);
    let c = redlock(&urls(&s)).await;
    let guard = c.lock("report").acquire().await.unwrap();
    let mut holders = 0;
    for server in &s {
        holders += usize::from(get(&mut raw(server).await, KEY).await.is_some());
    }
    assert!(holders >= 2, "held on {holders} of 3 nodes");
    assert!(c.lock("report").try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
    for server in &s {
        let conn = raw(server).await;
        assert!(
            eventually(Duration::from_secs(2), || {
                let mut conn = conn.clone();
                async move { get(&mut conn, KEY).await.is_none() }
            })
            .await,
            "a node kept the lock after the release"
        );
    }
    assert!(c.lock("report").try_acquire().await.unwrap().is_some());
}

/// How many scripts node `server` has run (`EVALSHA` calls).
async fn scripts_run(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw(server).await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
async fn masters_that_agree_on_the_proposed_token_need_no_write_back() {
    let s = servers(3);
    // Every master must answer every grant for the premise to hold: a reply that outlived a
    // short timeout on a loaded machine leaves that master out of the grant (correctly), and
    // its fence behind the token.
    let c = Client::redlock_builder(&urls(&s))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("a majority answers");
    // A first cycle loads the scripts. The grant is handed out once a majority answered, and
    // the last master's attempt may run after the release, which then voids it there with a
    // script more: the release waits until every master ran the grant's script.
    let before: Vec<u64> = futures_util::future::join_all(s.iter().map(scripts_run)).await;
    let first = c.lock("report").acquire().await.unwrap();
    let mut last = first.fencing_token().get();
    let loaded = eventually(Duration::from_secs(5), || async {
        let now: Vec<u64> = futures_util::future::join_all(s.iter().map(scripts_run)).await;
        now.iter().zip(&before).all(|(a, b)| a > b)
    })
    .await;
    assert!(loaded, "a master never ran the first grant's script");
    first.release().await.unwrap();
    c.flush().await;
    // A master whose script runs later than the proposal's lead (100 ms: a burst of load on a
    // machine of two cores running four tests and their servers) answers its own clock
    // instead: that cycle takes the write-back path, tested below, and is not counted here.
    // So cycles go on until three agreed, within a deadline rather than a number of cycles.
    let mut agreed = 0;
    let mut cycles = 0;
    let mut last_disagreement = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while agreed < 3 && Instant::now() < deadline {
        cycles += 1;
        let before: Vec<u64> = futures_util::future::join_all(s.iter().map(scripts_run)).await;
        let g = c.lock("report").acquire().await.unwrap();
        let token = g.fencing_token().get();
        assert!(token > last, "tokens must increase: {last} then {token}");
        last = token;
        // The grant is handed out once a majority answered: the last master may still be
        // running its script. Wait until every master ran at least one.
        let ran = eventually(Duration::from_secs(5), || async {
            let now: Vec<u64> = futures_util::future::join_all(s.iter().map(scripts_run)).await;
            now.iter().zip(&before).all(|(a, b)| a > b)
        })
        .await;
        assert!(ran, "a master never ran the grant's script");
        let mut fences = Vec::new();
        for server in &s {
            let fence: u64 = fence_token(&mut raw(server).await, FENCE).await.unwrap();
            fences.push(fence);
        }
        c.flush().await;
        let after: Vec<u64> = futures_util::future::join_all(s.iter().map(scripts_run)).await;
        g.release().await.unwrap();
        c.flush().await;
        // Every master took the proposal: its fence holds the very token handed out, and it
        // ran one script, the grant's, with no write-back.
        if fences.iter().all(|&f| f == token) {
            for (b, a) in before.iter().zip(&after) {
                assert_eq!(a - b, 1, "scripts run on a master for one grant");
            }
            agreed += 1;
        } else {
            last_disagreement = format!("token {token}, fences {fences:?}");
        }
    }
    assert_eq!(
        agreed, 3,
        "the masters agreed on a proposed token in {agreed} of {cycles} cycles (the last \
         that did not: {last_disagreement})"
    );
}

#[tokio::test]
async fn the_quorum_token_is_written_back_so_the_next_holder_gets_a_larger_one() {
    // Node 0's counter runs far ahead of the others (its clock was ahead, say), and node 1 is
    // held by somebody else, so the quorum is nodes 0 and 2 and the token is node 0's. Once
    // node 0 is gone with its counter, the next quorum is nodes 1 and 2: without the
    // write-back to node 2, the next token would go down.
    let s = servers(3);
    let c = redlock(&urls(&s)).await;
    let ahead: u64 = 4_000_000_000_000_000;
    let _: String = redis::cmd("XADD")
        .arg(FENCE)
        .arg(format!("{}-0", ahead / 1000))
        .arg("f")
        .arg(1)
        .query_async(&mut raw(&s[0]).await)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(KEY)
        .arg("someone-else")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut raw(&s[1]).await)
        .await
        .unwrap();
    let a = c.lock("report").acquire().await.unwrap();
    assert_eq!(a.fencing_token().get(), ahead + 1);
    let fence2: u64 = fence_token(&mut raw(&s[2]).await, FENCE).await.unwrap();
    assert!(fence2 > ahead, "the token was not written back to node 2");
    a.release().await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(KEY)
        .query_async(&mut raw(&s[1]).await)
        .await
        .unwrap();
    let mut s = s;
    s[0].kill().unwrap(); // node 0 and its counter are gone
    let b = c
        .lock("report")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await
        .unwrap();
    assert!(b.fencing_token().get() > ahead + 1, "{}", b.fencing_token());
}

#[tokio::test]
async fn five_nodes_grant_with_two_down_and_answer_no_quorum_with_three_down() {
    let mut s = servers(5);
    let c = redlock(&urls(&s)).await;
    // Down: stopped, so that no server of another test can take over a freed port (and be
    // seen as this master restarted).
    s[0].pause().unwrap();
    s[1].pause().unwrap();
    let g = c.lock("report").acquire().await.unwrap();
    g.release().await.unwrap();
    s[2].pause().unwrap();
    let started = Instant::now();
    let out = c
        .lock("report")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(1)))
        .acquire()
        .await;
    let took = started.elapsed();
    assert!(
        matches!(
            out,
            Err(Error::NoQuorum {
                needed: 3,
                nodes: 5,
                ..
            })
        ),
        "{out:?}"
    );
    assert!(took < Duration::from_secs(3), "gave up after {took:?}");
}

#[tokio::test]
async fn a_slow_node_does_not_slow_the_grant() {
    let (_s, proxy, c) = three_masters_the_third_behind_a_proxy().await;
    let slow = Duration::from_secs(1);
    proxy.set(Fault::DelayReplies(slow));
    let lock = c.lock("report");
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let started = Instant::now();
        let g = lock.acquire().await.unwrap();
        slowest = slowest.max(started.elapsed());
        g.release().await.unwrap();
    }
    // Decided by the two fast nodes, never by the one a second away.
    assert!(slowest < slow, "slowest grant {slowest:?}");
}

#[tokio::test]
async fn flush_waits_for_the_releases_still_on_their_way_to_the_slow_master() {
    let (_s, proxy, c) = three_masters_the_third_behind_a_proxy().await;
    let g = c.lock("report").acquire().await.unwrap();
    let slow = Duration::from_secs(1);
    proxy.set(Fault::DelayReplies(slow));
    let started = Instant::now();
    g.release().await.unwrap();
    // Decided by the two fast masters, long before the slow one can answer...
    let decided = started.elapsed();
    assert!(
        decided < slow,
        "the release waited {decided:?} for the slow master"
    );
    // ...while the third one's release is still out: a process exiting now could cut it
    // off, and leave the lock on that master in the next holder's way until its ttl.
    c.flush().await;
    assert!(
        started.elapsed() >= slow,
        "flush returned after {:?}, before the slow master answered",
        started.elapsed()
    );
}

/// Three masters, the third behind a proxy (passing everything for now), and a client of
/// them whose timeout (3 s) outlasts the delays the tests give that proxy: the slow master
/// answers late, but answers.
async fn three_masters_the_third_behind_a_proxy() -> (Vec<RedisServer>, Proxy, Client) {
    let s = servers(3);
    let proxy = Proxy::start(s[2].addr()).unwrap();
    let urls = vec![s[0].url(), s[1].url(), proxy.url()];
    let c = Client::redlock_builder(&urls)
        .timeout(Duration::from_secs(3))
        .connect()
        .await
        .expect("a majority answers");
    (s, proxy, c)
}

/// [`three_masters_the_third_behind_a_proxy`], the third's replies delayed by 400 ms, and a
/// client that knows the release's and the expiry change's ways on every master (an unfenced
/// lock's cycle ran, whose grant needs no script) but has loaded the fenced grant's script
/// nowhere yet. A grant's attempt on the third master then loads the script first, and runs
/// only once that reply came back: long after the two fast masters granted and a release or
/// expiry change, which needs no load, ran there and found nothing.
async fn a_slow_third_master() -> (Vec<RedisServer>, Proxy, Client) {
    let (s, proxy, c) = three_masters_the_third_behind_a_proxy().await;
    let warm = c.lock("warm-up").unfenced().acquire().await.unwrap();
    warm.extend(Duration::from_secs(30)).await.unwrap();
    warm.release().await.unwrap();
    c.flush().await;
    proxy.set(Fault::DelayReplies(Duration::from_millis(400)));
    (s, proxy, c)
}

#[tokio::test]
async fn a_grant_that_reaches_a_master_after_the_release_does_not_keep_the_name_there() {
    let (s, proxy, c) = a_slow_third_master().await;
    let g = c.lock("report").acquire().await.unwrap();
    let owner = get(&mut raw(&s[0]).await, KEY)
        .await
        .expect("held on the first master");
    g.release().await.unwrap();
    c.flush().await;
    // The late grant took the name on the third master, or found it voided: either way it
    // is free there, and not held for a ttl in every later holder's way.
    assert_eq!(get(&mut raw(&s[2]).await, KEY).await, None, "owner {owner}");
    proxy.set(Fault::Pass);
    let again = c.lock("report").acquire().await.unwrap();
    c.flush().await;
    for server in &s {
        assert!(get(&mut raw(server).await, KEY).await.is_some());
    }
    again.release().await.unwrap();
}

#[tokio::test]
async fn a_grant_that_reaches_a_master_during_a_minimum_hold_does_not_outlive_it() {
    let (s, _proxy, c) = a_slow_third_master().await;
    let min = Duration::from_millis(300);
    let g = c.lock("report").with_min_hold(min).acquire().await.unwrap();
    let given_back = Instant::now();
    // Given back before the hold ends: set to expire when it does, not released.
    g.release().await.unwrap();
    c.flush().await;
    // Free on every master once the hold has ended, the late grant on the third included
    // (held for the default ttl of 30 s otherwise).
    let free = eventually(Duration::from_secs(5), || async {
        let mut free = true;
        for server in &s {
            free &= get(&mut raw(server).await, KEY).await.is_none();
        }
        free
    })
    .await;
    assert!(
        free,
        "still held {:?} after the release",
        given_back.elapsed()
    );
}

#[tokio::test]
async fn a_partial_grant_is_given_back() {
    let s = servers(3);
    let c = redlock(&urls(&s)).await;
    for server in &s[1..] {
        let _: () = redis::cmd("SET")
            .arg(KEY)
            .arg("someone-else")
            .arg("PX")
            .arg(60_000)
            .query_async(&mut raw(server).await)
            .await
            .unwrap();
    }
    assert!(c.lock("report").try_acquire().await.unwrap().is_none());
    // Node 0 granted (alone): the attempt is undone there.
    let conn = raw(&s[0]).await;
    assert!(
        eventually(Duration::from_secs(3), || {
            let mut conn = conn.clone();
            async move { get(&mut conn, KEY).await.is_none() }
        })
        .await,
        "the lone grant on node 0 was left behind"
    );
}

#[tokio::test]
async fn renewal_keeps_the_lease_on_a_majority_and_the_lost_signal_fires_without_one() {
    let mut s = servers(3);
    let c = redlock(&urls(&s)).await;
    // Long enough that a renewal delayed by a loaded machine still lands in time.
    let ttl = Duration::from_secs(1);
    let g = c.lock("report").with_ttl(ttl).acquire().await.unwrap();
    // Well past its ttl, still ours everywhere (renewed on every node).
    tokio::time::sleep(ttl * 3).await;
    assert!(!g.lease().is_lost());
    for server in &s {
        assert!(get(&mut raw(server).await, KEY).await.is_some());
    }
    // One node down: still a majority.
    s[0].kill().unwrap();
    tokio::time::sleep(ttl * 2).await;
    assert!(!g.lease().is_lost(), "lost with a majority still up");
    // Two down: no majority can renew; the lost signal fires once the validity runs out.
    s[1].kill().unwrap();
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("the lost signal did not fire");
}

#[tokio::test]
async fn holders_exclude_each_other() {
    let s = servers(3);
    let c = Arc::new(redlock(&urls(&s)).await);
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (c, inside, overlaps) = (c.clone(), inside.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            let mut last = 0;
            for _ in 0..10 {
                let g = c.lock("report").acquire().await.unwrap();
                assert!(g.fencing_token().get() > last);
                last = g.fencing_token().get();
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn what_needs_one_server_is_refused_with_a_typed_error() {
    let s = servers(3);
    let c = redlock(&urls(&s)).await;
    let refused = |r: Result<(), Error>| matches!(r, Err(Error::Unsupported(_)));
    assert!(refused(c.reentrant_lock("r").acquire().await.map(drop)));
    assert!(refused(
        c.resource("r")
            .set(fenced::FencingToken::new(1), "f", "v")
            .await
            .map(drop)
    ));
    assert!(refused(c.lock("report").status().await.map(drop)));
    assert!(refused(
        c.transaction(&["k"], |_tx| async { Ok::<_, Error>(()) })
            .await
            .map(drop)
    ));
    // Bad deployments are refused before anything is sent.
    let two = [s[0].url(), s[1].url()];
    assert!(matches!(
        Client::redlock_builder(&two).connect().await,
        Err(Error::InvalidArgument(_))
    ));
    let none: [String; 0] = [];
    assert!(matches!(
        Client::redlock_builder(&none).connect().await,
        Err(Error::InvalidArgument(_))
    ));
    let twice = [s[0].url(), s[0].url(), s[1].url()];
    assert!(matches!(
        Client::redlock_builder(&twice).connect().await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn a_restarted_master_does_not_vote_until_its_grace_has_passed() {
    let mut s = servers(3);
    let urls = urls(&s);
    let grace = Duration::from_secs(3);
    // The contender knows every master's run_id from its connect.
    let contender = Client::redlock_builder(&urls)
        .timeout(Duration::from_millis(500))
        .redlock_restart_grace(grace)
        .connect()
        .await
        .unwrap();
    let holder = redlock(&urls).await;
    let held = holder
        .lock("report")
        .with_ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    // Two masters restart without persistence: they forgot the holder's lock, which is still
    // held on the third. Their votes alone would make a majority for the contender.
    s[0].restart().unwrap();
    s[1].restart().unwrap();
    let restarted = Instant::now();
    let mut answered_attempts = 0;
    while restarted.elapsed() < grace / 2 {
        // Attempts may meet reset connections (an error, never a grant) for as long as the
        // restarted masters take to come back; the others reach them, and their votes must
        // not count.
        match contender.lock("report").try_acquire().await {
            Ok(Some(_)) => panic!("a restarted master's vote gave the lock to a second holder"),
            Ok(None) => answered_attempts += 1,
            Err(_) => {}
        }
        tokio::task::yield_now().await;
    }
    assert!(
        answered_attempts > 1,
        "the contender was not answered during the grace"
    );
    // The holder cannot renew on a majority any more: its lease is lost.
    tokio::time::timeout(Duration::from_secs(5), held.lost())
        .await
        .expect("the holder did not hear that it lost the lease");
    // After the grace, the restarted masters vote again.
    let g = contender
        .lock("report")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(15)))
        .acquire()
        .await
        .unwrap();
    assert!(restarted.elapsed() >= grace);
    g.release().await.unwrap();
}

#[tokio::test]
async fn one_failing_master_does_not_block_a_majority() {
    let s = servers(3);
    // Master 2 is out of memory (noeviction): every write there fails.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query_async(&mut raw(&s[2]).await)
        .await
        .unwrap();
    let c = redlock(&urls(&s)).await;
    let g = c.lock("report").acquire().await.unwrap();
    g.release().await.unwrap();
}

#[tokio::test]
async fn busy_attempts_leave_nothing_behind() {
    let s = servers(3);
    let holder = redlock(&urls(&s)).await;
    // A timeout long enough that a loaded machine's replies all come back in it: a reply
    // that times out leaves its attempt's outcome unknown, and that one IS abandoned.
    let contender = Client::redlock_builder(&urls(&s))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("a majority answers");
    let g = holder.lock("report").acquire().await.unwrap();
    for _ in 0..20 {
        assert!(
            contender
                .lock("report")
                .try_acquire()
                .await
                .unwrap()
                .is_none()
        );
    }
    // A busy attempt decided by a majority of "busy" replies is clean: no abandon follows,
    // so no tombstone appears on any master (checked after the late replies had time to come
    // back and be read).
    tokio::time::sleep(Duration::from_millis(300)).await;
    for server in &s {
        let keys = crate::support::all_keys(&mut raw(server).await).await;
        assert!(!keys.iter().any(|k| k.contains(":void:")), "{keys:?}");
    }
    g.release().await.unwrap();
}

/// A holder takes "report"; a waiter of another client, which polls only every 10 s, waits
/// until it is subscribed on master `on`; the release must wake it within 3 s.
async fn a_release_wakes_a_waiter_subscribed_on(s: &[RedisServer], on: usize) {
    let holder = redlock(&urls(s)).await;
    // Only the release's message can wake it in time.
    let waiter = Client::redlock_builder(&urls(s))
        .poll_interval(Duration::from_secs(10), Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    let g = holder.lock("report").acquire().await.unwrap();
    let waiting = tokio::spawn(async move { waiter.lock("report").acquire().await });
    let conn = raw(&s[on]).await;
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move {
                let subs: Vec<(String, i64)> = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg("fenced:{report}:released")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                subs.first().is_some_and(|(_, n)| *n >= 1)
            }
        })
        .await
    );
    g.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("the waiter was not woken by the release")
        .unwrap()
        .unwrap();
    got.release().await.unwrap();
}

#[tokio::test]
async fn a_release_is_heard_on_the_first_master_even_when_it_did_not_hold_the_lock() {
    let s = servers(3);
    // Master 0 holds another program's lock on the name: the holder gets masters 1 and 2.
    let _: () = redis::cmd("SET")
        .arg(KEY)
        .arg("someone-else")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut raw(&s[0]).await)
        .await
        .unwrap();
    // The waiter has made its first attempt and waits on master 0's channel.
    a_release_wakes_a_waiter_subscribed_on(&s, 0).await;
}

#[tokio::test]
async fn a_release_is_heard_while_the_first_master_is_down() {
    let mut s = servers(3);
    s[0].kill().unwrap();
    // The waiter's subscription went to the next master that answers.
    a_release_wakes_a_waiter_subscribed_on(&s, 1).await;
}

#[tokio::test]
async fn a_semaphore_of_two_permits_admits_at_most_two_holders_and_needs_every_master() {
    let mut s = servers(3);
    let c = Arc::new(redlock(&urls(&s)).await);
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (c, inside, most) = (c.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let mut last = 0;
            for _ in 0..8 {
                let p = c.semaphore("pool", 2).acquire().await.unwrap();
                assert!(p.fencing_token().get() > last);
                last = p.fencing_token().get();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                p.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "{} holders at once",
        most.load(Ordering::SeqCst)
    );
    // Two permits over three masters need all three (a majority would let three holders in):
    // with one master down, no permit can be had.
    s[0].kill().unwrap();
    let out = c
        .semaphore("pool", 2)
        .with_wait(WaitPolicy::up_to(Duration::from_millis(500)))
        .acquire()
        .await
        .map(drop);
    assert!(
        matches!(
            out,
            Err(Error::NoQuorum {
                needed: 3,
                nodes: 3,
                ..
            })
        ),
        "{out:?}"
    );
    // One permit is a lock: a majority is enough.
    let one = c.semaphore("single", 1).acquire().await.unwrap();
    one.release().await.unwrap();
}
