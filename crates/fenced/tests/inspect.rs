//! Looking at locks from outside: status, listing, breaking a lock by force, and flushing
//! background clean-ups.

use std::time::Duration;

use fenced::{Error, WaitPolicy};

use crate::support::{client, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_holder_its_ttl_and_the_last_token() {
    let server = server();
    let c = client(&server).await;
    let lock = c.lock("deploy").with_ttl(Duration::from_secs(20));
    let free = lock.status().await.unwrap();
    assert!(free.holder.is_none());
    assert_eq!(free.fence, None);
    let guard = lock.acquire().await.unwrap();
    let held = lock.status().await.unwrap();
    let holder = held.holder.expect("held");
    assert_eq!(holder.owner_prefix.len(), fenced::limits::OWNER_PREFIX_LEN);
    assert!(holder.ttl_left.is_some_and(|t| t > Duration::from_secs(10)));
    assert_eq!(held.fence, Some(guard.fencing_token()));
    guard.release().await.unwrap();
    assert!(lock.status().await.unwrap().holder.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_reports_its_status_and_every_guard_what_is_left_of_its_lease() {
    use fenced::LeaseGuard;
    let server = server();
    let c = client(&server).await;
    let ttl = Duration::from_secs(20);
    // A re-entrant lock held twice: one holder, two holds.
    let reentrant = c.reentrant_lock("r").with_ttl(ttl);
    let outer = reentrant.acquire().await.unwrap();
    let inner = outer.reenter().await.unwrap();
    let status = reentrant.status().await.unwrap();
    assert!(status.holder.is_some());
    assert_eq!((status.holds, status.queued), (2, 0));
    assert_eq!(status.fence, Some(outer.fencing_token()));
    // A fair lock with one candidate queued behind its holder.
    let fair = c.fair_lock("f").with_ttl(ttl);
    let held = fair.acquire().await.unwrap();
    let other = client(&server).await;
    let queued = tokio::spawn(async move {
        let lock = other
            .fair_lock("f")
            .with_wait(WaitPolicy::up_to(Duration::from_secs(10)));
        lock.acquire().await.map(|g| g.fencing_token())
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while fair.status().await.unwrap().queued == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        fair.status().await.unwrap().fence,
        Some(held.fencing_token())
    );
    // A multi-lock: one status per name, in the order of its names.
    let multi = c.multi_lock(["b", "a"]).unwrap().with_ttl(ttl);
    let both = multi.acquire().await.unwrap();
    let statuses = multi.status().await.unwrap();
    let names: Vec<&str> = statuses.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, multi.names());
    assert!(statuses.iter().all(|s| s.holder.is_some()));
    // A read-write lock: its readers.
    let rw = c.rw_lock("doc").with_ttl(ttl);
    let reader = rw.read().await.unwrap();
    assert_eq!(rw.status().await.unwrap().readers, 1);
    // What is left of each lease: some, at most its ttl, through the guard or its trait.
    fn left(guard: &impl LeaseGuard, ttl: Duration) {
        let remaining = LeaseGuard::remaining(guard);
        assert!(
            remaining > Duration::ZERO && remaining <= ttl,
            "{remaining:?}"
        );
    }
    left(&inner, ttl);
    left(&held, ttl);
    left(&both, ttl);
    left(&reader, ttl);
    assert!(outer.remaining() <= ttl);
    let token = held.fencing_token();
    held.release().await.unwrap();
    assert!(queued.await.unwrap().unwrap() > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_lists_only_held_locks_matching_the_pattern() {
    let server = server();
    let c = client(&server).await;
    let other_ns = fenced::Client::builder(&server.url())
        .namespace("other:")
        .connect()
        .await
        .unwrap();
    let _a = c.lock("job:a").acquire().await.unwrap();
    let _b = c.lock("job:b").acquire().await.unwrap();
    let _x = c.lock("x").acquire().await.unwrap();
    c.lock("job:released")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let _elsewhere = other_ns.lock("job:c").acquire().await.unwrap();
    c.resource("job:res")
        .set(fenced::FencingToken::new(1), "f", "v")
        .await
        .unwrap();
    let names: Vec<String> = c
        .list("job:*")
        .await
        .unwrap()
        .locks
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["job:a", "job:b"]);
    assert_eq!(c.list("*").await.unwrap().locks.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_breaks_the_lock_wakes_waiters_and_the_holder_learns() {
    let server = server();
    let holder = client(&server).await;
    let operator = client(&server).await;
    let waiter = client(&server).await;
    let guard = holder
        .lock("stuck")
        .with_ttl(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    let lock = waiter
        .lock("stuck")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)));
    let waiting = tokio::spawn(async move { lock.acquire().await });
    let was = operator.lock("stuck").force_release().await.unwrap();
    assert_eq!(was.map(|p| p.len()), Some(fenced::limits::OWNER_PREFIX_LEN));
    let next = waiting.await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("holder learns at its next renewal");
    assert!(matches!(
        guard.release().await,
        Err(Error::LeaseLost { .. })
    ));
    next.release().await.unwrap();
    assert_eq!(operator.lock("stuck").force_release().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_waits_for_the_release_of_dropped_guards() {
    let server = server();
    let c = client(&server).await;
    for i in 0..20 {
        drop(c.lock(format!("d{i}")).acquire().await.unwrap());
    }
    let started = tokio::time::Instant::now();
    c.flush().await;
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "flush waited out its bound: {:?}",
        started.elapsed()
    );
    assert!(
        c.list("*").await.unwrap().locks.is_empty(),
        "flush returned before the releases were done"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_lists_more_locks_than_one_inspection_batch() {
    let server = server();
    let c = client(&server).await;
    let mut guards = Vec::new();
    for i in 0..300 {
        guards.push(c.lock(format!("many:{i:03}")).acquire().await.unwrap());
    }
    let listed = c.list("many:*").await.unwrap().locks;
    assert_eq!(listed.len(), 300);
    assert!(
        listed
            .iter()
            .all(|s| s.holder.is_some() && s.fence.is_some())
    );
    assert_eq!(listed[0].name, "many:000");
    assert_eq!(listed[299].name, "many:299");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_finds_every_kind_in_one_scan_pass() {
    let server = server();
    let c = client(&server).await;
    let mut conn = crate::support::raw(&server).await;
    let lock = c.lock("l-lock").acquire().await.unwrap();
    let permit = c.semaphore("l-sem", 2).acquire().await.unwrap();
    let reader = c.rw_lock("l-rw").read().await.unwrap();
    assert!(c.latch("l-latch").arm(3).await.unwrap());
    let scans = crate::support::calls(&mut conn, "scan").await;
    let all = c.list("l-*").await.unwrap();
    assert_eq!(
        crate::support::calls(&mut conn, "scan").await,
        scans + 1,
        "one SCAN pass for every kind"
    );
    let names = |v: Vec<String>| v;
    assert_eq!(
        names(all.locks.iter().map(|l| l.name.clone()).collect()),
        ["l-lock"]
    );
    assert_eq!(all.semaphores.len(), 1);
    assert_eq!(all.semaphores[0].holders, 1);
    assert_eq!(all.rw_locks.len(), 1);
    assert_eq!(all.rw_locks[0].readers, 1);
    assert_eq!(all.latches.len(), 1);
    assert_eq!(all.latches[0].count, 3);
    // Every grant's fence: the lock and the read lease handed out tokens, and the semaphore
    // its own (kept apart, in `:permits:fence`).
    let granted: Vec<(&str, bool)> = all
        .grants
        .iter()
        .map(|g| (g.name.as_str(), g.semaphore))
        .collect();
    assert_eq!(
        granted,
        [("l-lock", false), ("l-rw", false), ("l-sem", true)]
    );
    assert_eq!(all.grants[2].fence, permit.fencing_token());
    lock.release().await.unwrap();
    permit.release().await.unwrap();
    reader.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_names_keys_of_another_type_and_lists_the_rest() {
    let server = server();
    let c = client(&server).await;
    let mut conn = crate::support::raw(&server).await;
    let one = c.lock("t-one").acquire().await.unwrap();
    let two = c.lock("t-two").acquire().await.unwrap();
    // Another program's hash where a lock keeps its string, and a string where a semaphore
    // keeps its holders.
    let _: () = redis::cmd("HSET")
        .arg("fenced:{t-hash}")
        .arg("f")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("fenced:{t-sem}:permits")
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let all = c.list("t-*").await.unwrap();
    let locks: Vec<&str> = all.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(locks, ["t-one", "t-two"]);
    let unreadable: Vec<(&str, &str, &str)> = all
        .unreadable
        .iter()
        .map(|u| (u.name.as_str(), u.key.as_str(), u.kind))
        .collect();
    assert_eq!(
        unreadable,
        [
            ("t-hash", "fenced:{t-hash}", "lock"),
            ("t-sem", "fenced:{t-sem}:permits", "semaphore"),
        ]
    );
    one.release().await.unwrap();
    two.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_grant_moves_the_fence_and_the_next_grant_is_above_it() {
    let server = server();
    let c = client(&server).await;
    let mut conn = crate::support::raw(&server).await;
    // A grant starts the name's fence (a refusal never starts one).
    let lock = c.lock("refused");
    lock.acquire().await.unwrap().release().await.unwrap();
    // Held by a plain `SET NX PX` (another program, say): every grant is refused, and a
    // refusal by transaction still appends to the fence.
    let _: () = redis::cmd("SET")
        .arg("fenced:{refused}")
        .arg("someone")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let started = lock.status().await.unwrap().fence;
    // Until a refusal has appended (one that went by script while the first grants probed
    // the server appends nothing).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let fence = loop {
        assert!(lock.try_acquire().await.unwrap().is_none());
        let fence = lock.status().await.unwrap().fence;
        if let Some(fence) = fence.filter(|_| fence > started) {
            break fence;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no refusal appended to the fence"
        );
    };
    let listed = c.list("*").await.unwrap();
    assert!(
        listed
            .grants
            .iter()
            .any(|g| g.name == "refused" && g.fence >= fence),
        "{:?}",
        listed.grants
    );
    let _: () = redis::cmd("DEL")
        .arg("fenced:{refused}")
        .query_async(&mut conn)
        .await
        .unwrap();
    let guard = lock.try_acquire().await.unwrap().expect("free now");
    assert!(guard.fencing_token() > fence);
    assert_eq!(
        lock.status().await.unwrap().fence,
        Some(guard.fencing_token())
    );
    guard.release().await.unwrap();
}
