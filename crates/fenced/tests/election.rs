//! Elections: a campaign elects with a term, candidates are served in order, a step down
//! elects the next at once, a deposed leader's writes are refused, observers follow the leader
//! in term order and end with their client; a leader that dies is replaced.

use std::time::Duration;

use fenced::resource::FencedWrite;
use fenced::{Client, Error, Leader};
use fenced_testkit::{Fault, Proxy};

use crate::support::{Worker, calls, client, eventually, on_backends, raw, server};

/// The next item of `changes` within 10 s.
async fn next(changes: &mut fenced::LeaderChanges) -> Option<Leader> {
    tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("an observer heard of no change within 10 s")
        .expect("the stream ended")
}

on_backends!(Single, Cluster;
    async fn a_campaign_elects_with_a_term_and_the_leader_reads_back(c, deployment) {
        let election = c.election("reads");
        assert_eq!(election.leader().await.unwrap(), None);
        let leadership = election.campaign("host-a").await.unwrap();
        let leader = election.leader().await.unwrap().expect("a leader");
        assert_eq!(leader.value, "host-a");
        assert_eq!(leader.term, leadership.term());
        assert_eq!(leader.proclaims, 0);
        assert!(leader.lease_left > Duration::ZERO && leader.lease_left <= leadership.lease().remaining() + Duration::from_secs(1));
        leadership.proclaim("host-a:9090").await.unwrap();
        let leader = election.leader().await.unwrap().expect("still leads");
        assert_eq!((leader.value.as_str(), leader.term, leader.proclaims), ("host-a:9090", leadership.term(), 1));
        assert_eq!(leadership.value(), "host-a:9090");
        let other = deployment.client().await;
        assert!(other.election("reads").try_campaign("host-b").await.unwrap().is_none(), "one leader at a time");
        leadership.resign().await.unwrap();
        assert_eq!(election.leader().await.unwrap(), None);
        let next = other.election("reads").try_campaign("host-b").await.unwrap().expect("free after the step down");
        assert!(next.term() > leader.term, "terms increase");
        next.resign().await.unwrap();
    }
);

on_backends!(Single, Cluster;
    async fn observers_see_each_term_and_value_in_order_and_nobody_after_a_step_down(c, deployment) {
        let election = c.election("watched");
        let mut changes = election.observe().unwrap();
        assert_eq!(next(&mut changes).await, None, "nobody leads at first");
        let other = deployment.client().await;
        let mut seen = Vec::new();
        for (i, client) in [&c, &other, &c].into_iter().enumerate() {
            let leadership = client.election("watched").campaign(format!("n{i}")).await.unwrap();
            let leader = next(&mut changes).await.expect("a leader");
            assert_eq!((leader.value.clone(), leader.term), (format!("n{i}"), leadership.term()));
            leadership.proclaim(format!("n{i}'")).await.unwrap();
            let leader = next(&mut changes).await.expect("a leader");
            assert_eq!((leader.value.clone(), leader.proclaims), (format!("n{i}'"), 1));
            seen.push(leader.term);
            leadership.resign().await.unwrap();
            assert_eq!(next(&mut changes).await, None, "a step down is seen");
        }
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "terms in order: {seen:?}");
    }
);

#[tokio::test]
async fn candidates_are_elected_in_the_order_they_campaigned() {
    let server = server();
    let first = client(&server).await;
    let leading = first.election("fifo").campaign("0").await.unwrap();
    let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut candidates = Vec::new();
    for i in 1..=4 {
        // Each candidate in a client of its own that polls only every 20 s: each election
        // comes from the step down that wakes the queue's head.
        let c = Client::builder(&server.url())
            .poll_interval(Duration::from_secs(20), Duration::from_secs(20))
            .connect()
            .await
            .unwrap();
        let tx = tx.clone();
        candidates.push(tokio::spawn(async move {
            let leadership = c.election("fifo").campaign(i.to_string()).await.unwrap();
            tx.send(i).unwrap();
            leadership.resign().await.unwrap();
        }));
        let election = first.election("fifo");
        assert!(
            eventually(Duration::from_secs(5), || async {
                election.status().await.unwrap().candidates == i
            })
            .await,
            "candidate {i} never queued"
        );
    }
    leading.resign().await.unwrap();
    let mut got = Vec::new();
    for _ in 1..=4 {
        let i = tokio::time::timeout(Duration::from_secs(10), order.recv())
            .await
            .expect("a candidate was not elected in its turn");
        got.push(i.unwrap());
    }
    assert_eq!(got, [1, 2, 3, 4]);
    for c in candidates {
        c.await.unwrap();
    }
}

#[tokio::test]
async fn a_step_down_elects_the_next_candidate_without_waiting_for_a_ttl() {
    let server = server();
    let a = client(&server).await;
    let leading = a
        .election("handover")
        .with_ttl(Duration::from_secs(60))
        .campaign("a")
        .await
        .unwrap();
    let b = Client::builder(&server.url())
        .poll_interval(Duration::from_secs(30), Duration::from_secs(30))
        .connect()
        .await
        .unwrap();
    let election = b.election("handover");
    let campaign = tokio::spawn(async move { election.campaign("b").await });
    let status = a.election("handover");
    assert!(
        eventually(Duration::from_secs(5), || async {
            status.status().await.unwrap().candidates == 1
        })
        .await
    );
    leading.resign().await.unwrap();
    // Neither b's polls (30 s) nor a's lease (60 s) can have elected it in this time.
    let next = tokio::time::timeout(Duration::from_secs(10), campaign)
        .await
        .expect("the step down did not wake the next candidate")
        .unwrap()
        .unwrap();
    assert_eq!(status.leader().await.unwrap().unwrap().value, "b");
    next.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_is_told_and_its_writes_with_the_old_term_are_refused() {
    let server = server();
    let proxy = Proxy::start(server.addr()).unwrap();
    let cut_off = Client::builder(&proxy.url())
        .timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let old = cut_off
        .election("deposed")
        .with_ttl(Duration::from_millis(600))
        .campaign("old")
        .await
        .unwrap();
    let c = client(&server).await;
    let orders = c.resource("orders");
    assert_eq!(
        orders.set(old.term(), "last", "old").await.unwrap(),
        FencedWrite::Applied
    );
    // A partition: the leader can no longer renew; the lease ends in Redis.
    proxy.set(Fault::Blackhole);
    tokio::time::timeout(Duration::from_secs(10), old.lost())
        .await
        .expect("the deposed leader was not told");
    let new = c.election("deposed").campaign("new").await.unwrap();
    assert!(new.term() > old.term());
    assert_eq!(
        orders.set(new.term(), "last", "new").await.unwrap(),
        FencedWrite::Applied
    );
    // The old leader's write arrives late: refused by its term.
    assert!(matches!(
        orders.set(old.term(), "last", "old").await.unwrap(),
        FencedWrite::Stale { .. }
    ));
    assert!(matches!(
        old.proclaim("again").await,
        Err(Error::LeaseLost { .. })
    ));
    proxy.set(Fault::Pass);
    new.resign().await.unwrap();
}

/// A worker process: leads `FENCED_ELECTION` (ttl 500 ms), prints "leading" with its term;
/// then, once told its leadership is lost, writes to the resource "orders" with its term and
/// prints whether the write was "refused" or "applied".
#[tokio::test]
async fn worker() {
    let Ok(url) = std::env::var("FENCED_ELECTION_URL") else {
        return; // an ordinary test run: nothing to do
    };
    let name = std::env::var("FENCED_ELECTION").unwrap();
    let c = Client::connect(&url).await.unwrap();
    let leadership = c
        .election(name)
        .with_ttl(Duration::from_millis(500))
        .campaign("worker")
        .await
        .unwrap();
    println!("leading {}", leadership.term());
    leadership.lost().await;
    let write = c
        .resource("orders")
        .set(leadership.term(), "by", "worker")
        .await
        .unwrap();
    println!(
        "{}",
        if write == FencedWrite::Applied {
            "applied"
        } else {
            "refused"
        }
    );
}

#[tokio::test]
async fn a_leader_that_dies_is_replaced_and_observers_see_it_go() {
    let server = server();
    let c = client(&server).await;
    let mut changes = c.election("dies").observe().unwrap();
    assert_eq!(next(&mut changes).await, None);
    let mut worker = Worker::spawn(
        "election::worker",
        &[
            ("FENCED_ELECTION_URL", &server.url()),
            ("FENCED_ELECTION", "dies"),
        ],
    );
    assert!(worker.said("leading").await, "the worker never led");
    let dead = next(&mut changes).await.expect("the worker leads");
    assert_eq!(dead.value, "worker");
    let candidate = c.election("dies");
    let campaign = tokio::spawn(async move { candidate.campaign("heir").await });
    worker.kill();
    // No step down, no announcement: the observer reads again when the lease is due to end.
    let after = next(&mut changes).await;
    let heir = match after {
        None => next(&mut changes).await.expect("the heir leads"),
        Some(l) => l,
    };
    assert_eq!(heir.value, "heir");
    assert!(heir.term > dead.term);
    tokio::time::timeout(Duration::from_secs(10), campaign)
        .await
        .expect("the heir was not elected")
        .unwrap()
        .unwrap()
        .resign()
        .await
        .unwrap();
}

#[tokio::test]
async fn observers_of_one_client_share_one_watcher_and_read_nothing_while_nothing_changes() {
    let server = server();
    let c = client(&server).await;
    let leadership = c
        .election("quiet")
        .with_ttl(Duration::from_secs(30))
        .campaign("only")
        .await
        .unwrap();
    let mut observers: Vec<_> = (0..1000)
        .map(|_| c.election("quiet").observe().unwrap())
        .collect();
    for o in &mut observers {
        assert_eq!(next(o).await.unwrap().value, "only");
    }
    let mut conn = raw(&server).await;
    let before = calls(&mut conn, "evalsha").await;
    // A proclaim: one announcement, one read for all 1,000.
    leadership.proclaim("still").await.unwrap();
    for o in &mut observers {
        assert_eq!(next(o).await.unwrap().value, "still");
    }
    let after = calls(&mut conn, "evalsha").await;
    // The proclaim, and the watcher's read (two at most: a wake-up that finds the watcher
    // reading leaves it one more).
    assert!(
        after - before <= 3,
        "{} script calls for one change seen by 1,000 observers",
        after - before
    );
    leadership.resign().await.unwrap();
}

#[tokio::test]
async fn an_observer_ends_when_its_client_is_dropped() {
    let server = server();
    let c = client(&server).await;
    let election = c.election("ends");
    let mut changes = election.observe().unwrap();
    assert_eq!(next(&mut changes).await, None);
    drop(election);
    drop(c);
    let end = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("the stream did not end with its client");
    assert_eq!(end, None);
}

on_backends!(Redlock;
    async fn on_redlock_campaigns_and_step_downs_work_and_observing_is_refused(c, deployment) {
        let election = c.election("majority");
        let leadership = election.campaign("a").await.unwrap();
        let other = deployment.client().await;
        assert!(other.election("majority").try_campaign("b").await.unwrap().is_none());
        assert!(matches!(election.leader().await, Err(Error::Unsupported(_))));
        assert!(matches!(election.observe(), Err(Error::Unsupported(_))));
        assert!(matches!(leadership.proclaim("a2").await, Err(Error::Unsupported(_))));
        let term = leadership.term();
        leadership.resign().await.unwrap();
        let next = other.election("majority").try_campaign("b").await.unwrap().expect("free");
        assert!(next.term() > term);
        next.resign().await.unwrap();
    }
);

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let server = server();
    let c = client(&server).await;
    assert!(matches!(
        c.election("").campaign("v").await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        c.election("a{b}").observe(),
        Err(Error::InvalidArgument(_))
    ));
    let huge = "x".repeat(fenced::election::MAX_VALUE_LEN + 1);
    assert!(matches!(
        c.election("big").campaign(huge).await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn a_paused_leader_is_replaced_and_its_late_write_is_refused_when_it_wakes() {
    let server = server();
    let c = client(&server).await;
    let mut worker = Worker::spawn(
        "election::worker",
        &[
            ("FENCED_ELECTION_URL", &server.url()),
            ("FENCED_ELECTION", "paused"),
        ],
    );
    assert!(worker.said("leading").await, "the worker never led");
    let paused = c
        .election("paused")
        .leader()
        .await
        .unwrap()
        .expect("the worker leads");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(worker.pid()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    // Its lease runs out while it sleeps; the heir is elected and writes with its term.
    let heir = c.election("paused").campaign("heir").await.unwrap();
    assert!(heir.term() > paused.term);
    let orders = c.resource("orders");
    assert_eq!(
        orders.set(heir.term(), "by", "heir").await.unwrap(),
        FencedWrite::Applied
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert!(
        worker.said("refused").await,
        "the woken leader's write was not refused"
    );
    assert_eq!(
        orders.get("by").await.unwrap().as_deref(),
        Some(&b"heir"[..])
    );
    heir.resign().await.unwrap();
}

#[tokio::test]
async fn a_leader_renewed_for_many_leases_keeps_its_record() {
    let server = server();
    let c = client(&server).await;
    let leadership = c
        .election("long")
        .with_ttl(Duration::from_millis(300))
        .campaign("steady")
        .await
        .unwrap();
    // The record lives a lease and a second past each renewal: without the renewals' refresh
    // it would be gone after 1.3 s.
    let until = tokio::time::Instant::now() + Duration::from_millis(2000);
    while tokio::time::Instant::now() < until {
        let leader = c.election("long").leader().await.unwrap();
        assert_eq!(leader.map(|l| l.term), Some(leadership.term()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!leadership.is_lost());
    leadership.resign().await.unwrap();
}
