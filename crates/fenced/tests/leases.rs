//! Leases held on terms beyond their ttl: a heartbeat (`with_heartbeat`), renewed only while
//! the holder beats; and a lock delay (`with_lock_delay`), which keeps a lost holder's name
//! taken a while past its lease.

use std::time::Duration;

use fenced::{Client, Error, LostCause, WaitPolicy};
use tokio::time::Instant;

use crate::support::{client, eventually, server};

/// The lock `name`'s holder (the first characters of its owner token), and its lease left in
/// Redis.
async fn holder(c: &Client, name: &str) -> Option<(String, Duration)> {
    let status = c.lock(name).status().await.unwrap();
    status
        .holder
        .map(|h| (h.owner_prefix, h.ttl_left.unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_holder_whose_heartbeat_stops_loses_the_name_within_the_silence_and_a_ttl() {
    let server = server();
    let (a, b) = (client(&server).await, client(&server).await);
    let (ttl, silence) = (Duration::from_millis(300), Duration::from_millis(600));
    let guard = a
        .lock("etl")
        .with_ttl(ttl)
        .with_heartbeat(silence)
        .acquire()
        .await
        .unwrap();
    let (owner, _) = holder(&a, "etl").await.expect("held");
    // Working: a beat every third of a ttl, past the first renewals.
    for _ in 0..4 {
        tokio::time::sleep(ttl / 3).await;
        guard.beat();
    }
    // Then it hangs: no beat any more, and the guard kept, in a process that runs on.
    let last_beat = Instant::now();
    let waiter = tokio::spawn(async move {
        let lock = b
            .lock("etl")
            .with_wait(WaitPolicy::up_to(Duration::from_secs(5)));
        lock.acquire().await.map(|g| (Instant::now(), g))
    });
    tokio::time::timeout(silence + ttl + Duration::from_secs(2), guard.lost())
        .await
        .expect("the lost signal fires once the holder is silent");
    let lost_after = last_beat.elapsed();
    match guard.lease().lost_cause() {
        Some(LostCause::Silent { silent_for }) => {
            assert!(silent_for > silence, "silent for {silent_for:?}")
        }
        other => panic!("lost for {other:?}, not for silence"),
    }
    assert!(
        lost_after + Duration::from_millis(5) >= silence,
        "given up {lost_after:?} after the last beat"
    );
    assert!(
        lost_after <= silence + ttl / 3 + Duration::from_millis(400),
        "given up only {lost_after:?} after the last beat"
    );
    // Given up, not deleted: the key is still the silent holder's, and runs out by its ttl.
    let still = holder(&a, "etl").await.map(|(o, _)| o);
    assert_eq!(
        still.as_deref(),
        Some(owner.as_str()),
        "the key was deleted or taken when the lease was given up"
    );
    let (granted_at, next) = waiter.await.unwrap().unwrap();
    let took = granted_at - last_beat;
    assert!(
        took <= silence + ttl + Duration::from_millis(500),
        "the waiter got the name {took:?} after the last beat"
    );
    assert!(matches!(
        guard.release().await,
        Err(Error::LeaseLost { .. })
    ));
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_beating_holder_keeps_its_lease() {
    let server = server();
    let c = client(&server).await;
    let ttl = Duration::from_millis(300);
    let guard = c
        .lock("steady")
        .with_ttl(ttl)
        .with_heartbeat(ttl)
        .acquire()
        .await
        .unwrap();
    let before = c.stats().renewed;
    // The work beats from a task of its own, every third of a ttl, for three ttls.
    let lease = guard.lease();
    let work = tokio::spawn(async move {
        for _ in 0..9 {
            tokio::time::sleep(ttl / 3).await;
            lease.beat();
        }
    });
    work.await.unwrap();
    assert!(!guard.is_lost(), "lost while beating");
    assert_eq!(guard.lease().lost_cause(), None);
    let renewed = c.stats().renewed - before;
    assert!(renewed >= 4, "{renewed} renewals in three ttls");
    guard.release().await.unwrap();

    // Out of range, refused before anything is sent.
    let silent = c.lock("steady").with_heartbeat(Duration::ZERO);
    assert!(
        matches!(silent.try_acquire().await, Err(Error::InvalidArgument(m)) if m.contains("heartbeat"))
    );
    let forever = c
        .lock("steady")
        .with_lock_delay(fenced::limits::MAX_TTL + Duration::from_secs(1));
    assert!(
        matches!(forever.try_acquire().await, Err(Error::InvalidArgument(m)) if m.contains("lock_delay"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_holder_vanishes_the_next_grant_waits_out_the_lock_delay() {
    let server = server();
    let (a, b) = (client(&server).await, client(&server).await);
    let (ttl, delay) = (Duration::from_millis(300), Duration::from_millis(700));

    // Renewed in the background, the lease lives its ttl and the delay in Redis; its holder
    // counts on the ttl alone.
    let renewed = a
        .lock("renewed")
        .with_ttl(ttl)
        .with_lock_delay(delay)
        .acquire()
        .await
        .unwrap();
    let before = a.stats().renewed;
    let three = eventually(Duration::from_secs(3), || async {
        a.stats().renewed >= before + 3
    })
    .await;
    assert!(three, "not renewed");
    let (_, left) = holder(&a, "renewed").await.expect("held");
    assert!(left > ttl, "a renewal kept the lease {left:?} in Redis");
    assert!(renewed.remaining() <= ttl);
    renewed.release().await.unwrap();

    // A holder that renews (by hand), then vanishes: never renewed nor released again.
    let lock = a
        .lock("vanished")
        .with_ttl(ttl)
        .with_lock_delay(delay)
        .with_auto_renew(false);
    let guard = lock.acquire().await.unwrap();
    let mut last_renewal = Instant::now();
    for _ in 0..2 {
        tokio::time::sleep(ttl / 3).await;
        last_renewal = Instant::now();
        guard.extend(ttl).await.unwrap();
    }
    std::mem::forget(guard);
    let next = b
        .lock("vanished")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await
        .unwrap();
    let waited = last_renewal.elapsed();
    assert!(
        waited + Duration::from_millis(20) >= ttl + delay,
        "granted {waited:?} after the last renewal, within its ttl and the delay"
    );
    assert!(
        waited < ttl + delay + Duration::from_secs(1),
        "granted only {waited:?} after the last renewal"
    );
    next.release().await.unwrap();

    // A holder cut off long enough to lose its lease, whose guard is given back after: the
    // name stays taken until the delay is out too.
    let asked = Instant::now();
    let guard = lock.acquire().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost at its deadline");
    assert_eq!(guard.lease().lost_cause(), Some(LostCause::Expired));
    drop(guard);
    a.flush().await;
    let next = b
        .lock("vanished")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await
        .unwrap();
    let waited = asked.elapsed();
    assert!(
        waited + Duration::from_millis(20) >= ttl + delay,
        "the lost lease's guard freed the name {waited:?} after its grant"
    );
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_name_is_granted_at_once_despite_a_lock_delay() {
    let server = server();
    let (a, b) = (client(&server).await, client(&server).await);
    let delay = Duration::from_secs(30);

    let lock = a.lock("report").with_lock_delay(delay);
    lock.acquire().await.unwrap().release().await.unwrap();
    let next = b.lock("report").try_acquire().await.unwrap();
    next.expect("free at once after a release")
        .release()
        .await
        .unwrap();

    // A guard dropped while its lease is held is given back as a release.
    drop(lock.acquire().await.unwrap());
    a.flush().await;
    let next = b.lock("report").try_acquire().await.unwrap();
    next.expect("free once the dropped guard was given back")
        .release()
        .await
        .unwrap();

    // Every primitive: a semaphore's permit, and a leader that steps down.
    let pool = a.semaphore("pool", 1).with_lock_delay(delay);
    pool.acquire().await.unwrap().release().await.unwrap();
    let permit = b.semaphore("pool", 1).try_acquire().await.unwrap();
    permit
        .expect("a permit back at once")
        .release()
        .await
        .unwrap();
    let election = a.election("leader").with_lock_delay(delay);
    election
        .campaign("a")
        .await
        .unwrap()
        .resign()
        .await
        .unwrap();
    let elected = b
        .election("leader")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(2)))
        .campaign("b")
        .await
        .expect("elected at once after a step down");
    elected.resign().await.unwrap();

    // Released before a minimum hold ends: free at its end, not a delay later.
    let min = Duration::from_millis(500);
    let granted = Instant::now();
    let nightly = a.lock("nightly").with_min_hold(min).with_lock_delay(delay);
    nightly.acquire().await.unwrap().release().await.unwrap();
    let next = b
        .lock("nightly")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await
        .unwrap();
    let free_after = granted.elapsed();
    assert!(free_after >= min, "free {free_after:?} after the grant");
    assert!(
        free_after < min + Duration::from_secs(1),
        "free only {free_after:?} after the grant"
    );
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_hold_of_a_reentrant_lock_lives_by_its_own_heartbeat_and_the_name_by_any_hold() {
    let server = server();
    let (c, other) = (client(&server).await, client(&server).await);
    let (ttl, silence) = (Duration::from_millis(600), Duration::from_millis(300));
    for inner_beats in [false, true] {
        let name = format!("account-{inner_beats}");
        let lock = c
            .reentrant_lock(&name)
            .with_ttl(ttl)
            .with_heartbeat(silence);
        let outer = lock.acquire().await.unwrap();
        let inner = outer.reenter().await.unwrap();
        let (beating, silent) = if inner_beats {
            (inner, outer)
        } else {
            (outer, inner)
        };
        let lease = beating.lease();
        let work = tokio::spawn(async move {
            loop {
                lease.beat();
                tokio::time::sleep(silence / 4).await;
            }
        });
        tokio::time::timeout(silence + ttl + Duration::from_secs(2), silent.lost())
            .await
            .expect("the silent hold is given up");
        assert!(
            matches!(silent.lease().lost_cause(), Some(LostCause::Silent { .. })),
            "inner beats: {inner_beats}: {:?}",
            silent.lease().lost_cause()
        );
        // The beating hold keeps the name, renewal after renewal.
        let kept_until = Instant::now() + 2 * ttl;
        while Instant::now() < kept_until {
            assert!(!beating.is_lost(), "inner beats: {inner_beats}");
            assert!(other.lock(&name).try_acquire().await.unwrap().is_none());
            tokio::time::sleep(ttl / 4).await;
        }
        work.abort();
        beating.release().await.unwrap();
        assert!(matches!(
            silent.release().await,
            Err(Error::LeaseLost { .. })
        ));
        // The silent hold's work may still be writing: its hold is not deleted, and the name
        // is free once its lease runs out.
        let free = eventually(ttl + Duration::from_secs(2), || async {
            match other.lock(&name).try_acquire().await.unwrap() {
                Some(g) => g.release().await.is_ok(),
                None => false,
            }
        })
        .await;
        assert!(free, "inner beats: {inner_beats}: the name stayed taken");
    }
}
