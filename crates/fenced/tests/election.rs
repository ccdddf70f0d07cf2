//! Elections: a campaign elects with a term, candidates are served in order, a step down
//! elects the next at once, a deposed leader's writes are refused, observers follow the leader
//! in term order and end with their client; a leader that dies, or stops beating, is replaced.
//! The status lists the candidates with their values and counts the changes of leader; a
//! leader yields to a chosen candidate.

use std::time::Duration;

use fenced::resource::FencedWrite;
use fenced::{Client, Error, Leader, LostCause};
use fenced_testkit::{Fault, Proxy};

use crate::support::{Worker, calls, client, eventually, on_backends, raw, server};

/// The next item of `changes` within 10 s.
async fn next(changes: &mut fenced::LeaderChanges) -> Option<Leader> {
    tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("an observer heard of no change within 10 s")
        .expect("the stream ended")
}

/// The values of the candidates `election` lists, in order.
async fn queued(election: &fenced::Election) -> Vec<Option<String>> {
    let status = election.status().await.unwrap();
    status.queue.into_iter().map(|c| c.value).collect()
}

/// Waits (up to 5 s) until `election` counts `n` candidates.
async fn until_queued(election: &fenced::Election, n: u64) {
    assert!(
        eventually(Duration::from_secs(5), || async {
            election.status().await.unwrap().candidates == n
        })
        .await,
        "{n} candidate(s) never queued"
    );
}

/// The leadership `campaign` won, within 10 s.
async fn elected(
    campaign: tokio::task::JoinHandle<fenced::Result<fenced::Leadership>>,
) -> fenced::Leadership {
    tokio::time::timeout(Duration::from_secs(10), campaign)
        .await
        .expect("the candidate was not elected within 10 s")
        .unwrap()
        .unwrap()
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
        assert!(matches!(leadership.yield_to("b").await, Err(Error::Unsupported(_))));
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

on_backends!(Single, Cluster;
    async fn candidates_are_listed_in_queue_order_with_their_values_and_a_growing_queued_time(c, deployment) {
        let election = c.election("listed");
        let leading = election.campaign("leader").await.unwrap();
        let mut others = Vec::new();
        let mut campaigns = Vec::new();
        for i in 1..=3u64 {
            // One after the other, each in a client of its own: the queue's order is known.
            let other = deployment.client().await;
            let candidate = other.election("listed");
            campaigns.push(tokio::spawn(async move { candidate.campaign(format!("c{i}")).await }));
            others.push(other);
            until_queued(&election, i).await;
        }
        let first = election.status().await.unwrap();
        let values: Vec<_> = first.queue.iter().map(|q| q.value.as_deref()).collect();
        assert_eq!(values, [Some("c1"), Some("c2"), Some("c3")]);
        let since: Vec<_> = first.queue.iter().map(|q| q.queued_since.expect("recorded")).collect();
        assert!(since.windows(2).all(|w| w[0] <= w[1]), "in the order they queued: {since:?}");
        let waited: Vec<_> = first.queue.iter().map(|q| q.queued_for.expect("recorded")).collect();
        assert!(waited.windows(2).all(|w| w[0] >= w[1]), "the oldest has queued longest: {waited:?}");
        // The server's clock runs on: each has queued longer, in the same order.
        let head = waited[0];
        assert!(
            eventually(Duration::from_secs(5), || async {
                let now = election.status().await.unwrap();
                now.queue.first().and_then(|q| q.queued_for) > Some(head + Duration::from_millis(50))
                    && now.queue.iter().map(|q| q.queued_since).eq(first.queue.iter().map(|q| q.queued_since))
            })
            .await,
            "the head's queued time never grew"
        );
        // Elected: off the list. Given up: off the list at once.
        leading.resign().await.unwrap();
        let mut campaigns = campaigns.into_iter();
        let c1 = elected(campaigns.next().unwrap()).await;
        assert_eq!(election.leader().await.unwrap().unwrap().value, "c1");
        assert_eq!(queued(&election).await, [Some("c2".to_owned()), Some("c3".to_owned())]);
        let c2 = campaigns.next().unwrap();
        campaigns.next().unwrap().abort();
        assert!(
            eventually(Duration::from_secs(5), || async {
                queued(&election).await == [Some("c2".to_owned())]
            })
            .await,
            "the candidate that gave up is still listed"
        );
        c1.resign().await.unwrap();
        elected(c2).await.resign().await.unwrap();
        let last = election.status().await.unwrap();
        assert_eq!((last.candidates, last.queue), (0, Vec::new()));
    }
);

#[tokio::test]
async fn transitions_count_each_change_of_leader_and_outlive_the_leader_record() {
    let server = server();
    let c = client(&server).await;
    let election = c.election("changes");
    let first = election.campaign("a").await.unwrap();
    let leader = election.leader().await.unwrap().expect("a leads");
    assert_eq!(leader.transitions, 0, "the first leader is no change");
    let other = client(&server).await;
    // Short leases: the record lives a lease and a second past the last renewal.
    let candidate = other
        .election("changes")
        .with_ttl(Duration::from_millis(300));
    let campaign = tokio::spawn(async move { candidate.campaign("b").await });
    until_queued(&election, 1).await;
    first.resign().await.unwrap();
    let second = elected(campaign).await;
    let leader = election.leader().await.unwrap().expect("b leads");
    assert_eq!((leader.value.as_str(), leader.transitions), ("b", 1));
    second.resign().await.unwrap();
    // Nobody leads, and the record of the last leader runs out.
    let conn = raw(&server).await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            let left: i64 = redis::cmd("EXISTS")
                .arg("fenced:election:{changes}:leader")
                .query_async(&mut conn.clone())
                .await
                .unwrap();
            left == 0
        })
        .await,
        "the leader record never expired"
    );
    assert_eq!(election.leader().await.unwrap(), None);
    let third = election.campaign("c").await.unwrap();
    let leader = election.leader().await.unwrap().expect("c leads");
    assert_eq!((leader.value.as_str(), leader.transitions), ("c", 2));
    third.resign().await.unwrap();
}

on_backends!(Single, Cluster;
    async fn yield_to_a_queued_value_elects_that_candidate_next_with_a_greater_term(c, deployment) {
        let election = c.election("yield");
        let leading = election.clone().with_ttl(Duration::from_secs(60)).campaign("v1").await.unwrap();
        // Two candidates: the head of the queue advertises another value.
        let (a, b) = (deployment.client().await, deployment.client().await);
        let head = a.election("yield");
        let first_in_line = tokio::spawn(async move { head.campaign("other").await });
        until_queued(&election, 1).await;
        let preferred = b.election("yield");
        let preferred = tokio::spawn(async move { preferred.campaign("v2").await });
        until_queued(&election, 2).await;
        let mut changes = election.observe().unwrap();
        assert_eq!(next(&mut changes).await.expect("v1 leads").value, "v1");

        assert!(leading.yield_to("v2").await.unwrap(), "v2 is queued");
        assert!(leading.is_lost(), "the yielder no longer leads");
        let next_leader = elected(preferred).await;
        assert!(next_leader.term() > leading.term(), "a greater term");
        let leader = election.leader().await.unwrap().expect("v2 leads");
        assert_eq!((leader.value.as_str(), leader.term), ("v2", next_leader.term()));
        // Observers see it; the former head still waits, first in line.
        let seen = match next(&mut changes).await {
            None => next(&mut changes).await.expect("v2 leads"),
            Some(l) => l,
        };
        assert_eq!((seen.value.as_str(), seen.term), ("v2", next_leader.term()));
        assert!(!first_in_line.is_finished());
        assert_eq!(queued(&election).await, [Some("other".to_owned())]);
        // The yielded leadership has nothing left to give back.
        leading.resign().await.unwrap();
        assert_eq!(election.leader().await.unwrap().map(|l| l.term), Some(next_leader.term()));
        next_leader.resign().await.unwrap();
        elected(first_in_line).await.resign().await.unwrap();
    }
);

#[tokio::test]
async fn yield_to_a_value_no_candidate_advertises_answers_false_and_keeps_the_leadership() {
    let server = server();
    let c = client(&server).await;
    let election = c.election("stays");
    let leading = election.campaign("v1").await.unwrap();
    assert!(
        !leading.yield_to("v2").await.unwrap(),
        "nobody queued at all"
    );
    let other = client(&server).await;
    let candidate = other.election("stays");
    let campaign = tokio::spawn(async move { candidate.campaign("other").await });
    until_queued(&election, 1).await;
    assert!(
        !leading.yield_to("v2").await.unwrap(),
        "only another value queued"
    );
    assert!(!leading.is_lost());
    let leader = election.leader().await.unwrap().expect("still leads");
    assert_eq!((leader.value.as_str(), leader.term), ("v1", leading.term()));
    assert_eq!(queued(&election).await, [Some("other".to_owned())]);
    leading.proclaim("v1'").await.unwrap();
    leading.resign().await.unwrap();
    elected(campaign).await.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_stops_beating_is_replaced_and_observers_see_the_next_leader() {
    let server = server();
    let c = client(&server).await;
    let election = c.election("beats");
    let mut changes = election.observe().unwrap();
    assert_eq!(next(&mut changes).await, None);
    let (ttl, silence) = (Duration::from_millis(300), Duration::from_millis(600));
    let silent = election
        .clone()
        .with_ttl(ttl)
        .with_heartbeat(silence)
        .campaign("silent")
        .await
        .unwrap();
    assert_eq!(next(&mut changes).await.expect("it leads").value, "silent");
    let other = client(&server).await;
    let heir = other.election("beats");
    let campaign = tokio::spawn(async move { heir.campaign("heir").await });
    until_queued(&election, 1).await;
    // No beat: the leader hangs while its process runs on, its leadership kept.
    tokio::time::timeout(silence + ttl + Duration::from_secs(5), silent.lost())
        .await
        .expect("a silent leader loses its leadership");
    assert!(
        matches!(silent.lease().lost_cause(), Some(LostCause::Silent { .. })),
        "{:?}",
        silent.lease().lost_cause()
    );
    let seen = match next(&mut changes).await {
        None => next(&mut changes).await.expect("the heir leads"),
        Some(l) => l,
    };
    assert_eq!(seen.value, "heir");
    assert!(seen.term > silent.term());
    assert_eq!(seen.transitions, 1);
    elected(campaign).await.resign().await.unwrap();
    drop(silent);
}
