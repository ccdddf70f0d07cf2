//! Redis Sentinel: a client that follows the master through failovers (asked for, and
//! forced by killing the master), and what replica acknowledgements (`WAIT`) change when a
//! failover loses the last writes.

use std::time::Duration;

use fenced::resource::FencedWrite;
use fenced::{Client, Error, WaitPolicy};
use fenced_testkit::RedisSentinels;
use tokio::time::Instant;

fn sentinels(replicas: usize) -> RedisSentinels {
    match RedisSentinels::start(replicas, 3) {
        Ok(s) => s,
        Err(e) => panic!("this test needs real redis-server sentinels: {e}"),
    }
}

async fn through(set: &RedisSentinels, acks: Option<usize>) -> Client {
    let mut b = Client::sentinel_builder(&set.sentinel_urls(), "mymaster")
        .timeout(Duration::from_millis(800));
    if let Some(n) = acks {
        b = b.replica_acks(n, Duration::from_millis(100));
    }
    b.connect().await.expect("connect through Sentinel")
}

/// Retries `f` while it fails transiently (a failover in progress), up to 20 s.
async fn riding_out<T, F, Fut>(mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = fenced::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("did not recover from the failover: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_and_a_transaction_follow_the_master_through_failovers() {
    let mut set = sentinels(2);
    let a = through(&set, None).await;
    let b = through(&set, None).await;
    // Renewals sent to the old master while a replica is being promoted are lost with it:
    // the lease survives if one reaches the new master within a ttl of the last one it has.
    // A failover takes the sentinels 1 to 2 s here, more on a loaded machine.
    let ttl = Duration::from_secs(10);
    let g = a.lock("payroll").with_ttl(ttl).acquire().await.unwrap();
    let first = g.fencing_token();

    // A failover the sentinels are asked for: the replicas are in sync, the lease survives
    // and is renewed on the new master.
    let old = set.master().unwrap();
    let new = tokio::task::block_in_place(|| set.failover()).unwrap();
    assert_ne!(old, new);
    // Once the old master is a replica of the new one, only a client that found the new
    // master can still renew.
    tokio::task::block_in_place(|| set.wait_synced()).unwrap();
    riding_out(|| g.extend(ttl)).await;
    let renewed = a.stats().renewed;
    let deadline = Instant::now() + ttl;
    while a.stats().renewed < renewed + 1 {
        assert!(Instant::now() < deadline, "no renewal after the failover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!g.lease().is_lost(), "the lease did not follow the master");
    assert!(
        riding_out(|| {
            let l = b.lock("payroll");
            async move { l.try_acquire().await }
        })
        .await
        .is_none()
    );
    g.release().await.unwrap();
    let next = riding_out(|| {
        let l = b.lock("payroll");
        async move { l.try_acquire().await }
    })
    .await
    .expect("free after the release");
    assert!(next.fencing_token() > first, "tokens must increase");
    next.release().await.unwrap();

    // Transactions locate the master when they connect.
    let n: i64 = riding_out(|| {
        b.transaction(&["counter"], |tx| async move {
            let v: Option<i64> = tx.get("counter").await?;
            tx.set("counter", v.unwrap_or(0) + 1);
            Ok::<_, Error>(v.unwrap_or(0) + 1)
        })
    })
    .await;
    assert_eq!(n, 1);

    // The master dies: the sentinels promote a replica after noticing (1 s), and the client
    // goes there.
    tokio::task::block_in_place(|| set.wait_synced()).unwrap();
    let held = a
        .lock("payroll")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(10)))
        .acquire()
        .await
        .unwrap();
    let held_token = held.fencing_token();
    tokio::task::block_in_place(|| set.wait_synced()).unwrap(); // the grant is on every replica
    set.node(new).kill().unwrap();
    let newer = tokio::task::block_in_place(|| set.wait_for_new_master(new)).unwrap();
    assert_ne!(newer, new);
    assert!(
        riding_out(|| {
            let l = b.lock("payroll");
            async move { l.try_acquire().await }
        })
        .await
        .is_none(),
        "the replicated lease survives the promotion"
    );
    riding_out(|| held.extend(Duration::from_secs(30))).await;
    held.release().await.unwrap();
    let after = riding_out(|| {
        let l = b.lock("payroll");
        async move { l.try_acquire().await }
    })
    .await
    .expect("free after the release");
    assert!(after.fencing_token() > held_token);
    after.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_wait_a_failover_can_lose_a_grant_and_with_wait_no_holder_relies_on_one() {
    // Without WAIT: the only replica is frozen and cut off while A is granted the lock, the
    // master dies, the replica (which never saw the grant) is promoted, and B is granted the
    // same lock while A still believes it holds it. Fencing tokens still increase: the
    // replica holds the name's fence as it was a few grants earlier, and the next ID on that
    // older stream comes from the promoted server's clock, past every token handed out.
    let mut set = sentinels(1);
    let acked = through(&set, Some(1)).await;
    for _ in 0..3 {
        let g = acked.lock("x").acquire().await.unwrap();
        g.release().await.unwrap();
    }
    let a = through(&set, None).await;
    set.node(1).pause().unwrap();
    set.cut_replicas(0).unwrap();
    // Granted past what the replica has.
    for _ in 0..2 {
        let g = a.lock("x").acquire().await.unwrap();
        g.release().await.unwrap();
    }
    let a_guard = a
        .lock("x")
        .with_ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    set.node(0).kill().unwrap();
    set.node(1).resume().unwrap();
    let promoted = tokio::task::block_in_place(|| set.wait_for_new_master(0)).unwrap();
    assert_eq!(promoted, 1);
    let b = through(&set, None).await;
    let b_guard = riding_out(|| {
        let l = b.lock("x");
        async move { l.try_acquire().await }
    })
    .await
    .expect("the promoted replica never saw A's grant");
    let overlap = !a_guard.is_lost();
    assert!(overlap, "A still believes it holds the lock: two holders");
    assert!(
        b_guard.fencing_token() > a_guard.fencing_token(),
        "a count on the promoted replica's older fence repeated a token: {} after {}",
        b_guard.fencing_token(),
        a_guard.fencing_token()
    );
    // A fenced resource refuses A, and A learns it lost the lease at its next renewal.
    let res = b.resource("ledger");
    assert_eq!(
        res.set(b_guard.fencing_token(), "v", "b").await.unwrap(),
        FencedWrite::Applied
    );
    assert!(matches!(
        res.set(a_guard.fencing_token(), "v", "a").await.unwrap(),
        FencedWrite::Stale { .. }
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    let learned = loop {
        match a_guard.extend(Duration::from_secs(30)).await {
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => break other,
        }
    };
    assert!(matches!(learned, Err(Error::NotHeld { .. })), "{learned:?}");
    drop(set);

    // With WAIT 1: the same frozen replica makes the grant fall short, so it is given back
    // and the acquire fails with NotReplicated; nobody believes in a grant a failover could
    // lose. A fenced write that falls short says so too.
    let mut set = sentinels(1);
    let c = through(&set, Some(1)).await;
    let ok = c.lock("y").acquire().await.unwrap(); // replica up: acknowledged
    let token = ok.fencing_token();
    set.node(1).pause().unwrap();
    let started = Instant::now();
    let refused = c
        .lock("x")
        .with_wait(WaitPolicy::up_to(Duration::from_millis(600)))
        .acquire()
        .await;
    let took = started.elapsed();
    assert!(
        matches!(
            refused,
            Err(Error::NotReplicated {
                operation: "acquire",
                acked: 0,
                needed: 1
            })
        ),
        "{refused:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "bounded by the wait: {took:?}"
    );
    assert!(matches!(
        c.resource("ledger").set(token, "v", "c").await,
        Err(Error::NotReplicated {
            operation: "fenced write",
            ..
        })
    ));
    set.node(1).resume().unwrap();
    c.flush().await;
    // The refused grant was given back: free for anybody once the replica answers.
    let later = c.lock("x").acquire().await.unwrap();
    later.release().await.unwrap();
    ok.release().await.unwrap();
    eprintln!(
        "failover losing the last writes: without WAIT, two holders (A believed, B granted; B's token larger); with WAIT 1, the unreplicated grant was refused in {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_follows_the_master_and_its_observers_never_go_backwards() {
    let mut set = sentinels(2);
    let a = through(&set, Some(1)).await;
    let b = through(&set, Some(1)).await;
    let mut changes = b.election("primary").observe().unwrap();
    let next = async |changes: &mut fenced::LeaderChanges| {
        tokio::time::timeout(Duration::from_secs(20), changes.next())
            .await
            .expect("no change seen within 20 s")
            .expect("the stream ended")
    };
    assert_eq!(next(&mut changes).await, None);
    let ttl = Duration::from_secs(10);
    let leading = a
        .election("primary")
        .with_ttl(ttl)
        .campaign("a")
        .await
        .unwrap();
    let first = next(&mut changes).await.expect("a leads");
    assert_eq!(first.term, leading.term());

    // The master dies; a replica that has the grant (acknowledged by one) is promoted.
    tokio::task::block_in_place(|| set.wait_synced()).unwrap();
    let old = set.master().unwrap();
    set.node(old).kill().unwrap();
    tokio::task::block_in_place(|| set.wait_for_new_master(old)).unwrap();
    riding_out(|| leading.extend(ttl)).await;
    assert!(
        !leading.is_lost(),
        "the leadership did not follow the master"
    );
    riding_out(|| leading.proclaim("a'")).await;
    let seen = next(&mut changes).await.expect("still a");
    assert_eq!((seen.term, seen.value.as_str()), (first.term, "a'"));

    leading.resign().await.unwrap();
    assert_eq!(next(&mut changes).await, None);
    // A campaign rides out what is left of the failover itself: an attempt of unknown outcome
    // (a timeout) holds the name until it is abandoned, which wakes the candidate.
    let heir = b
        .election("primary")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(20)))
        .campaign("b")
        .await
        .expect("elected after the step down");
    // An attempt granted without the replica's acknowledgement is given back at once, and
    // observers may see it lead briefly: every term they see is newer, up to the heir's.
    let mut last = first.term;
    loop {
        let Some(seen) = next(&mut changes).await else {
            continue;
        };
        assert!(seen.term > last, "terms increase across the failover");
        last = seen.term;
        if seen.term == heir.term() {
            break;
        }
    }
    heir.resign().await.unwrap();
}

/// Without scripts, each lock step runs on a dedicated connection to the master: after a
/// failover, one made for the old master is never used again, even while that old master,
/// paused through the failover and not yet told, still takes writes on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripts_a_lock_follows_the_master_and_never_renews_on_a_demoted_one() {
    let mut set = sentinels(2);
    let a = Client::sentinel_builder(&set.sentinel_urls(), "mymaster")
        .timeout(Duration::from_millis(800))
        .without_scripts()
        .connect()
        .await
        .expect("connect through Sentinel");
    // Long enough for a failover's time on a loaded machine, without renewal.
    let ttl = Duration::from_secs(30);
    let g = a
        .lock("payroll")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    // Leaves a dedicated connection to the old master idle.
    g.extend(ttl).await.unwrap();
    tokio::task::block_in_place(|| set.wait_synced()).unwrap();
    let old = set.master().unwrap();
    set.node(old).pause().unwrap();
    let new = tokio::task::block_in_place(|| set.wait_for_new_master(old)).unwrap();
    // The client's main connection finds the new master.
    let _probe = riding_out(|| {
        let l = a.lock("probe").unfenced();
        async move { l.try_acquire().await }
    })
    .await
    .expect("the probe's name is free");
    // Back, and still a master until the sentinels tell it otherwise: the idle connection
    // to it is open, and it would take the extend.
    set.node(old).resume().unwrap();
    riding_out(|| g.extend(Duration::from_secs(120))).await;
    let pttl = |url: String| async move {
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        redis::cmd("PTTL")
            .arg("fenced:{payroll}")
            .query_async::<i64>(&mut conn)
            .await
            .unwrap()
    };
    assert!(
        pttl(set.node(new).url()).await > 60_000,
        "the extend did not reach the new master"
    );
    assert!(
        pttl(set.node(old).url()).await < 60_000,
        "the extend went to the demoted master"
    );
}
