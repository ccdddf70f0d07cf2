//! The guard never claims more validity than Redis grants, and a lease ends for every clone
//! when its guard gives it back; each on a real server, through the fault proxy where a fault
//! is needed.

use std::time::Duration;

use fenced::{Client, Error, WaitPolicy};
use fenced_testkit::{Fault, Proxy};
use tokio::time::Instant;

use crate::support::{client, eventually, lock_key, raw, server};

async fn client_via(proxy: &Proxy, timeout: Duration) -> Client {
    Client::builder(&proxy.url())
        .timeout(timeout)
        .connect()
        .await
        .unwrap()
}

/// Redis's view of a lease: the key's pttl if `owner_of(name)` is still the value.
async fn pttl(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(lock_key(name))
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_extend_whose_reply_is_lost_shortens_the_guards_deadline() {
    let server = server();
    let proxy = Proxy::start(server.addr()).unwrap();
    let c = client_via(&proxy, Duration::from_millis(500)).await;
    let other = client(&server).await;
    let guard = c
        .lock("short-extend")
        .with_ttl(Duration::from_secs(30))
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    // Load the script first, so the cut strikes the extend's own reply, not a NOSCRIPT.
    guard.extend(Duration::from_secs(30)).await.unwrap();
    // Redis applies the 200ms, but the answer dies with the connection.
    proxy.set(Fault::CutNextReply);
    let sent = Instant::now();
    let r = guard.extend(Duration::from_millis(200)).await;
    assert!(r.is_err(), "{r:?}");
    assert_eq!(proxy.fault(), Fault::Pass, "the fault struck");
    assert!(
        guard.valid_until() <= sent + Duration::from_millis(200),
        "the guard still claims {:?} after an extend(200ms) of unknown outcome",
        guard.lease().remaining()
    );
    // Another client gets the lock once the 200ms are over; by then the guard says so.
    let taken = other
        .lock("short-extend")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await
        .unwrap();
    assert!(guard.is_lost(), "another client holds the lock");
    assert!(matches!(
        guard.lease().check(),
        Err(Error::LeaseLost { .. })
    ));
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_shorter_extend_shortens_the_deadline_and_renewal_follows_it() {
    let server = server();
    let proxy = Proxy::start(server.addr()).unwrap();
    let c = client_via(&proxy, Duration::from_secs(2)).await;
    let mut direct = raw(&server).await;
    let guard = c
        .lock("cancelled-extend")
        .with_ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    // The request goes out, the reply is slow, and the caller stops waiting for it.
    proxy.set(Fault::DelayReplies(Duration::from_millis(300)));
    let sent = Instant::now();
    let extend = guard.extend(Duration::from_millis(600));
    assert!(
        tokio::time::timeout(Duration::from_millis(50), extend)
            .await
            .is_err()
    );
    assert!(guard.valid_until() <= sent + Duration::from_millis(600));
    proxy.set(Fault::Pass);
    // Renewal now runs on the short schedule and keeps the lease: held for 5 short ttls.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let remaining = guard.lease().remaining();
        let left = pttl(&mut direct, "cancelled-extend").await;
        assert!(left > 0, "the lock expired while the guard was renewing it");
        assert!(
            remaining <= Duration::from_millis(600),
            "the guard claims {remaining:?} of a 600ms lease"
        );
        assert!(!guard.is_lost());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    guard.release().await.unwrap();
}

/// The review's race: a renewal batch held up by a partition, an `extend` to a shorter ttl
/// sent meanwhile, and both delivered when it heals, in either order. The guard's deadline
/// must follow the ttl Redis applied last: never claim more than the server's pttl (safety),
/// and never declare a lease lost that Redis still holds for it (liveness).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_racing_a_delayed_renewal_batch_follows_the_ttl_redis_applied_last() {
    let server = server();
    let mut direct = raw(&server).await;
    for round in 0..4 {
        let proxy = Proxy::start(server.addr()).unwrap();
        let c = client_via(&proxy, Duration::from_millis(250)).await;
        let name = format!("race-{round}");
        let ttl = Duration::from_millis(1500);
        let guard = c.lock(&name).with_ttl(ttl).acquire().await.unwrap();
        // The first renewal falls due after a third of the ttl: hold it up in the proxy.
        tokio::time::sleep(ttl / 3 - Duration::from_millis(60)).await;
        proxy.set(Fault::Blackhole);
        tokio::time::sleep(Duration::from_millis(150)).await;
        let lease = guard.lease();
        let extend = tokio::spawn(async move {
            let r = guard.extend(Duration::from_millis(900)).await;
            (guard, r)
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.set(Fault::Pass);
        let (guard, _) = extend.await.unwrap();
        // Watch both views for two short ttls.
        let until = Instant::now() + Duration::from_millis(1800);
        while Instant::now() < until {
            // The claim is read before the PTTL is asked for, and Redis evaluates it at some
            // moment of the round trip: a correct claim is at most what Redis had left plus
            // that round trip (a loaded machine's reply may take tens of ms). Read after the
            // reply instead, a renewal confirmed in between would make a correct claim look
            // too long.
            let asked = Instant::now();
            let claimed = lease.remaining();
            let left = pttl(&mut direct, &name).await;
            let round_trip = asked.elapsed();
            if !claimed.is_zero() {
                assert!(
                    left >= 0
                        && Duration::from_millis(left as u64)
                            + round_trip
                            + Duration::from_millis(20)
                            >= claimed,
                    "round {round}: the guard claims {claimed:?}, Redis has {left}ms \
                     ({round_trip:?} to ask)"
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if lease.is_lost() {
            let left = pttl(&mut direct, &name).await;
            assert!(
                left < 0,
                "round {round}: lost() fired while Redis still holds the key for {left}ms"
            );
        } else {
            guard.release().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_guards_lease_clones_say_the_lease_has_ended() {
    let server = server();
    let c = client(&server).await;
    let guard = c.lock("clone").acquire().await.unwrap();
    let lease = guard.lease();
    let token = lease.cancellation_token();
    assert!(lease.check().is_ok());
    guard.release().await.unwrap();
    assert!(matches!(lease.check(), Err(Error::LeaseEnded { .. })));
    assert!(lease.is_lost());
    assert!(lease.is_released());
    assert_eq!(lease.remaining(), Duration::ZERO);
    tokio::time::timeout(Duration::from_millis(100), lease.lost())
        .await
        .expect("lost() resolves once the guard has released");
    assert!(token.is_cancelled());

    // The same when the guard is dropped, as when its task ends or panics.
    let guard = c.lock("clone").acquire().await.unwrap();
    let lease = guard.lease();
    drop(guard);
    assert!(matches!(lease.check(), Err(Error::LeaseEnded { .. })));
    assert!(lease.is_lost());
    // A new holder's lease is not affected.
    let next = c.lock("clone").acquire().await.unwrap();
    assert!(next.lease().check().is_ok());
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_holding_a_lease_clone_in_with_lock_stops_at_release() {
    let server = server();
    let c = client(&server).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    c.lock("spawned")
        .with_lock(|lease| async move {
            // Work spawned with a clone outlives the section.
            let _ = tx.send(lease);
        })
        .await
        .unwrap();
    let lease = rx.await.unwrap();
    assert!(
        lease.check().is_err(),
        "a clone passed a checkpoint after release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_rides_out_a_two_second_partition_within_its_deadline() {
    let server = server();
    let proxy = Proxy::start(server.addr()).unwrap();
    let waiter = client_via(&proxy, Duration::from_millis(300)).await;
    let holder = client(&server).await;
    let held = holder.lock("blip").acquire().await.unwrap();
    let lock = waiter
        .lock("blip")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(30)));
    let waiting = tokio::spawn(async move { lock.acquire().await });
    // The waiter has tried once and waits.
    assert!(
        eventually(Duration::from_secs(5), || async {
            let mut conn = raw(&server).await;
            let subs: (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(format!("{}:released", lock_key("blip")))
                .query_async(&mut conn)
                .await
                .map(|v: Vec<(String, i64)>| v[0].clone())
                .unwrap();
            subs.1 > 0
        })
        .await
    );
    const CUT: Duration = Duration::from_secs(2);
    proxy.set(Fault::Blackhole);
    held.release().await.unwrap();
    tokio::time::sleep(CUT).await;
    proxy.set(Fault::Pass);
    let got = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the waiter finishes")
        .unwrap();
    assert!(got.is_ok(), "a transient fault ended the wait: {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_error_ends_the_wait_at_once() {
    let server = server();
    let mut conn = raw(&server).await;
    // A user who may not run scripts: every attempt at a re-entrant lock (it needs a script)
    // fails, saying so.
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
        ])
        .query_async(&mut conn)
        .await
        .unwrap();
    let url = format!("redis://app:pw@127.0.0.1:{}", server.port());
    let c = Client::builder(&url)
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    let r = c
        .reentrant_lock("wrong")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(10)))
        .acquire()
        .await;
    assert!(
        matches!(&r, Err(Error::Unsupported(why)) if why.contains("evalsha")),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}
